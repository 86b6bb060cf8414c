"""Curves that explain how a GPT learns, as pure functions (math and torch only, no web code).

The server's /learn page plots these; nothing here knows about HTTP. Where the trainer and a curve
overlap they share code: learning-rate schedules come from `model.schedules` (the functions the
trainer calls every update), parameter counts from `model.gpt.count_params`, and the optimiser
update rules below follow `torch.optim`'s conventions exactly (a test steps both side by side).

Sections: learning-rate schedules · GELU · loss and softmax · label smoothing · the sqrt(d_k)
scale · sizes (KV cache, scaling law) · optimisers on a ravine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .schedules import DEFAULT_COOLDOWN, sample_steps, transformer, warmup_cosine, warmup_stable_decay

# --------------------------------------------------------------------------------------------
# Learning-rate schedules
# --------------------------------------------------------------------------------------------


def schedule_steps(total_steps: int, points: int, extra: Sequence[int] = ()) -> list[int]:
    """Evenly spread steps from 0 to total_steps, plus the `extra` ones (the end of warmup, so
    the peak is on the curve exactly rather than between two samples)."""
    steps = set(sample_steps(total_steps, points))
    steps.update(s for s in extra if 0 <= s <= total_steps)
    return sorted(steps)


def lr_curve(
    kind: str,
    steps: Sequence[int],
    *,
    d_model: int = 512,
    warmup: int = 4000,
    max_lr: float = 2.5e-4,
    total_steps: int = 100_000,
    min_lr: float = 0.0,
    cooldown: float = DEFAULT_COOLDOWN,
) -> list[float]:
    """The learning rate at each step: kind 'transformer' (Vaswani et al.), 'warmup_cosine' (GPT-1 and
    this project's trainer) or 'warmup_stable_decay' (the trainer's wsd), by the very functions in
    model.schedules."""
    if kind == "transformer":
        return [transformer(s, d_model, warmup) for s in steps]
    if kind == "warmup_cosine":
        return [warmup_cosine(s, max_lr, warmup, total_steps, min_lr) for s in steps]
    if kind == "warmup_stable_decay":
        return [warmup_stable_decay(s, max_lr, warmup, total_steps, cooldown, min_lr) for s in steps]
    raise ValueError(f"unknown schedule kind {kind!r}")


# --------------------------------------------------------------------------------------------
# GELU
# --------------------------------------------------------------------------------------------

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_C = 0.044715


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def normal_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def gelu_exact(x: float) -> float:
    """x * Phi(x): the input times the probability that a standard normal draw is below it."""
    return x * normal_cdf(x)


def gelu_exact_grad(x: float) -> float:
    """d/dx x Phi(x) = Phi(x) + x phi(x)."""
    return normal_cdf(x) + x * normal_pdf(x)


def gelu_tanh(x: float) -> float:
    """The tanh approximation GPT-1's and GPT-2's code used: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + math.tanh(SQRT_2_OVER_PI * (x + TANH_C * x**3)))


def gelu_tanh_grad(x: float) -> float:
    u = SQRT_2_OVER_PI * (x + TANH_C * x**3)
    t = math.tanh(u)
    du = SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_C * x * x)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du


def relu(x: float) -> float:
    return x if x > 0 else 0.0


def relu_grad(x: float) -> float:
    """1 for x > 0, else 0 (at exactly 0 PyTorch also uses 0)."""
    return 1.0 if x > 0 else 0.0


def _root(f: Callable[[float], float], lo: float, hi: float, iters: int = 200) -> float:
    """Bisection for a sign change of f in [lo, hi]."""
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm < 0) == (flo < 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def gelu_minimum(approx: str = "exact") -> tuple[float, float]:
    """(x, value) of GELU's one minimum, where its derivative crosses zero (exact: near
    x = -0.752, value -0.170)."""
    grad, fn = (gelu_exact_grad, gelu_exact) if approx == "exact" else (gelu_tanh_grad, gelu_tanh)
    x = _root(grad, -2.0, -0.1)
    return x, fn(x)


def linspace(lo: float, hi: float, n: int) -> list[float]:
    if n == 1:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


# --------------------------------------------------------------------------------------------
# Loss and softmax
# --------------------------------------------------------------------------------------------


def nll(p: float) -> float:
    """The loss on one prediction: -ln p, p the probability the model gave the true token."""
    return -math.log(p)


def softmax(logits: Sequence[float], temperature: float = 1.0) -> list[float]:
    """softmax(logits / T), computed stably by subtracting the largest scaled logit first."""
    z = [li / temperature for li in logits]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def smoothed_target(target: int, vocab_size: int, epsilon: float) -> list[float]:
    """Label smoothing's target: 1 - eps + eps/V on the true token, eps/V on every other one."""
    q = [epsilon / vocab_size] * vocab_size
    q[target] += 1.0 - epsilon
    return q


def xent_gradient(logits: Sequence[float], target: int, epsilon: float = 0.0) -> dict:
    """Cross-entropy of softmax(logits) against the (optionally smoothed) one-hot target, and
    its gradient with respect to the logits, p - q. Both p and q sum to one, so the gradient
    sums to zero: raising the true token's score must lower the others'."""
    p = softmax(logits)
    q = smoothed_target(target, len(logits), epsilon)
    loss = -sum(qi * math.log(pi) for qi, pi in zip(q, p) if qi > 0)
    grad = [pi - qi for pi, qi in zip(p, q)]
    return {"p": p, "q": q, "grad": grad, "loss": loss, "grad_sum": math.fsum(grad)}


# --------------------------------------------------------------------------------------------
# Label smoothing
# --------------------------------------------------------------------------------------------


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


def label_smoothing_floor(epsilon: float, vocab_size: int) -> float:
    """The lowest loss reachable against a smoothed target: its entropy H(q), because
    cross-entropy = H(q) + KL(q || p) and KL is zero only when p = q.
    (epsilon 0.1, V 37,000: about 1.38 nats.)"""
    q_true = 1.0 - epsilon + epsilon / vocab_size
    q_other = epsilon / vocab_size
    return -(_xlogx(q_true) + (vocab_size - 1) * _xlogx(q_other))


def label_smoothing_floor_by_sum(epsilon: float, vocab_size: int) -> float:
    """The same entropy summed over all V entries of the target tensor (a check on the closed
    form above; V up to a few million fits in memory)."""
    q = torch.full((vocab_size,), epsilon / vocab_size, dtype=torch.float64)
    q[0] += 1.0 - epsilon
    q = q[q > 0]
    return float(-(q * q.log()).sum())


def smoothed_loss(p_true: float, epsilon: float, vocab_size: int) -> float:
    """Cross-entropy against the smoothed target of a model that gives p_true to the true token
    and spreads 1 - p_true evenly over the other V - 1. Lowest (= the floor) at p_true = q_true."""
    q_true = 1.0 - epsilon + epsilon / vocab_size
    loss = -q_true * math.log(p_true)
    if 1.0 - q_true > 0:
        loss -= (1.0 - q_true) * math.log((1.0 - p_true) / (vocab_size - 1))
    return loss


# --------------------------------------------------------------------------------------------
# Softmax and the 1/sqrt(d_k) scale
# --------------------------------------------------------------------------------------------


def dot_product_scores(d_k: int, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`samples` dot products q.k of random q, k with independent N(0, 1) entries (seeded), raw
    and divided by sqrt(d_k). The raw ones have variance d_k; the scaled ones variance 1."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(samples, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(samples, d_k, generator=g, dtype=torch.float64)
    raw = (q * k).sum(-1)
    return raw, raw / math.sqrt(d_k)


def attention_row(d_k: int, n_keys: int, seed: int) -> tuple[list[float], list[float]]:
    """One query against n_keys keys (random, seeded): its raw scores and its scaled scores."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(d_k, generator=g, dtype=torch.float64)
    k = torch.randn(n_keys, d_k, generator=g, dtype=torch.float64)
    raw = k @ q
    return raw.tolist(), (raw / math.sqrt(d_k)).tolist()


def saturation_sweep(d_ks: Sequence[int], n_keys: int, rows: int, seed: int) -> dict[str, list[float]]:
    """For each d_k, the average over `rows` random queries of the largest attention weight,
    with and without the scale. Without it the top weight heads for 1 as d_k grows (the softmax
    saturates and its gradient vanishes); with it, it stays put."""
    out: dict[str, list[float]] = {"max_weight_raw": [], "max_weight_scaled": []}
    for i, d in enumerate(d_ks):
        g = torch.Generator().manual_seed(seed + 7919 * i)
        q = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)
        k = torch.randn(rows, n_keys, d, generator=g, dtype=torch.float64)
        raw = (q * k).sum(-1)
        out["max_weight_raw"].append(float(torch.softmax(raw, -1).max(-1).values.mean()))
        out["max_weight_scaled"].append(float(torch.softmax(raw / math.sqrt(d), -1).max(-1).values.mean()))
    return out


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------

# Shapes that are not trainable presets here but whose sizes the page shows (GPT-3 175B:
# 96 layers of width 12,288 with 96 heads, a 2,048-token context, GPT-2's vocabulary).
REFERENCE_SHAPES: dict[str, dict] = {
    "gpt3": dict(vocab_size=50257, n_ctx=2048, n_layer=96, n_head=96, d_model=12288),
}


def kv_cache_bytes(
    n_layer: int, n_kv_head: int, d_head: int, context: int, batch: int = 1, bytes_per_value: int = 2
) -> int:
    """Memory of the KV cache: a key and a value vector of d_head numbers per layer, per
    key/value head, per token held, per sequence. Multi-head attention has n_kv_head = n_head;
    grouped-query attention shares each key/value head among several query heads."""
    return 2 * n_layer * n_kv_head * d_head * context * batch * bytes_per_value


def kaplan_loss(n_params: float, n_c: float = 8.8e13, alpha: float = 0.076) -> float:
    """Kaplan et al.'s fit of loss (nats per token) to non-embedding parameters N when data and
    compute are not the limit: L = (N / N_c)^-alpha. A straight line on log-log axes."""
    return (n_params / n_c) ** -alpha


def logspace(lo: float, hi: float, n: int) -> list[float]:
    a, b = math.log10(lo), math.log10(hi)
    return [10**v for v in linspace(a, b, n)]


# --------------------------------------------------------------------------------------------
# Optimisers on a ravine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ravine:
    """f(x, y) = 0.5 * (a (x - x0)^2 + b (y - y0)^2): a long, narrow valley when b >> a.
    The bottom is at (x0, y0), deliberately away from the origin, so the pull of weight decay
    towards (0, 0) is visible."""

    a: float = 0.2
    b: float = 4.0
    x0: float = 2.0
    y0: float = 0.5

    def loss(self, x: float, y: float) -> float:
        return 0.5 * (self.a * (x - self.x0) ** 2 + self.b * (y - self.y0) ** 2)

    def grad(self, x: float, y: float) -> tuple[float, float]:
        return self.a * (x - self.x0), self.b * (y - self.y0)


@dataclass
class OptState:
    """What an optimiser carries from step to step for a vector of parameters."""

    step: int = 0
    m: list[float] = field(default_factory=list)  # momentum buffer / Adam's first moment
    v: list[float] = field(default_factory=list)  # Adam's second moment


def sgd_step(theta: Sequence[float], g: Sequence[float], state: OptState, lr: float) -> tuple[list[float], OptState]:
    """Plain gradient descent: theta <- theta - lr * g."""
    return [t - lr * gi for t, gi in zip(theta, g)], OptState(state.step + 1)


def momentum_step(
    theta: Sequence[float], g: Sequence[float], state: OptState, lr: float, momentum: float = 0.9
) -> tuple[list[float], OptState]:
    """Heavy-ball momentum as torch.optim.SGD does it: buf <- mu * buf + g; theta <- theta - lr * buf
    (the first step's buffer is g itself)."""
    buf = list(g) if state.step == 0 else [momentum * b + gi for b, gi in zip(state.m, g)]
    return [t - lr * b for t, b in zip(theta, buf)], OptState(state.step + 1, buf)


def adam_step(
    theta: Sequence[float],
    g: Sequence[float],
    state: OptState,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> tuple[list[float], OptState]:
    """Adam (Kingma and Ba) as torch.optim.Adam / AdamW compute it.

    m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2, bias-corrected by 1 - b^t; the step is
    lr * m_hat / (sqrt(v_hat) + eps): about lr per coordinate whatever the gradient's size.
    Weight decay: coupled (Adam + L2) adds wd * theta to the gradient, so it is rescaled like the
    gradient; decoupled (AdamW) shrinks theta by lr * wd directly, the same pull for every weight."""
    t = state.step + 1
    theta = list(theta)
    if weight_decay and decoupled:
        theta = [p * (1.0 - lr * weight_decay) for p in theta]
    elif weight_decay:
        g = [gi + weight_decay * p for gi, p in zip(g, theta)]
    m0 = state.m or [0.0] * len(theta)
    v0 = state.v or [0.0] * len(theta)
    m = [beta1 * mi + (1 - beta1) * gi for mi, gi in zip(m0, g)]
    v = [beta2 * vi + (1 - beta2) * gi * gi for vi, gi in zip(v0, g)]
    bc1, bc2 = 1 - beta1**t, 1 - beta2**t
    new = [p - lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps) for p, mi, vi in zip(theta, m, v)]
    return new, OptState(t, m, v)


def adamw_step(theta, g, state, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    """AdamW: Adam with decoupled weight decay (Loshchilov and Hutter), what the trainer uses."""
    return adam_step(theta, g, state, lr, beta1, beta2, eps, weight_decay, decoupled=True)


def muon_step(
    theta: Sequence[float], g: Sequence[float], state: OptState, lr: float, momentum: float = 0.95
) -> tuple[list[float], OptState]:
    """Muon (Jordan et al.) on the two parameters held as a 2 x 2 diagonal matrix diag(x, y).

    Muon keeps Nesterov momentum, buf <- mu buf + g and u = g + mu buf, then replaces the update
    matrix by its orthogonal factor (U V^T of its SVD: every singular value set to 1). For a
    diagonal matrix that factor is diag(sign(u)): each direction moves by exactly lr, however
    steep or shallow it is. (torch.optim.Muon approximates U V^T with a few Newton-Schulz steps.)"""
    buf = list(g) if state.step == 0 else [momentum * b + gi for b, gi in zip(state.m, g)]
    u = [gi + momentum * b for gi, b in zip(g, buf)]
    return [t - lr * math.copysign(1.0, ui) if ui else t for t, ui in zip(theta, u)], OptState(state.step + 1, buf)


DIVERGED = 1e6  # a path leaving this box has blown up; it stops there


def descend(
    ravine: Ravine,
    start: tuple[float, float],
    steps: int,
    update: Callable[[list[float], list[float], OptState], tuple[list[float], OptState]],
) -> dict:
    """Run `update` from `start` on the ravine for `steps` updates. Returns the path (x, y, loss
    at every point, start included) and whether it diverged (then it stops early)."""
    theta, state = [float(start[0]), float(start[1])], OptState()
    xs, ys, losses = [theta[0]], [theta[1]], [ravine.loss(*theta)]
    diverged = False
    for _ in range(steps):
        theta, state = update(theta, list(ravine.grad(*theta)), state)
        if not all(math.isfinite(v) and abs(v) < DIVERGED for v in theta):
            diverged = True
            break
        xs.append(theta[0])
        ys.append(theta[1])
        losses.append(ravine.loss(*theta))
    return {"x": xs, "y": ys, "loss": losses, "diverged": diverged}
