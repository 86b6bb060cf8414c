"""Causal self-attention: W_Q, W_K, W_V and W_O, with RoPE, grouped-query heads, q/k norms, value
embeddings and the KV cache; the fused kernel in fast mode, softmax(q k^T / sqrt(hs)) written out (every
hook point) in explain mode."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GPTConfig, has_value_embed
from .hooks import HookPoint
from .kv_cache import LayerKV
from .layers import Linear, RMSNorm
from .positions import (
    apply_rope,
    causal_allowed,
    layer_window,
    rope_angles,
    rope_attention_factor,
    rope_frequencies,
)

VE_GATE_RANGE = 3.0  # the value embedding's gate is VE_GATE_RANGE * sigmoid(...): from 0 to 3, 1.5 at 0


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention, in three pieces: `qkv` (the projections, RoPE, the KV cache,
    shared key/value heads), then `fused` (fast mode) or `explained` (explain mode, every hook)."""

    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.layer = layer  # its window: layer_window(cfg, layer)
        d, q_d, kv_d = cfg.d_model, cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
        # W_Q, W_K, W_V side by side; with grouped-query attention K and V have n_kv_head heads
        self.c_attn = Linear(d, q_d + 2 * kv_d, bias=cfg.bias or cfg.qkv_bias)
        self.c_proj = Linear(q_d, d, bias=cfg.bias or cfg.attn_out_bias)  # W_O
        if cfg.qk_norm:  # Qwen3: each head's q and k normalised (RMSNorm over hs) before RoPE
            # (nanochat: no gain, times a fixed qk_norm_scale; it normalises after RoPE, the same numbers,
            # since a turn keeps a vector's length; OLMo 2, qk_norm_all: one RMSNorm over all heads' q, one over k)
            gain = not cfg.qk_norm_scale
            q_w, k_w = (q_d, kv_d) if cfg.qk_norm_all else (cfg.d_head, cfg.d_head)
            self.q_norm, self.k_norm = RMSNorm(q_w, cfg.ln_eps, gain), RMSNorm(k_w, cfg.ln_eps, gain)
        if has_value_embed(cfg, layer):  # nanochat: a second embedding of the token, mixed into the values
            self.value_embed = nn.Embedding(cfg.vocab_size, kv_d)  # VE (V, n_kv * hs)
            self.ve_gate = Linear(cfg.value_embed, cfg.n_kv_head, bias=False)  # reads x's first channels
            self.hook_ve = HookPoint()  # (B, T, n_kv, hs) the rows of VE for the tokens
            self.hook_ve_gate = HookPoint()  # (B, T, n_kv) 3 sigmoid(x[:c] W_g): how much of them each head takes
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs) (qk_norm: after the per-head RMSNorm, as for k)
        self.hook_k = HookPoint()  # (B, T, n_kv, hs) new keys only (not the cache)
        self.hook_v = HookPoint()  # (B, T, n_kv, hs)
        if cfg.pos == "rope":
            self.hook_q_rot = HookPoint()  # (B, T, nh, hs) RoPE: q after its rotation by position
            self.hook_k_rot = HookPoint()  # (B, T, n_kv, hs) RoPE: k after its rotation
        # (B, nh, T, Tk) QK^T/sqrt(hs) (or * attn_scale), *before* the mask (TransformerLens's
        # hook_attn_scores is taken after it, with -inf in the masked cells); hook_pattern shows the
        # mask's effect. With attn_softcap, the scores after the cap (the ones the softmax reads).
        if cfg.attn_softcap:
            self.hook_attn_scores_uncapped = HookPoint()  # (B, nh, T, Tk) Gemma 2: q k^T * scale, before the cap
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()  # (B, nh, T, Tk) softmax of masked scores; rows sum to 1
        self.hook_z = HookPoint()  # (B, T, nh, hs) each head's weighted sum of values
        self.hook_result = HookPoint()  # (B, T, nh, d) each head's output in the residual space
        self.explain = False  # the step-by-step path (set by GPT.set_mode)

    @property
    def window(self) -> int:
        """The keys each query sees (0: every earlier one): cfg.window, or as window_pattern says for this layer."""
        return layer_window(self.cfg, self.layer)

    @property
    def scale(self) -> float:
        """What q k^T is multiplied by: attn_scale (Gemma), or 1 / sqrt(hs)."""
        return self.cfg.attn_scale or 1.0 / math.sqrt(self.cfg.d_head)

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None, idx: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(x, kv, idx)  # (B, nh, T, hs), (B, nh, Tk, hs), (B, nh, Tk, hs)
        y = self.explained(q, k, v) if self.explain else self.fused(q, k, v)  # (B, T, d)
        return self.resid_dropout(y)

    def qkv(
        self, x: torch.Tensor, kv: LayerKV | None, idx: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> q (B, nh, T, hs) for the new positions; k, v (B, nh, Tk, hs) for all of
        them so far: the cached ones (Tk - T) and the new T. idx (B, T): the tokens, for value embeddings."""
        B, T, _d = x.shape
        nh, n_kv, hs = self.cfg.n_head, self.cfg.n_kv_head, self.cfg.d_head
        q, k, v = self.c_attn(x).split([nh * hs, n_kv * hs, n_kv * hs], dim=2)
        if self.cfg.qk_norm and self.cfg.qk_norm_all:  # OLMo 2: q and k normalised over every head at once
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.view(B, T, nh, hs), k.view(B, T, n_kv, hs), v.view(B, T, n_kv, hs)
        if self.cfg.qk_norm and not self.cfg.qk_norm_all:
            q, k = self.q_norm(q), self.k_norm(k)
            if self.cfg.qk_norm_scale:  # nanochat: a fixed scale instead of learned gains
                q, k = q * self.cfg.qk_norm_scale, k * self.cfg.qk_norm_scale
        if hasattr(self, "value_embed"):  # nanochat: v + 3 sigmoid(x[:c] W_g) VE[token], per key/value head
            assert idx is not None, "a block with value embeddings reads the tokens too"
            ve = self.hook_ve(self.value_embed(idx).view(B, T, n_kv, hs))
            gate = self.hook_ve_gate(VE_GATE_RANGE * torch.sigmoid(self.ve_gate(x[..., : self.cfg.value_embed])))
            v = v + gate.unsqueeze(-1) * ve
        q = self.hook_q(q)
        k = self.hook_k(k)
        v = self.hook_v(v)
        if self.cfg.pos == "rope":  # positions continue after the cached ones
            q, k = self.rope(q, k, start=kv.cache.length if kv is not None else 0)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs), (B, n_kv, T, hs)
        if kv is not None:
            k, v = kv.append(k, v)  # (B, n_kv, Tk, hs) including the cached positions
        if n_kv != nh:  # grouped-query attention: each key/value head serves nh / n_kv query heads
            k, v = k.repeat_interleave(nh // n_kv, dim=1), v.repeat_interleave(nh // n_kv, dim=1)
        return q, k, v

    def rope(self, q: torch.Tensor, k: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE: turn q (B, T, nh, hs) and k (B, T, n_kv, hs) by their positions start ... start + T - 1
        (rotary_dim: only their first r channels)."""
        T = q.size(1)
        positions = torch.arange(start, start + T, device=q.device)
        # (r/2,) each pair's turn per position (LongRoPE: its factors chosen by this call's last position)
        freq = rope_frequencies(self.cfg, q.device, self.layer, seq_len=start + T)
        cos, sin = rope_angles(self.cfg.rotary, positions, self.cfg.rope_base, freq)
        if (a := rope_attention_factor(self.cfg, self.layer)) != 1.0:  # LongRoPE: cos and sin times it
            cos, sin = cos * a, sin * a
        cos, sin = cos[:, None, :], sin[:, None, :] * self.cfg.rope_sign  # (T, 1, r/2): the same turn for every head
        return self.hook_q_rot(apply_rope(q, cos, sin)), self.hook_k_rot(apply_rope(k, cos, sin))

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Fast mode: PyTorch's fused scaled_dot_product_attention, then one W_O matmul for all heads
        (no fused kernel caps the scores: Gemma 2's softcapped attention is written out, `capped`)."""
        B, nh, T, hs = q.shape
        if self.cfg.attn_softcap:
            return self.capped(q, k, v)
        mask, is_causal = self.sdpa_mask(T, k.size(2), q.device)
        p_drop = self.cfg.dropout if self.training else 0.0
        # y (B, nh, T, hs): scores, mask, softmax and the weighted sum of values in one kernel
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=p_drop, is_causal=is_causal, scale=self.cfg.attn_scale or None
        )
        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, nh * hs))

    def capped(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Fast mode with attn_softcap: softmax(mask(cap tanh(q k^T * scale / cap))) V, then W_O (hook_z
        fires, as in the fused path; the scores and pattern exist only here and fire nothing)."""
        B, nh, T, hs = q.shape
        cap = self.cfg.attn_softcap
        scores = cap * torch.tanh((q @ k.transpose(-2, -1)) * (self.scale / cap))  # (B, nh, T, Tk)
        if self.cfg.causal:
            scores = scores.masked_fill(~causal_allowed(T, k.size(2), q.device, self.window), float("-inf"))
        y = self.attn_dropout(F.softmax(scores, dim=-1)) @ v  # (B, nh, T, hs)
        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs), as the fused kernel's
        return self.c_proj(z.reshape(B, T, nh * hs))

    def sdpa_mask(self, T: int, Tk: int, device: torch.device) -> tuple[torch.Tensor | None, bool]:
        """The (attn_mask, is_causal) for T queries over Tk keys: none without a causal mask (BERT-
        style) or for a single newest query (it may see every cached key); SDPA's own causal mask
        for a square with no window; else the (T, Tk) allowed cells (a cache before T, a window)."""
        if not self.cfg.causal or (T == 1 and not self.window):
            return None, False
        if Tk == T and not self.window:
            return None, True
        return causal_allowed(T, Tk, device, self.window), False

    def explained(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Explain mode, step by step: softmax(QK^T / sqrt(hs)) with the mask (Gemma 2: the scores
        capped first), the pattern's weighted sum of values, W_O. Every hook point fires: each head's
        own output in the residual space (hook_result; summed, they are the output) is computed when a
        hook is on it, and a replacement there changes the output by the difference."""
        B, nh, T, hs = q.shape
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, nh, T, Tk)
        if self.cfg.attn_softcap:  # Gemma 2: cap * tanh(scores / cap), every score within (-cap, cap)
            cap = self.cfg.attn_softcap
            scores = cap * torch.tanh(self.hook_attn_scores_uncapped(scores) / cap)
        scores = self.hook_attn_scores(scores)
        if self.cfg.causal:
            scores = scores.masked_fill(~causal_allowed(T, k.size(2), q.device, self.window), float("-inf"))
        pattern = self.hook_pattern(F.softmax(scores, dim=-1))  # (B, nh, T, Tk)
        z = self.hook_z((self.attn_dropout(pattern) @ v).transpose(1, 2))  # (B, T, nh, hs)
        out = self.c_proj(z.reshape(B, T, nh * hs))  # (B, T, d): the same digits whoever listens
        if self.hook_result._forward_hooks:  # per head: as many multiplies again as W_O, so only on demand
            w_o = self.c_proj.weight.view(-1, nh, hs)  # (d, nh, hs)
            result = torch.einsum("bths,dhs->bthd", z, w_o)  # (B, T, nh, d)
            edited = self.hook_result(result)  # a hook returns a replacement to edit heads
            if edited is not result:
                out = out + (edited - result).sum(2)
        return out
