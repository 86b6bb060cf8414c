"""Linear probes on the residual stream (issue #66): does layer k's stream say which label a text has?

For every example (a text, already tokenized, and a label) the stream at one stage of every block
(`blocks.{i}.hook_resid_pre` or `hook_resid_post`) is read and pooled over the example's tokens:
`mean` (the default: every position counts, so a label spread over the passage is seen) or `last`
(the last token's, the only position that has read the whole text in a causal model). The
features are standardised with the training half's mean and spread, and a multinomial logistic
regression (softmax over the labels, L2 on the standardised weights) is fitted per layer by
full-batch L-BFGS for a fixed number of iterations from zero weights, so the same examples give
the same probe every time.

What a probe's held-out accuracy means depends on two baselines, both returned:

- the majority baseline: always answer the training half's most common label;
- the control: the same probe on the same examples read from a randomly initialised GPT of the
  same config (`GPT(cfg)` after `torch.manual_seed(seed)`). A probe on a wide enough random stream
  can already pick up the tokens themselves (a name, a rare word), so only the accuracy above the
  control's is what training put into the stream.

Each layer's probe direction is returned in the stream's own units (the standardisation undone):
for two labels one vector, w_1 - w_0 (positive: towards the second label); for more, one row per
label. Beside it the DiffMean direction: for two labels mean(second) - mean(first), for more each
label's mean minus the mean of the other labels' examples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .config import GPTConfig, count_params
from .gpt import GPT
from .hooks import hook_name

POOLS = ("mean", "last")
STAGES = ("resid_pre", "resid_post")
MAX_EXAMPLES = 2_000  # examples per probe, both halves together
BATCH_TOKENS = 4_096  # tokens per forward pass (rows x the batch's longest)
MAX_BATCH = 64
LBFGS_STEPS = 50  # L-BFGS iterations per layer
FLOAT = 4


@dataclass(frozen=True)
class ProbeConfig:
    stage: str = "resid_post"
    pool: str = "mean"
    seed: int = 0
    l2: float = 0.1  # on the standardised weights, added to the mean cross-entropy as l2 / 2 * |W|^2
    steps: int = LBFGS_STEPS


@dataclass
class LayerProbe:
    layer: int
    accuracy: float  # on the test half
    train_accuracy: float
    weight: torch.Tensor  # (n_labels, d) in the stream's units
    bias: torch.Tensor  # (n_labels,)
    diffmean: torch.Tensor  # (d,) for two labels, else (n_labels, d)

    @property
    def direction(self) -> torch.Tensor:
        """(d,) w_1 - w_0 for two labels; the (n_labels, d) rows for more."""
        return self.weight[1] - self.weight[0] if self.weight.shape[0] == 2 else self.weight


@dataclass
class ProbeResult:
    layers: list[LayerProbe]
    control: list[LayerProbe]  # the same probes on a randomly initialised model
    majority: float  # test accuracy of always answering the training half's most common label
    majority_label: int


def batches(rows: list[list[int]], causal: bool) -> list[list[int]]:
    """Indices of rows in batches of similar length (shortest first), at most BATCH_TOKENS tokens and
    MAX_BATCH rows each. A causal model's right padding never reaches a row's own positions; a model
    that is not causal gets batches of equal lengths only."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out: list[list[int]] = []
    for i in order:
        n = len(rows[i])
        fits = out and len(out[-1]) < MAX_BATCH and n * (len(out[-1]) + 1) <= BATCH_TOKENS
        if fits and (causal or len(rows[out[-1][0]]) == n):
            out[-1].append(i)
            continue
        out.append([i])
    return out


@torch.no_grad()
def stream_features(
    model: GPT,
    rows: list[list[int]],
    stage: str,
    pool: str,
    on_batch: Callable[[list[int], dict[str, torch.Tensor], torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """(n_layer, N, d) float32: each row's stream at `stage` of every block, pooled over its tokens.
    on_batch(batch's row indices, the captured streams (B, T, d) by hook name, mask (B, T)) sees each
    batch's pass too (a caller that wants more of the same streams reads them there)."""
    if stage not in STAGES or pool not in POOLS:
        raise ValueError(f"stage must be one of {STAGES} and pool one of {POOLS}")
    cfg = model.cfg
    device = next(model.parameters()).device
    names = [hook_name(f"hook_{stage}", i) for i in range(cfg.n_layer)]
    out = torch.empty(cfg.n_layer, len(rows), cfg.d_model)
    for batch in batches(rows, cfg.causal):
        T = max(len(rows[i]) for i in batch)
        idx = torch.zeros(len(batch), T, dtype=torch.long)
        mask = torch.zeros(len(batch), T)
        for j, i in enumerate(batch):
            idx[j, : len(rows[i])] = torch.tensor(rows[i])
            mask[j, : len(rows[i])] = 1.0
        lengths = mask.sum(1)
        with model.capture(names) as cache:
            model.hidden(idx.to(device))
        for layer, name in enumerate(names):
            h = cache[name].float().cpu()  # (B, T, d)
            if pool == "mean":
                pooled = (h * mask[..., None]).sum(1) / lengths[:, None]
            else:
                pooled = h[torch.arange(len(batch)), lengths.long() - 1]
            out[layer, torch.tensor(batch)] = pooled
        if on_batch is not None:
            on_batch(batch, cache, mask)
    return out


def fit_probe(
    x: torch.Tensor, y: torch.Tensor, n_labels: int, l2: float, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (n_labels, d), b (n_labels,)) minimising mean cross-entropy + l2 / 2 |W|^2 on standardised
    features x (N, d), by full-batch L-BFGS from zeros (deterministic)."""
    x = x.detach().clone().double()
    W = torch.zeros(n_labels, x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(n_labels, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=steps, history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(x @ W.T + b, y) + 0.5 * l2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return W.detach(), b.detach()


def diffmean(x: torch.Tensor, y: torch.Tensor, n_labels: int) -> torch.Tensor:
    """Difference of class means in x's units: (d,) mean(label 1) - mean(label 0) for two labels,
    else (n_labels, d), each label's mean minus the mean of the other labels' examples."""
    means, rest = [], []
    for c in range(n_labels):
        inside, outside = x[y == c], x[y != c]
        means.append(inside.mean(0) if len(inside) else torch.zeros(x.shape[1]))
        rest.append(outside.mean(0) if len(outside) else torch.zeros(x.shape[1]))
    if n_labels == 2:
        return means[1] - means[0]
    return torch.stack([m - r for m, r in zip(means, rest)])


def _accuracy(x: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> float:
    if len(y) == 0:
        return 0.0
    return float(((x.double() @ W.T + b).argmax(1) == y).double().mean())


def probe_layer(
    layer: int,
    train: torch.Tensor,
    y_train: torch.Tensor,
    test: torch.Tensor,
    y_test: torch.Tensor,
    n_labels: int,
    cfg: ProbeConfig,
) -> LayerProbe:
    """One layer's probe: standardise with the training half's statistics, fit, score both halves,
    and turn the weights back into the stream's units (W / sd; the bias takes the mean)."""
    mu = train.mean(0)
    sd = train.std(0, unbiased=False).clamp_min(1e-6 * float(train.std().clamp_min(1e-12)))
    z_train, z_test = (train - mu) / sd, (test - mu) / sd
    W, b = fit_probe(z_train, y_train, n_labels, cfg.l2, cfg.steps)
    W_raw = W / sd.double()
    return LayerProbe(
        layer,
        _accuracy(z_test, y_test, W, b),
        _accuracy(z_train, y_train, W, b),
        W_raw.float(),
        (b - W_raw @ mu.double()).float(),
        diffmean(train, y_train, n_labels),
    )


def probe_all(
    features: torch.Tensor, y: torch.Tensor, n_train: int, n_labels: int, cfg: ProbeConfig
) -> list[LayerProbe]:
    """A probe per layer of features (n_layer, N, d) whose first n_train examples are the training half."""
    y_train, y_test = y[:n_train], y[n_train:]
    return [probe_layer(i, f[:n_train], y_train, f[n_train:], y_test, n_labels, cfg) for i, f in enumerate(features)]


def control_model(cfg: GPTConfig, seed: int, device: torch.device | str = "cpu") -> GPT:
    """A GPT of the same config with fresh random weights (torch.manual_seed(seed)), in eval and explain mode."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = GPT(cfg)
    finally:
        torch.random.set_rng_state(state)
    return model.to(device).eval().set_mode("explain")


def run_probes(
    model: GPT, train: list[tuple[list[int], int]], test: list[tuple[list[int], int]], n_labels: int, cfg: ProbeConfig
) -> ProbeResult:
    """Probes per layer on model and on a random model of its config, with the majority baseline.
    Rows are token ids (at most n_ctx each), labels 0..n_labels-1."""
    rows = [r for r, _ in train] + [r for r, _ in test]
    y = torch.tensor([lab for _, lab in train] + [lab for _, lab in test])
    n_train = len(train)
    trained = stream_features(model, rows, cfg.stage, cfg.pool)
    device = next(model.parameters()).device
    control = stream_features(control_model(model.cfg, cfg.seed, device), rows, cfg.stage, cfg.pool)
    counts = torch.bincount(y[:n_train], minlength=n_labels)
    majority_label = int(counts.argmax())
    majority = float((y[n_train:] == majority_label).double().mean()) if len(test) else 0.0
    with torch.inference_mode(False):
        return ProbeResult(
            probe_all(trained.clone(), y.clone(), n_train, n_labels, cfg),
            probe_all(control.clone(), y.clone(), n_train, n_labels, cfg),
            majority,
            majority_label,
        )


def peak_bytes(cfg: GPTConfig, n_examples: int, longest: int) -> int:
    """An upper bound on run_probes' transient memory: the random model's weights, both models'
    pooled features (and the float64 copy one fit makes), and one batch's forward pass in explain
    mode (each block's attention maps, its widest activations, every captured stream)."""
    weights = count_params(cfg)["total"] * FLOAT
    features = 2 * cfg.n_layer * n_examples * cfg.d_model * FLOAT + 3 * n_examples * cfg.d_model * 8
    T = max(1, min(longest, cfg.n_ctx))
    rows = max(1, min(MAX_BATCH, BATCH_TOKENS // T, n_examples))
    maps = 3 * rows * cfg.n_head * T * T * FLOAT
    width = max(cfg.d_mlp * max(1, cfg.top_k_experts), 3 * cfg.d_model, (cfg.n_head + 2 * cfg.n_kv_head) * cfg.d_head)
    acts = 6 * rows * T * width * FLOAT
    captured = (cfg.n_layer + 1) * rows * T * cfg.d_model * FLOAT
    return weights + features + maps + acts + captured
