"""Positions: which keys each query may see (the causal mask, sliding windows per layer) and RoPE, the
turn of q and k by their position (its frequencies, stretched or local, its angles, the turn itself)."""

from __future__ import annotations

import math

import torch

from .config import GPTConfig


def causal_allowed(T: int, Tk: int, device=None, window: int = 0) -> torch.Tensor:
    """(T, Tk) bool: query i (at absolute position Tk - T + i) may attend to key j <= its position
    (and, with a sliding window w, only to the w keys ending there: j > position - w)."""
    offset = Tk - T
    q = torch.arange(T, device=device)[:, None] + offset
    k = torch.arange(Tk, device=device)[None, :]
    allowed = k <= q
    if window:
        allowed = allowed & (k > q - window)
    return allowed


def layer_window(cfg: GPTConfig, layer: int) -> int:
    """The window of block `layer`: cfg.window, or per window_pattern ("L" layers: 0, all keys; the last
    one too unless window_last_full is off)."""
    pattern = cfg.window_pattern.upper()
    if not pattern:
        return cfg.window
    if (layer == cfg.n_layer - 1 and cfg.window_last_full) or pattern[layer % len(pattern)] == "L":
        return 0
    return cfg.window


def is_local_rope(cfg: GPTConfig, layer: int | None) -> bool:
    """Block `layer` turns by rope_local_base, unstretched (Gemma 3's windowed layers)."""
    return bool(cfg.rope_local_base) and layer is not None and bool(layer_window(cfg, layer))


def layer_rope_base(cfg: GPTConfig, layer: int | None = None) -> float:
    """The RoPE base of block `layer`: rope_local_base for a windowed layer where one is set (Gemma 3), else rope_base."""
    return cfg.rope_local_base if is_local_rope(cfg, layer) else cfg.rope_base


def rope_frequencies(cfg: GPTConfig, device=None, layer: int | None = None) -> torch.Tensor:
    """(r/2,) the angle pair i of a head turns by per position: base^(-2i / r) (r the channels turned:
    rotary_dim or the head size), stretched as cfg.rope_scaling says (written as transformers computes
    it, so imported models agree); block `layer`'s (Gemma 3: its local layers' base, never stretched)."""
    hs, base = cfg.rotary, layer_rope_base(cfg, layer)
    inv_freq = 1.0 / (base ** (torch.arange(0, hs, 2, device=device, dtype=torch.float32) / hs))
    if is_local_rope(cfg, layer):  # a local layer keeps its frequencies
        return inv_freq
    if cfg.rope_scaling == "linear":
        return inv_freq / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        f, ctx = cfg.rope_factor, cfg.rope_original_ctx
        lo, hi = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        slow = torch.where(wavelen > ctx / lo, inv_freq / f, inv_freq)  # long wavelengths: divided by f
        smooth = (ctx / wavelen - lo) / (hi - lo)  # 0 at the slow end, 1 at the fast end
        blended = (1 - smooth) * slow / f + smooth * slow
        between = ~(wavelen < ctx / hi) & ~(wavelen > ctx / lo)
        return torch.where(between, blended, slow)
    return inv_freq


def rope_angles(
    hs: int, positions: torch.Tensor, base: float, inv_freq: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, hs/2) of RoPE's angles: pair i of a head turns by position * base^(-2i / hs)
    (or by position * inv_freq[i], rope_frequencies' stretched frequencies)."""
    if inv_freq is None:
        inv_freq = base ** (-torch.arange(0, hs, 2, device=positions.device, dtype=torch.float32) / hs)
    ang = positions.float()[:, None] * inv_freq.to(positions.device)[None, :]
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., hs) pair by pair: (x_i, x_{i+r/2}) turns by angle i (cos and sin (..., r/2)
    broadcast over x's leading dimensions, with the position axis lined up). Two rotated vectors' dot
    product then depends only on how far apart their positions are. With fewer angles than hs/2
    (partial rotary, GPT-NeoX) only the first r channels turn; the others pass unchanged."""
    r = 2 * cos.size(-1)
    if r < x.size(-1):
        return torch.cat([apply_rope(x[..., :r], cos, sin), x[..., r:]], dim=-1)
    a, b = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)
