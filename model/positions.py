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


def rope_frequencies(cfg: GPTConfig, device=None, layer: int | None = None, seq_len: int | None = None) -> torch.Tensor:
    """(r/2,) the angle pair i of a head turns by per position: base^(-2i / r) (r the channels turned:
    rotary_dim or the head size), stretched as cfg.rope_scaling says (written as transformers computes
    it, so imported models agree); block `layer`'s (Gemma 3: its local layers' base, never stretched).
    seq_len: the forward call's last position + 1, which picks LongRoPE's factors (None: the short ones)."""
    hs, base = cfg.rotary, layer_rope_base(cfg, layer)
    if cfg.rope_scaling == "longrope" and not is_local_rope(cfg, layer):
        # transformers' _compute_longrope_parameters: 1 / (ext_i * base^(2i / r)), in that order of operations
        ext = torch.tensor(longrope_factors(cfg, seq_len), dtype=torch.float32, device=device)
        shape = torch.arange(0, hs, 2, device=device, dtype=torch.int64).float() / hs
        return 1.0 / (ext * base**shape)
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


def longrope_factors(cfg: GPTConfig, seq_len: int | None) -> tuple[float, ...]:
    """LongRoPE's factors for a forward call whose last position + 1 is seq_len: the long ones past
    rope_original_ctx, else (and with no seq_len) the short ones.

    transformers (5.x, dynamic_rope_update's longrope_frequency_update) makes this choice anew in every
    forward call, from that call's own positions, for every position of the call at once; the keys
    already in a KV cache keep the turn they got when they were computed. So a generation that crosses
    rope_original_ctx step by step holds short-factor keys for its earlier positions beside long-factor
    ones for the later positions, whereas one call over the whole text turns them all by the long factors.
    gptscope does the same, call by call, so that its cached steps agree with transformers' own.
    (transformers' Phi-3 generate() sidesteps this once: at the step that first passes the original
    context it drops the cache and recomputes the whole text; a plain cached forward call does not.)"""
    long = seq_len is not None and seq_len > cfg.rope_original_ctx
    return cfg.rope_long_factor if long else cfg.rope_short_factor


def rope_attention_factor(cfg: GPTConfig, layer: int | None = None) -> float:
    """What RoPE's cos and sin are multiplied by: 1, but for LongRoPE its attention factor, given
    (rope_attention_factor) or the paper's sqrt(1 + ln(rope_factor) / ln(rope_original_ctx)) (1 for a
    factor of 1), as transformers computes it; the turned channels' part of every score grows by its square
    (partial rotary: the channels left unturned are not scaled)."""
    if cfg.rope_scaling != "longrope" or is_local_rope(cfg, layer):
        return 1.0
    if cfg.rope_attention_factor:
        return cfg.rope_attention_factor
    if cfg.rope_factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(cfg.rope_factor) / math.log(cfg.rope_original_ctx))


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
