"""What the texts teach about training a Transformer, as pure functions (torch, no web code).

Each section backs one panel of the /learn page: initialisation and the variance of a
pre-activation · dropout's mask and rescale · Adam's moving averages · the original
encoder-decoder Transformer's size · the sqrt(d_model) embedding scale against sinusoidal
positions · characters against sub-words · BERT's bidirectional mask and masked-LM corruption
against GPT's causal mask · teacher forcing (inputs and targets one position apart) · how the
loss reaches one attention head (real gradients of a model) · tokens per update.

Random draws take a seed and a private torch.Generator, so the same arguments give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .formulas import OptState, adam_step
from .gpt import hook_name

# --------------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------------

GPT1_INIT_STD = 0.02


def init_stds(width: int) -> dict[str, float]:
    """The weight scale each scheme picks for a width x width layer: GPT-1's fixed N(0, 0.02);
    Xavier/Glorot, sqrt(2 / (fan_in + fan_out)) = 1/sqrt(width) for a square layer; He/Kaiming for
    ReLU, sqrt(2 / fan_in). (768 wide: 0.036 and 0.051.)"""
    return {"gpt1": GPT1_INIT_STD, "xavier": math.sqrt(2.0 / (width + width)), "he": math.sqrt(2.0 / width)}


def preactivation_variance(width: int, std: float) -> float:
    """Var(w.h) for h of unit variance per coordinate (as LayerNorm leaves it, |h|^2 = width) and
    independent weights N(0, std^2): width * std^2 (768 x 0.02^2 = 0.307)."""
    return width * std * std


def init_matrix(scheme: str, width: int, g: torch.Generator) -> torch.Tensor:
    """A real width x width weight matrix drawn by torch.nn.init the way each scheme does it."""
    w = torch.empty(width, width, dtype=torch.float64)
    if scheme == "gpt1":
        return torch.nn.init.normal_(w, 0.0, GPT1_INIT_STD, generator=g)
    if scheme == "xavier":
        return torch.nn.init.xavier_normal_(w, generator=g)
    if scheme == "he":
        return torch.nn.init.kaiming_normal_(w, nonlinearity="relu", generator=g)
    raise ValueError(f"unknown scheme {scheme!r}")


def simulate_preactivations(scheme: str, width: int, rows: int, seed: int) -> torch.Tensor:
    """Pre-activations z = W h of `rows` random hidden vectors after a LayerNorm (unit variance
    across their coordinates), through a real matrix of the scheme: rows x width numbers."""
    g = torch.Generator().manual_seed(seed)
    h = F.layer_norm(torch.randn(rows, width, generator=g, dtype=torch.float64), (width,))
    return h @ init_matrix(scheme, width, g).T


# --------------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------------


def dropout_mask(n: int, p: float, g: torch.Generator) -> torch.Tensor:
    """A keep-mask: each of n entries kept (1) with probability 1 - p, zeroed (0) with probability p."""
    return torch.bernoulli(torch.full((n,), 1.0 - p, dtype=torch.float64), generator=g)


def inverted_dropout(h: torch.Tensor, p: float, mask: torch.Tensor) -> torch.Tensor:
    """Training-time dropout as torch.nn.Dropout computes it: h * mask / (1 - p), so E[out] = h
    and nothing needs rescaling at inference (p = 0.2: the survivors are multiplied by 1.25)."""
    return h * mask / (1.0 - p) if p < 1 else torch.zeros_like(h)


def dropout_average(h: torch.Tensor, p: float, trials: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean over `trials` fresh masks of h * mask / (1 - p) (close to h) and of h * mask
    without the rescale (close to (1 - p) h)."""
    g = torch.Generator().manual_seed(seed)
    masks = torch.bernoulli(torch.full((trials, h.numel()), 1.0 - p, dtype=torch.float64), generator=g)
    kept = (h.to(torch.float64) * masks).mean(0)
    return kept / (1.0 - p), kept


# --------------------------------------------------------------------------------------------
# Adam's moving averages
# --------------------------------------------------------------------------------------------

KINGMA_BA = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
TRANSFORMER_ADAM = {"beta1": 0.9, "beta2": 0.98, "eps": 1e-9}


def effective_memory(beta: float) -> float:
    """An exponential moving average with decay beta weighs a gradient k steps old by
    (1 - beta) beta^k: weights that sum to one with mean age beta / (1 - beta), so the average
    remembers about 1 / (1 - beta) steps (0.999: 1,000; 0.98: 50; 0.9: 10)."""
    return 1.0 / (1.0 - beta)


def ema_weights(beta: float, ages: int) -> list[float]:
    """The weight of the gradient k steps ago in the average, k = 0 .. ages - 1."""
    return [(1.0 - beta) * beta**k for k in range(ages)]


def adam_moments_constant(g: float, steps: int, beta1: float, beta2: float, eps: float, lr: float = 1.0) -> dict:
    """Adam on one parameter whose gradient is always g, through formulas.adam_step (the rule
    torch.optim.Adam uses): the raw moments m_t, v_t (pulled towards their zero start), the
    bias-corrected ones (exactly g and g^2 at every step) and the step with and without the
    correction (without it the first step is (1 - b1) / sqrt(1 - b2) times too long)."""
    out: dict[str, list[float]] = {k: [] for k in ("m", "v", "m_hat", "v_hat", "step", "step_uncorrected")}
    theta, state = [0.0], OptState()
    for t in range(1, steps + 1):
        new, state = adam_step(theta, [g], state, lr, beta1, beta2, eps)
        m, v = state.m[0], state.v[0]
        out["m"].append(m)
        out["v"].append(v)
        out["m_hat"].append(m / (1 - beta1**t))
        out["v_hat"].append(v / (1 - beta2**t))
        out["step"].append(theta[0] - new[0])
        out["step_uncorrected"].append(lr * m / (math.sqrt(v) + eps))
        theta = new
    return out


def eps_ratio(g: float, eps: float) -> float:
    """m_hat / (sqrt(v_hat) + eps) for a steady gradient of size g: g / (g + eps). It is 1 (a step
    of lr) for any ordinary gradient and falls away only when |g| is near eps."""
    return abs(g) / (abs(g) + eps)


# --------------------------------------------------------------------------------------------
# The original encoder-decoder Transformer's size
# --------------------------------------------------------------------------------------------


def encoder_decoder_counts(vocab_size: int, d_model: int, n_layer: int, d_ff: int, tie: bool) -> dict[str, int]:
    """Every weight and bias of Vaswani et al.'s encoder-decoder (post-norm, sinusoidal positions,
    no position parameters). An encoder layer: self-attention (4 d^2 + 4 d), FFN (2 d d_ff + d_ff + d)
    and two LayerNorms; a decoder layer adds cross-attention and a third LayerNorm. tie: one V x d
    matrix serves the source embedding, the target embedding and the output layer (the paper's
    choice with a shared vocabulary); untied adds a separate V x d output matrix."""
    d = d_model
    attn, ffn, ln = 4 * d * d + 4 * d, 2 * d * d_ff + d_ff + d, 2 * d
    encoder = n_layer * (attn + ffn + 2 * ln)
    decoder = n_layer * (2 * attn + ffn + 3 * ln)
    embedding = vocab_size * d
    output = 0 if tie else vocab_size * d
    return {
        "embedding": embedding,
        "encoder": encoder,
        "decoder": decoder,
        "output": output,
        "encoder_layer": attn + ffn + 2 * ln,
        "decoder_layer": 2 * attn + ffn + 3 * ln,
        "total": embedding + encoder + decoder + output,
    }


# --------------------------------------------------------------------------------------------
# Embedding scale against sinusoidal positions
# --------------------------------------------------------------------------------------------


def sinusoidal_positions(n_pos: int, d_model: int) -> torch.Tensor:
    """The original Transformer's encoding: PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(...).
    Every sin/cos pair has squared length 1, so every row's norm is sqrt(d / 2) (16 at d = 512)."""
    t = torch.arange(n_pos, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_pos, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(t * freq)
    pe[:, 1::2] = torch.cos(t * freq)[:, : d_model // 2]
    return pe


def embedding_rows(n: int, d_model: int, seed: int) -> torch.Tensor:
    """n embedding rows initialised N(0, 1/d): each has norm about 1."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_model, generator=g, dtype=torch.float64) / math.sqrt(d_model)


# --------------------------------------------------------------------------------------------
# Characters against sub-words
# --------------------------------------------------------------------------------------------


def attention_scores(n_positions: int) -> int:
    """Causal or not, self-attention computes a score for every (query, key) pair: n^2."""
    return n_positions * n_positions


# --------------------------------------------------------------------------------------------
# BERT's bidirectional masked LM against GPT's causal LM
# --------------------------------------------------------------------------------------------


def attention_masks(n: int) -> tuple[list[list[bool]], list[list[bool]]]:
    """(causal, bidirectional): may query i see key j? GPT: j <= i (a lower triangle); BERT: always."""
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return causal.tolist(), torch.ones(n, n, dtype=torch.bool).tolist()


def visible_next_tokens(allowed: Sequence[Sequence[bool]]) -> int:
    """Positions whose next token (the causal LM's target) is already visible to them: n - 1 with a
    bidirectional mask (the objective becomes copying), 0 with a causal one."""
    return sum(1 for i in range(len(allowed) - 1) if allowed[i][i + 1])


def mlm_draws(
    n: int, vocab_size: int, seed: int, rate: float, mask_share: float, random_share: float
) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """The random draws of BERT's corruption over n positions: the picked positions (round(rate * n),
    at least one, in order), one uniform number u per picked position (u < mask_share: masked; below
    mask_share + random_share: a random token; else kept) and the random tokens, one per u in the
    middle band, in order."""
    g = torch.Generator().manual_seed(seed)
    k = max(1, round(rate * n)) if n else 0
    chosen = torch.zeros(n, dtype=torch.bool)
    chosen[torch.randperm(n, generator=g)[:k]] = True
    picked = chosen.nonzero().flatten().tolist()  # in order (torch's sort took 0.2 s on 100,000 ids)
    u = torch.rand(k, generator=g, dtype=torch.float64)
    middle = (u >= mask_share) & (u < mask_share + random_share)
    return picked, u, torch.randint(vocab_size, (int(middle.sum()),), generator=g)


def mlm_corrupt(
    ids: Sequence[int],
    vocab_size: int,
    seed: int,
    rate: float = 0.15,
    mask_share: float = 0.8,
    random_share: float = 0.1,
) -> list[str | None]:
    """BERT's masked-LM corruption: pick round(rate * n) positions (at least one) at random; each
    picked position becomes [MASK] with probability mask_share, a random token with probability
    random_share, and stays as it is otherwise. Returns, per position, None (not picked) or
    'mask' / 'random:<id>' / 'keep'. The model must predict the original token at every picked one."""
    picked, u, random_ids = mlm_draws(len(ids), vocab_size, seed, rate, mask_share, random_share)
    out: list[str | None] = [None] * len(ids)
    replacements = iter(random_ids.tolist())
    for i, ui in zip(picked, u.tolist()):
        if ui < mask_share:
            out[i] = "mask"
        elif ui < mask_share + random_share:
            out[i] = f"random:{next(replacements)}"
        else:
            out[i] = "keep"
    return out


def mlm_shares(
    n: int, vocab_size: int, seed: int, rate: float = 0.15, mask_share: float = 0.8, random_share: float = 0.1
) -> dict[str, float]:
    """The corruption above applied to n positions: the share picked, and among the picked the
    shares masked, replaced by a random token and kept (from the same draws, counted at once)."""
    picked, u, random_ids = mlm_draws(n, vocab_size, seed, rate, mask_share, random_share)
    k = max(1, len(picked))
    masked = int((u < mask_share).sum())
    return {
        "picked": len(picked) / n,
        "mask": masked / k,
        "random": len(random_ids) / k,
        "keep": (len(picked) - masked - len(random_ids)) / k,
    }


# --------------------------------------------------------------------------------------------
# Teacher forcing: one forward pass scores every position
# --------------------------------------------------------------------------------------------


def shift(ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """A training sequence as the model sees it: inputs ids[:-1], targets ids[1:], one position apart."""
    return list(ids[:-1]), list(ids[1:])


@torch.no_grad()
def teacher_forced_losses(model, ids: Sequence[int]) -> tuple[list[float], list[float], list[float]]:
    """The loss -ln p(target) at every position of one sequence from ONE forward pass (teacher
    forcing: each position reads the true prefix), the probability of each target, and the same
    losses computed the slow way, one forward pass per prefix. The causal mask makes them equal."""
    inputs, targets = shift(ids)
    x = torch.tensor([inputs], dtype=torch.long)
    y = torch.tensor(targets, dtype=torch.long)
    logp = F.log_softmax(model(x)[0][0].double(), dim=-1)
    one = (-logp[torch.arange(len(targets)), y]).tolist()
    slow = []
    for t in range(len(targets)):
        last = F.log_softmax(model(x[:, : t + 1])[0][0, -1].double(), dim=-1)
        slow.append(float(-last[targets[t]]))
    return one, [math.exp(-v) for v in one], slow


# --------------------------------------------------------------------------------------------
# How the loss reaches an attention head
# --------------------------------------------------------------------------------------------


def _head_rows(cfg, head: int) -> dict[str, slice]:
    """Rows of c_attn.weight that make this head's q, k, v (k, v: its key/value group's)."""
    d, hs = cfg.d_model, cfg.d_head
    kvh = head // (cfg.n_head // cfg.n_kv_head)
    kv_d = cfg.n_kv_head * hs
    return {
        "q": slice(head * hs, (head + 1) * hs),
        "k": slice(d + kvh * hs, d + (kvh + 1) * hs),
        "v": slice(d + kv_d + kvh * hs, d + kv_d + (kvh + 1) * hs),
    }


def head_weight_grad_norms(model, grads: dict[str, torch.Tensor]) -> list[list[dict[str, float]]]:
    """For every layer and head, the norm of the loss's gradient on that head's slice of W_Q, W_K,
    W_V (rows of c_attn) and W_O (columns of c_proj), and all four together."""
    cfg, out = model.cfg, []
    for li in range(cfg.n_layer):
        ga, go = grads[f"blocks.{li}.attn.c_attn.weight"], grads[f"blocks.{li}.attn.c_proj.weight"]
        row = []
        for h in range(cfg.n_head):
            parts = {k: float(ga[s].norm()) for k, s in _head_rows(cfg, h).items()}
            parts["o"] = float(go[:, h * cfg.d_head : (h + 1) * cfg.d_head].norm())
            parts["total"] = math.sqrt(sum(v * v for v in parts.values()))
            row.append(parts)
        out.append(row)
    return out


def head_gradients(model, ids: Sequence[int], layer: int, head: int) -> dict:
    """Backpropagate the next-token loss of `ids` (inputs ids[:-1], targets ids[1:]) through a real
    model and read one head on the way: its attention A (T x T), values V (T x d_head), output
    Z = A V and the gradients dL/dA, dL/dV, dL/dZ, plus the formula's own dL/dA = G V^T and
    dL/dV = A^T G (G = dL/dZ; for a shared key/value head, summed over the heads that share it).
    Weights are not changed and no .grad is stored (torch.autograd.grad)."""
    cfg = model.cfg
    group = cfg.n_head // cfg.n_kv_head
    kept: dict[str, torch.Tensor] = {}

    def keep(t: torch.Tensor, name: str) -> None:
        kept[name.rsplit(".", 1)[1]] = t

    inputs, targets = shift(ids)
    names = [hook_name(n, layer) for n in ("attn.hook_pattern", "attn.hook_v", "attn.hook_z")]
    with torch.inference_mode(False), torch.enable_grad(), model.hooks([(n, keep) for n in names]):
        logits, _ = model(torch.tensor([inputs], dtype=torch.long))
        loss = F.cross_entropy(logits[0].float(), torch.tensor(targets, dtype=torch.long))
        params = dict(model.named_parameters())
        wanted = [k for k in params if k.endswith(("attn.c_attn.weight", "attn.c_proj.weight"))]
        tensors = [kept["hook_pattern"], kept["hook_v"], kept["hook_z"]] + [params[k] for k in wanted]
        grads = torch.autograd.grad(loss, tensors)
    kvh = head // group
    A, V, Z = (
        kept["hook_pattern"][0, head].detach().double(),
        kept["hook_v"][0, :, kvh].detach().double(),
        kept["hook_z"][0, :, head].detach().double(),
    )
    dA, dV, G_all = grads[0][0, head].double(), grads[1][0, :, kvh].double(), grads[2][0].double()
    heads = range(kvh * group, (kvh + 1) * group)
    dV_formula = sum(kept["hook_pattern"][0, h].detach().double().T @ G_all[:, h] for h in heads)
    dA_formula = G_all[:, head] @ V.T
    return {
        "loss": loss.item(),
        "A": A,
        "V": V,
        "Z": Z,
        "G": G_all[:, head],
        "dA": dA,
        "dV": dV,
        "dA_formula_max_abs_diff": float((dA - dA_formula).abs().max()),
        "dV_formula_max_abs_diff": float((dV - dV_formula).abs().max()),
        "norms": head_weight_grad_norms(model, dict(zip(wanted, grads[3:]))),
    }


# --------------------------------------------------------------------------------------------
# Tokens per update and the size of pretraining
# --------------------------------------------------------------------------------------------


# (sequences per update, tokens per sequence) as the papers state them: GPT-1 64 x 512; GPT-2 512 x 1,024
PAPER_BATCHES: dict[str, tuple[int, int]] = {"gpt1": (64, 512), "gpt2": (512, 1024)}


def tokens_per_update(batch: int, context: int) -> int:
    """Next-token predictions in one update: every position of every sequence is scored
    (GPT-1: 64 x 512 = 32,768)."""
    return batch * context


def pretraining_predictions(corpus_tokens: float, epochs: float) -> float:
    """Predictions over pretraining: each pass over the corpus scores every token once
    (about 10^9 tokens x 100 passes = 10^11 for GPT-1)."""
    return corpus_tokens * epochs
