"""The layers every block is built from: Linear (nn.Linear, through oneDNN for float32 inference on the
CPU), LayerNorm and RMSNorm written out step by step in explain mode (their hook points), NoNorm (a
post-norm model's missing final norm) and `make_norm`, the norm a config asks for."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GPTConfig
from .hooks import HookPoint

# oneDNN's fp32 matmul: on a 2-core AVX2 EPYC, 110-125 GFLOP/s on GPT-2 small's matrices at 1-256
# rows, where the default BLAS gave 60-115 and varied more; under about half a million weights its
# fixed cost loses (benchmarks/linear_kernels.py prints both, per shape)
ONEDNN_MIN_WEIGHTS = 1 << 19
_onednn_linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None


class Linear(nn.Linear):
    """nn.Linear, multiplied through oneDNN when nothing needs its gradient: inference on the CPU
    in float32, for a matrix of at least ONEDNN_MIN_WEIGHTS weights. The same y = x W^T + b, to
    float32 rounding; training and autocast keep PyTorch's own path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            _onednn_linear is not None
            and w.numel() >= ONEDNN_MIN_WEIGHTS
            and not torch.is_grad_enabled()
            and x.is_cpu
            and x.dtype == w.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu")
        ):
            return _onednn_linear(x, w, self.bias, "none", [], "")
        return super().forward(x)


class LayerNorm(nn.Module):
    """LayerNorm with an optional shift, exposing the per-position scale and the output."""

    def __init__(self, d: int, bias: bool, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))  # gain
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None  # shift
        self.eps = eps
        self.explain = False  # the step-by-step path (set by GPT.set_mode)
        self.hook_scale = HookPoint()  # (B, T, 1) sqrt(var + eps)
        self.hook_normalized = HookPoint()  # (B, T, d) after gain and shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.explain:
            return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        y = x / scale * self.weight
        if self.bias is not None:
            y = y + self.bias
        return self.hook_normalized(y)


class RMSNorm(nn.Module):
    """RMSNorm: x / sqrt(mean(x^2) + eps) * gain. No mean subtracted, no shift (LLaMA, Gemma); with
    gain=False no parameters at all (nanochat)."""

    def __init__(self, d: int, eps: float, gain: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d)) if gain else None  # gain
        self.bias = None
        self.eps = eps
        self.explain = False
        self.hook_scale = HookPoint()  # (B, T, 1) sqrt(mean(x^2) + eps): the root mean square
        self.hook_normalized = HookPoint()  # (B, T, d) after the gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.explain:
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale if self.weight is None else x / scale * self.weight)


def make_norm(cfg: GPTConfig) -> LayerNorm | RMSNorm:
    if cfg.norm_type == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.ln_eps, cfg.norm_gain)
    return LayerNorm(cfg.d_model, cfg.bias, cfg.ln_eps)


class NoNorm(nn.Module):
    """Stands in for the final LayerNorm of a post-norm (GPT-1) model, which has none."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(x)
