"""Which input tokens a prediction came from: integrated gradients on the input embeddings, and three
baselines to read it against (gradient x input, attention rollout, occlusion).

The prediction is a number f read off the logits z at one position p: the target token's logit,
f = z_p[target], or a logit difference, f = z_p[target] - z_p[contrast]. The input is x, the rows of
W_E for the prompt's tokens (T, d); a learned position embedding is added after them and is held
fixed, as is everything else the model computes. The baseline x' is stated with every answer:

    zero   every token's row replaced by zeros (the positions' own embeddings stay)
    mean   every token's row replaced by the mean row of W_E (an "average token")

Integrated gradients (Sundararajan et al. 2017) integrate the gradient along the straight path from
x' to x, here by a quadrature rule of `steps` points a_k with weights w_k on [0, 1] (`quadrature`):

    IG_i = (x_i - x'_i) . sum_k w_k df/dx_i (x' + a_k (x - x'))

summed over the d numbers of token i: Gauss-Legendre (the default; its error falls about as fast as a
smooth f's derivatives allow, far faster than any Riemann sum: at most 0.14% at 32 points on every
family measured where f is smooth along the path) or the midpoint rule (a_k = (k + 1/2) / steps,
w_k = 1 / steps; its error falls as 1 / steps^2). Completeness: the IG_i add up to f(x) - f(x') up to
the rule's error; every answer reports that error, so the numbers can be checked.

Which baseline lets the error fall depends on the model (`default_baseline`). With a learned position
embedding added to the input (GPT-2, the built-in model), the zero baseline's stream is the position
rows and f changes smoothly along the path. Without one (RoPE: Llama, Gemma, Pythia, ...), the zero
baseline's stream is zero, and the first norm (RMSNorm or LayerNorm) rescales a tiny input to full
size: f jumps within a few hundredths of a = 0 (where a|x| is about the norm's sqrt(eps)), neither rule
resolves the jump, and on tiny Llama- and Gemma-shaped models the error stays 11% to 210% even at 1,024
steps (benchmarks/ig_convergence.py). There the mean baseline keeps the path away from zero, f is
smooth, and the error falls as above.

The methods beside it:

    gradient x input  (x_i - x'_i) . df/dx_i (x): the gradient at the input alone (one step at a = 1;
                      with the zero baseline, plain gradient x input)
    occlusion         f(x) - f(x with token i's row replaced by the baseline's): one token ablated at a
                      time
    rollout           attention rollout (Abnar & Zuidema 2020): each layer's attention averaged over
                      heads, mixed half and half with the identity for the residual stream, multiplied
                      through the layers; row p says how much of position p's stream comes from each
                      input position. It ignores the MLPs, the norms and the target, and sums to 1.

A causal model's position p reads tokens 0..p only: its row is computed on that prefix, and the
later tokens have no attribution (None). nanochat's block reads the tokens again beside W_E (its value
embeddings) and smears each embedding into the next one, so the input is not W_E's rows alone:
`check_model` refuses it by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch

from .gpt import GPT, GPTConfig, hook_name
from .patching import Cancelled

BASELINES = ("zero", "mean")
RULES = ("gauss_legendre", "midpoint")
TOKENS_PER_CHUNK = 4096  # rows x positions of one batched pass, at most (its activations' memory)
CHUNK_MACS = 2e10  # and at most about this many multiply-adds of the blocks (a second or two on 2 cores)


def check_model(cfg: GPTConfig) -> None:
    """Raise ValueError when the input of this config is more than W_E's rows."""
    if cfg.nanochat_stream:  # (a softcap on the logits alone is f's own: `unembed`)
        raise ValueError(
            f"token attribution interpolates the input embeddings; nanochat's block ({', '.join(cfg.extras)}) also "
            "reads the tokens through its value embeddings and smears each embedding into the next, so the input "
            "is more than W_E's rows and gptscope does not attribute it yet"
        )


def default_baseline(cfg: GPTConfig) -> tuple[str, str]:
    """The baseline whose path integral converges on this model, and why (module docstring)."""
    if cfg.pos == "learned":
        return "zero", (
            "this model adds a learned position embedding to the input, so at the zero baseline the stream is "
            "still the position rows and f changes smoothly along the path"
        )
    return "mean", (
        f"this model adds no position embedding ({cfg.pos}): at the zero baseline its stream is zero, and its "
        f"{cfg.norm_type} rescales a tiny input to full size, so f jumps near the baseline and integrated gradients "
        "need not converge (Llama- and Gemma-shaped models: 11% to 210% error even at 1,024 steps); the mean "
        "embedding keeps the path away from zero, where f is smooth"
    )


@dataclass(frozen=True)
class Row:
    """One prediction to explain: f = z_position[target] - z_position[contrast] (contrast None: 0)."""

    position: int
    target: int
    contrast: int | None = None


@dataclass
class RowResult:
    row: Row
    f_input: float
    f_baseline: float
    integrated_gradients: torch.Tensor  # (n,) n: the tokens the position reads
    gradient_x_input: torch.Tensor
    occlusion: torch.Tensor
    rollout: torch.Tensor


def baseline_rows(model: GPT, x: torch.Tensor, kind: str) -> torch.Tensor:
    """x' (T, d) for the input rows x (T, d)."""
    if kind == "zero":
        return torch.zeros_like(x)
    if kind == "mean":
        return model.wte.weight.detach().mean(0).expand_as(x).clone()
    raise ValueError(f"baseline must be one of {BASELINES}, not {kind!r}")


@contextmanager
def embedded(model: GPT, rows: torch.Tensor) -> Iterator[GPT]:
    """Inside the block the model reads `rows` (B, T, d) instead of W_E's rows for its tokens."""
    handle = model.hook_embed.register_forward_hook(lambda _m, _i, _out: rows)
    try:
        yield model
    finally:
        handle.remove()


def metric(z: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
    """f for each batch item: z (B, V) the logits at that item's row's position."""
    idx = torch.arange(len(rows), device=z.device)
    f = z[idx, torch.tensor([r.target for r in rows], device=z.device)]
    contrast = [r.contrast if r.contrast is not None else r.target for r in rows]
    sub = z[idx, torch.tensor(contrast, device=z.device)]
    has = torch.tensor([r.contrast is not None for r in rows], device=z.device)
    return torch.where(has, f - sub, f)


def run_rows(model: GPT, ids: torch.Tensor, rows_in: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
    """f of each batch item: ids (B, n) with input rows rows_in (B, n, d); item b's f is read at its
    row's position."""
    with embedded(model, rows_in):
        h = model.hidden(ids)  # (B, n, d)
    at = torch.tensor([r.position for r in rows], device=h.device)
    z = model.unembed(h[torch.arange(len(rows), device=h.device), at])  # (B, V)
    return metric(z, rows)


def chunk_tokens(model: GPT) -> int:
    """Token-positions per batched pass: TOKENS_PER_CHUNK, fewer for a large model so that one pass (the
    time the model's lock is held) stays about CHUNK_MACS (the built-in model: 4,096; GPT-2 small: 235)."""
    per_token = sum(p.numel() for p in model.blocks.parameters())
    return max(1, min(TOKENS_PER_CHUNK, int(CHUNK_MACS // max(per_token, 1))))


def pass_points(chunk: int, n: int, steps: int) -> int:
    """Points of a row's path in one batched pass (`gradients`) of a row that reads n tokens."""
    return min(steps, max(1, chunk // n))


OVERHEAD = 32 * 2**20  # what a run takes whatever its size (torch's buffers, Python's objects)


def peak_bytes(cfg: GPTConfig, T: int, n_rows: int, steps: int, chunk: int, item: int = 4) -> int:
    """An upper bound of the bytes `attribute` takes at its peak beyond the model, for n_rows rows of a
    T-token prompt at `steps` points, `chunk` token-positions a pass (chunk_tokens), the model's numbers
    `item` bytes each. The steps add passes, not memory: a pass holds at most `chunk` token-positions (or
    one row's n), and its backward pass keeps, per token-position and block, about 12 numbers of the
    stream's width, 4 of the MLP's (6 gated; times the experts a token visits) and 6 of every head's
    attention row (measured on the built-in model, VmHWM: 5,800 to 6,100 numbers per token-position and
    block at 128 tokens, where this says 8,400; 7,700 to 8,900 at 256, where it says 11,500; the whole
    peak within 1.2-1.5x of the estimate from 16 to 256 tokens). Beside the larger of that pass and
    prepare's (every head's pattern of the prompt kept for rollout, occlusion's passes without gradients,
    the rows' logits), what every row keeps: the input and baseline rows, occlusion, rollout, the results."""
    L, d, nh, V = cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size
    mlp = cfg.d_mlp * (6 if cfg.gated else 4) * (cfg.top_k_experts if cfg.n_expert else 1)
    points = pass_points(chunk, T, steps)  # the longest row reads T tokens (a causal model's last position)
    tokens = points * T
    grad = tokens * L * (12 * d + mlp + 6 * nh * T) * item + 2 * points * V * item
    occluded = min(T, max(1, chunk // T)) * T  # token-positions of one occlusion pass
    prepare = (L * nh * T * T + occluded * (8 * d + mlp + 4 * nh * T) + 2 * n_rows * V) * item + 3 * T * T * 8
    kept = (2 * T * d + T * n_rows + T * T + 4 * n_rows * T) * item
    return kept + max(grad, prepare) + OVERHEAD


def span(cfg: GPTConfig, position: int, T: int) -> int:
    """How many tokens position `position` reads: a causal model's prefix, else all T."""
    return position + 1 if cfg.causal else T


@dataclass(frozen=True)
class Pace:
    """How a long attribution shares the model: lock() is held around each batched pass (a server's lets
    other requests run between them, and allows gradients), cancel() is asked before each (True stops
    with Cancelled) and, when the pass names its model, after each of its blocks on the way forward
    and back (`stoppable`), and done(n) is told after each, n the runs of the prompt it made."""

    lock: Callable[[], AbstractContextManager] = nullcontext
    cancel: Callable[[], bool] = lambda: False
    done: Callable[[int], None] = lambda n: None

    @contextmanager
    def step(self, n: int, model: GPT | None = None) -> Iterator[None]:
        if self.cancel():
            raise Cancelled()
        with self.lock(), stoppable(model, self.cancel) if model is not None else nullcontext():
            yield
        self.done(n)


@contextmanager
def stoppable(model: GPT, cancel: Callable[[], bool]) -> Iterator[None]:
    """Inside the block a pass of `model` asks cancel() after each block's forward pass and, where the
    block's output needs a gradient, after its backward pass; True raises Cancelled there. A batched pass
    of 4,096 token-positions took more than 3 s beside a dozen other jobs on 2 cores, and a cancel waited
    for all of it. The hooks read no number and change none."""

    def ask(*_: object) -> None:
        if cancel():
            raise Cancelled()

    def after(_m: torch.nn.Module, _i: object, out: torch.Tensor) -> None:
        ask()
        if out.requires_grad:
            out.register_hook(ask)  # runs in the backward pass, once the gradient reaches this block's output

    handles = [block.register_forward_hook(after) for block in model.blocks]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def gradients(
    model: GPT,
    ids: torch.Tensor,
    x: torch.Tensor,
    base: torch.Tensor,
    row: Row,
    alphas: torch.Tensor,
    weights: torch.Tensor,
    pace: Pace,
) -> torch.Tensor:
    """The gradient of f at x' + a (x - x') for each a of alphas, times its weight, added up: (n, d) (a
    chunk at a time)."""
    n = span(model.cfg, row.position, len(ids))
    ids_r, x_r, b_r = ids[:n], x[:n], base[:n]
    total = torch.zeros_like(x_r)
    per = pass_points(chunk_tokens(model), n, len(alphas))
    for a, w in zip(alphas.split(per), weights.split(per)):
        with pace.step(len(a), model):
            rows_in = (b_r + a[:, None, None] * (x_r - b_r)).requires_grad_(True)
            f = run_rows(model, ids_r.expand(len(a), n), rows_in, [row] * len(a))
            (g,) = torch.autograd.grad(f.sum(), rows_in)
            total += torch.einsum("p,pnd->nd", w, g)  # (no (points, n, d) product kept)
    return total


def midpoints(steps: int) -> torch.Tensor:
    """The midpoint rule's points on [0, 1]: (k + 1/2) / steps."""
    return (torch.arange(steps, dtype=torch.float64) + 0.5).float() / steps


@functools.lru_cache(maxsize=16)
def _gauss_legendre(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre's n nodes and weights on [-1, 1] (float64): Newton's method on P_n from the
    asymptotic guesses cos(pi (k - 1/4) / (n + 1/2)), P_n and P_n' by the three-term recurrence."""
    k = torch.arange(1, n + 1, dtype=torch.float64)
    x = torch.cos(torch.pi * (k - 0.25) / (n + 0.5))
    for _ in range(100):
        p0, p1 = torch.ones_like(x), x.clone()
        for j in range(2, n + 1):
            p0, p1 = p1, ((2 * j - 1) * x * p1 - (j - 1) * p0) / j
        dp = n * (x * p1 - p0) / (x * x - 1) if n > 1 else torch.ones_like(x)
        dx = p1 / dp
        x = x - dx
        if float(dx.abs().max()) < 1e-14:
            break
    return x, 2 / ((1 - x * x) * dp * dp)


def quadrature(rule: str, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule's points a_k on [0, 1] (ascending) and weights w_k (they add up to 1), float32."""
    if rule == "midpoint":
        return midpoints(steps), torch.full((steps,), 1 / steps)
    if rule == "gauss_legendre":
        x, w = _gauss_legendre(steps)
        order = torch.argsort(x)
        return ((x[order] + 1) / 2).float(), (w[order] / 2).float()
    raise ValueError(f"rule must be one of {RULES}, not {rule!r}")


@torch.no_grad()
def rollout(patterns: Sequence[torch.Tensor]) -> torch.Tensor:
    """Attention rollout (T, T) from each layer's weights (nh, T, T): mean over heads, mixed half and
    half with the identity, multiplied through the layers (the last on the left)."""
    T = patterns[0].size(-1)
    eye = torch.eye(T, dtype=torch.float64)
    out = eye
    for p in patterns:
        a = 0.5 * p.double().mean(0) + 0.5 * eye
        out = (a / a.sum(-1, keepdim=True)) @ out
    return out.float()


def occluded(
    model: GPT, ids: torch.Tensor, x: torch.Tensor, base: torch.Tensor, rows: Sequence[Row], pace: Pace
) -> torch.Tensor:
    """f with each token's row replaced by the baseline's, alone: (T, len(rows)), [token][row]."""
    T = len(ids)
    out = torch.empty(T, len(rows))
    per = max(1, chunk_tokens(model) // T)
    for start in range(0, T, per):
        which = torch.arange(start, min(T, start + per))
        with pace.step(len(which), model), torch.no_grad():
            rows_in = x.expand(len(which), T, -1).clone()
            rows_in[torch.arange(len(which)), which] = base[which]
            with embedded(model, rows_in):
                h = model.hidden(ids.expand(len(which), T))
            for j, r in enumerate(rows):
                z = model.unembed(h[:, r.position])  # (chunk, V)
                out[which, j] = metric(z, [r] * len(which)).float().cpu()
    return out


@torch.no_grad()
def at_rows(
    model: GPT, ids: torch.Tensor, rows_in: torch.Tensor, rows: Sequence[Row], patterns: list[str] | None = None
):
    """One forward pass of ids (T,) reading rows_in (T, d): f of every row, and (patterns: their hook
    names) each layer's attention weights (nh, T, T)."""
    with model.capture(patterns or []) as cache, embedded(model, rows_in[None]):
        h = model.hidden(ids[None])[0]  # (T, d)
    z = model.unembed(h[torch.tensor([r.position for r in rows], device=h.device)])  # (rows, V)
    return metric(z, rows).float().cpu(), [cache[n][0] for n in patterns or []]


@dataclass
class Prepared:
    """What every row shares: the input rows x and the baseline's x' (T, d), f at the input and at the
    baseline per row, occlusion (T, rows) and attention rollout (T, T)."""

    ids: torch.Tensor
    rows: list[Row]
    x: torch.Tensor
    base: torch.Tensor
    f_input: torch.Tensor
    f_baseline: torch.Tensor
    occlusion: torch.Tensor
    rollout: torch.Tensor


def prepare(
    model: GPT, ids: Sequence[int], rows: Sequence[Row], baseline: str | None = None, pace: Pace = Pace()
) -> Prepared:
    """The work every row shares: batched passes without gradients (input, baseline, occlusion), T + 2
    runs of the prompt. baseline None: the model's (default_baseline)."""
    check_model(model.cfg)
    baseline = baseline or default_baseline(model.cfg)[0]
    names = [hook_name("attn.hook_pattern", li) for li in range(model.cfg.n_layer)]
    with pace.step(1, model):
        t = torch.tensor(list(ids), device=model.wte.weight.device)
        with torch.no_grad():
            x = model.wte(t).detach()
        base = baseline_rows(model, x, baseline)
        f_in, patterns = at_rows(model, t, x, rows, names)
    with pace.step(1, model):
        f_base, _ = at_rows(model, t, base, rows)
    occ = f_in[None] - occluded(model, t, x, base, rows, pace)  # (T, rows)
    return Prepared(t, list(rows), x, base, f_in, f_base, occ, rollout(patterns))


def runs(T: int, n_rows: int, steps: int) -> int:
    """The runs of the prompt prepare and explain_row make: T + 2, then steps + 1 per row."""
    return T + 2 + n_rows * (steps + 1)


def explain_row(
    model: GPT, prep: Prepared, i: int, steps: int, pace: Pace = Pace(), rule: str = "gauss_legendre"
) -> RowResult:
    """Row i's integrated gradients (`steps` points of the rule) and gradient x input, with the shared
    methods' numbers. Gradients must be allowed inside pace.lock() (the server's requests run in
    inference mode and leave it there)."""
    row, t, x, base = prep.rows[i], prep.ids, prep.x, prep.base
    n = span(model.cfg, row.position, len(t))
    diff = x[:n] - base[:n]
    a, w = (v.to(x.device, x.dtype) for v in quadrature(rule, steps))
    ig = (diff * gradients(model, t, x, base, row, a, w, pace)).sum(-1)
    one = torch.ones(1, device=x.device, dtype=x.dtype)
    gx = (diff * gradients(model, t, x, base, row, one, one, pace)).sum(-1)
    return RowResult(
        row,
        float(prep.f_input[i]),
        float(prep.f_baseline[i]),
        ig.detach().cpu(),
        gx.detach().cpu(),
        prep.occlusion[:n, i],
        prep.rollout[row.position, :n],
    )


def attribute(
    model: GPT,
    ids: Sequence[int],
    rows: Sequence[Row],
    baseline: str | None = None,
    steps: int = 32,
    pace: Pace = Pace(),
    rule: str = "gauss_legendre",
) -> list[RowResult]:
    """Every method for each row (gradients must be allowed: see explain_row); baseline None: the model's."""
    prep = prepare(model, ids, rows, baseline, pace)
    return [explain_row(model, prep, i, steps, pace, rule) for i in range(len(rows))]
