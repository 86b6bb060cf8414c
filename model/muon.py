"""Muon, with its orthogonalisation in a dtype the device computes natively.

The same maths as `torch.optim.Muon` (torch/optim/_muon.py, after Keller Jordan's Muon): Nesterov
momentum, then a quintic Newton-Schulz iteration that maps the update to (nearly) the closest
orthogonal matrix, then decoupled weight decay and a step scaled by the matrix's shape. The one
difference: torch runs the iteration in bfloat16, always. On a CPU without bf16 units that is
emulated and ~50x slower than float32 (one step over the cpu preset's 16 matrices: 710 ms against
AdamW's 3 ms), so here the dtype is a parameter, `ortho_dtype`, which the trainer takes from
model/precision.py. With ortho_dtype=torch.bfloat16 the update equals torch's bit for bit
(tests/test_muon.py); float32 orthogonalises at least as accurately, and for the wide matrices
(an MLP's, the fused q/k/v) it iterates on their small Gram matrices, those of one size in one
batch: the same polynomial with about half the arithmetic (one step over the cpu preset's 16
matrices: 14 ms, against 28 ms for the direct float32 iteration and 741 ms for torch's emulated bf16).

The optimizer state (`momentum_buffer` per matrix) is torch's, so checkpoints resume either way.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# torch.optim.Muon's defaults (Keller Jordan's): the quintic's (a, b, c), chosen to maximise its
# slope at zero, its number of steps, and the floor of the norm it divides by
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
DEFAULT_NS_STEPS = 5
EPS = 1e-7


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch's step scaling by shape (A, B): "original" (None too) sqrt(max(1, A / B)), so a tall
    matrix's update keeps the RMS of a square one's; "match_rms_adamw" 0.2 sqrt(max(A, B)), Moonshot's
    scale that lets Muon reuse AdamW's rate."""
    a, b = shape[:2]
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1, a / b))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(a, b))
    return lr


def orthogonalise(
    g: Tensor,
    dtype: torch.dtype,
    steps: int = DEFAULT_NS_STEPS,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
    eps: float = EPS,
    gram: bool | None = None,
) -> Tensor:
    """Newton-Schulz: X <- a X + (b A + c A^2) X with A = X X^T, from X = G / ||G||_F, in `dtype`.

    Each step pushes every singular value of X towards 1 (to within about 0.7-1.2; the coefficients
    trade exactness for speed), keeping the singular vectors: the result is about U V^T of G's SVD.
    gram: see orthogonalise_all."""
    return orthogonalise_all([g], dtype, steps, coefficients, eps, gram)[0]


def orthogonalise_all(
    gs: list[Tensor],
    dtype: torch.dtype,
    steps: int = DEFAULT_NS_STEPS,
    coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
    eps: float = EPS,
    gram: bool | None = None,
) -> list[Tensor]:
    """orthogonalise() of each matrix in gs.

    gram: run the iteration on the small Gram matrix instead (`_gram_polynomial`): about half the
    arithmetic for a matrix at least twice as wide as tall; the matrices with the same short side
    iterate together, as one batch of small products. None: for such matrices, except in bf16,
    where torch's arithmetic is kept exactly."""
    a, b, c = coefficients
    xs: list[Tensor] = []
    batches: dict[int, list[int]] = {}  # short side r -> indices of the matrices taking the Gram path
    for i, g in enumerate(gs):
        x = g.to(dtype, copy=True)  # a copy, so G (maybe the momentum buffer) stays as it is
        if g.size(0) > g.size(1):
            x = x.T  # iterate on the wide side: (r, n) with r <= n, so A is the smaller square
        x.div_(x.norm().clamp(min=eps))  # Frobenius norm >= spectral norm, so singular values <= 1
        if gram if gram is not None else (dtype != torch.bfloat16 and x.size(1) >= 2 * x.size(0)):
            batches.setdefault(x.size(0), []).append(i)
        else:
            for _ in range(steps):
                gram_m = x @ x.T  # A: (r, r)
                poly = torch.addmm(gram_m, gram_m, gram_m, beta=b, alpha=c)  # b A + c A^2
                x = torch.addmm(x, poly, x, beta=a)  # a X + (b A + c A^2) X
        xs.append(x)
    for idx in batches.values():
        q = _gram_polynomial(torch.stack([xs[i] @ xs[i].T for i in idx]), steps, a, b, c)  # (k, r, r)
        for j, i in enumerate(idx):
            xs[i] = q[j] @ xs[i]
    return [x.T if g.size(0) > g.size(1) else x for x, g in zip(xs, gs)]


def _gram_polynomial(a0: Tensor, steps: int, a: float, b: float, c: float) -> Tensor:
    """Q with X_steps = Q X_0, from A_0 = X_0 X_0^T (a batch (k, r, r)): every X_k is Q_k X_0 with
    Q_k a polynomial in A_0, so A_k = Q_k A_0 Q_k^T and Q_{k+1} = a Q_k + (b A_k + c A_k^2) Q_k.
    Each step is four r x r products instead of two r x n ones and one r x r."""
    q = torch.eye(a0.size(-1), dtype=a0.dtype).expand_as(a0)  # Q_0 = I
    for k in range(steps):
        ak = a0 if k == 0 else q @ a0 @ q.mT
        poly = torch.baddbmm(ak, ak, ak, beta=b, alpha=c)  # b A_k + c A_k^2
        q = poly + a * q if k == 0 else torch.baddbmm(q, poly, q, beta=a)  # (Q_0 = I: no product)
    return q


class Muon(torch.optim.Muon):
    """torch.optim.Muon with `ortho_dtype`: the dtype of the Newton-Schulz iteration (torch: bf16)."""

    def __init__(self, params, *, ortho_dtype: torch.dtype = torch.bfloat16, **kwargs) -> None:
        super().__init__(params, **kwargs)
        for group in self.param_groups:
            group.setdefault("ortho_dtype", ortho_dtype)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            params, updates = [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)  # buf = mu buf + (1 - mu) g
                params.append(p)
                updates.append(p.grad.lerp(buf, mu) if group["nesterov"] else buf)
            updates = orthogonalise_all(
                updates, group["ortho_dtype"], group["ns_steps"], group["ns_coefficients"], group["eps"]
            )
            for p, update in zip(params, updates):
                p.mul_(1 - lr * wd)  # decoupled weight decay
                p.add_(update, alpha=-adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
        return loss
