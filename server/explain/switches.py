"""The forward trace's `block_switches` part: what the imported families' blocks do differently from
GPT-2's and LLaMA's (GPTConfig.switches: GPT-NeoX's parallel block and partial rotary, Gemma's GeGLU,
sandwich norms, scaled embedding, softcaps and local/global layers, OLMo 2's norms on the sublayers'
outputs and q/k norm over every head, Phi-3's LongRoPE), each said in words with the model's numbers, and the numbers
of this prompt: what each sublayer wrote before and after its output norm, the scores the attention
softcap moved, each layer's window and RoPE base, the embedding before and after its scale."""

from __future__ import annotations

import math

import torch

from gptscope.model.gpt import MLP, GPTConfig, causal_allowed, layer_rope_base, layer_window
from gptscope.model.positions import rope_attention_factor

from ..digits import COARSE, FINE, VALUE
from ..schemas.stages import (
    AttnSoftcapDetail,
    BlockSwitchesBlock,
    EmbedScaleDetail,
    LayerKind,
    ScoreCapLayer,
    SublayerNorms,
    SwitchNote,
)
from .common import arr
from .stages import Trace, block, softcap_detail

CHANGED = 0.1  # a score the cap moved by more than this share of itself counts as changed


def hooks(cfg: GPTConfig) -> list[str]:
    """What the part reads: every block's heads' outputs z and MLP hidden units (to recompute each
    sublayer's raw output), what each adds, the streams, the uncapped and capped scores, the embedding."""
    per = ["attn.hook_z", "mlp.hook_post", "hook_attn_out", "hook_mlp_out", "hook_resid_pre", "hook_resid_post"]
    per += ["attn.hook_attn_scores_uncapped", "attn.hook_attn_scores"] if cfg.attn_softcap else []
    return [f"blocks.{i}.{n}" for i in range(cfg.n_layer) for n in per] + [
        "hook_embed",
        "hook_x0",
        "hook_logits_uncapped",
    ]


def _norm_text(cfg: GPTConfig) -> str:
    return "RMSNorm" if cfg.norm_type == "rmsnorm" else "LayerNorm"


def _longrope_text(cfg: GPTConfig) -> str:
    """LongRoPE in words, with this model's numbers ("" for another RoPE: every note's text is built)."""
    if cfg.rope_scaling != "longrope":
        return ""
    pairs, ctx = cfg.rotary // 2, cfg.rope_original_ctx
    short, long = cfg.rope_short_factor, cfg.rope_long_factor
    a = rope_attention_factor(cfg)
    return (
        f"RoPE with a factor of its own for each of the {pairs} pairs: pair i turns by base^(−2i/{cfg.rotary}) "
        f"divided by its factor, so a factor above 1 slows that pair down. There are two sets: the short factors "
        f"({min(short):.3g} to {max(short):.3g}) while a forward pass reaches no position past the original "
        f"context of {ctx:,} tokens the model was pre-trained with, and the long factors ({min(long):.3g} to "
        f"{max(long):.3g}) once it does; the choice holds for every position of that pass. cos and sin are also "
        f"multiplied by the attention factor {a:.4g}, so the turned channels' part of every score grows by its "
        f"square ({a * a:.4g})"
        + (
            f", the paper's √(1 + ln {cfg.rope_factor:g} / ln {ctx:,}) for a context stretched {cfg.rope_factor:g} times."
            if not cfg.rope_attention_factor
            or abs(a - math.sqrt(1 + math.log(cfg.rope_factor) / math.log(ctx))) < 1e-12
            else ", as the model's files set it."
        )
        + " With the KV cache, keys keep the turn of the pass that computed them: a generation that crosses the "
        "original context holds short-factor keys beside long-factor ones (transformers does the same)."
    )


def notes(cfg: GPTConfig) -> list[SwitchNote]:
    """Each switch the model turns on, in words, with its numbers."""
    hs, r, n = cfg.d_head, cfg.rotary, _norm_text(cfg)
    kinds = [layer_window(cfg, i) for i in range(cfg.n_layer)]
    text = {
        "parallel": (
            "Parallel attention and MLP",
            f"Both sublayers read the block's input: x + attention({n}₁(x)) + MLP({n}₂(x)), as GPT-NeoX computes them "
            "(one matrix multiply can serve both). The MLP never sees what this block's attention wrote; the stream after "
            "attention alone is a partial sum that no sublayer reads, and the block's two writes still add up into the stream.",
        ),
        "rotary_dim": (
            "Partial rotary embedding",
            f"RoPE turns only the first {r} of each head's {hs} query and key channels ({r / hs:.0%}); the other "
            f"{hs - r} carry no position, so their part of a score depends on the tokens' content alone.",
        ),
        "geglu": (
            "GeGLU",
            f"The MLP is W_down (GELU(W_gate x) ⊙ W_up x): SwiGLU's gated MLP with GELU "
            f"({'its tanh form' if cfg.gelu == 'tanh' else 'exact'}) for the gate's SiLU; the MLP stage plots the gate's curve.",
        ),
        "sandwich": (
            "Sandwich norm",
            f"An {n} before each sublayer and a second one on its output before the residual add, x + {n}(f({n}(x))): "
            "what a sublayer adds to the stream is normalised, whatever size f's output has.",
        ),
        "norm_out": (
            "Norm on each sublayer's output",
            f"No norm before a sublayer: attention and the MLP read the raw stream, and an {n} on each one's output "
            f"scales what it adds, x + {n}(f(x)) (OLMo 2's order; the final {n} is still there).",
        ),
        "qk_norm_all": (
            "q/k norm over all heads",
            f"Before RoPE, one RMSNorm over the whole query vector ({cfg.n_head} heads, {cfg.n_head * hs} numbers) and "
            f"one over the keys ({cfg.n_kv_head * hs}), not head by head: a head's query is scaled by every head's size.",
        ),
        "embed_scale": (
            "Scaled embedding",
            f"Each token's row of W_E is multiplied by {cfg.embed_scale:.4g} (√{cfg.d_model}) as it enters the stream, to "
            "the size the norms' outputs have; "
            + (
                "the tied unembedding reads W_E unscaled."
                if cfg.tie_weights
                else "the unembedding is a matrix of its own."
            ),
        ),
        "attn_scale": (
            "Score scale",
            f"Scores are q·k times {cfg.attn_scale:.4g} (1/√{round(cfg.attn_scale**-2) if cfg.attn_scale else 0:g}, "
            "Gemma's query_pre_attn_scalar) "
            f"instead of 1/√d_head = {hs**-0.5:.4g}.",
        ),
        "attn_softcap": (
            "Attention softcap",
            f"Every score s becomes {cfg.attn_softcap:g}·tanh(s / {cfg.attn_softcap:g}) before the mask and the softmax: "
            f"no score leaves (−{cfg.attn_softcap:g}, {cfg.attn_softcap:g}). The pattern is the capped scores' softmax, "
            "which every head view reads.",
        ),
        "local_global": (
            "Local and global layers",
            f"{sum(1 for w in kinds if w)} of {cfg.n_layer} layers are local: each query sees only its last "
            f"{cfg.window} keys, itself included; the others are global and see every earlier key "
            f"(the pattern {cfg.window_pattern!r}, S local and L global, repeated over the layers).",
        ),
        "rope_local_base": (
            "Two RoPE bases",
            f"The local layers turn q and k by base {cfg.rope_local_base:g}, the global ones by base {cfg.rope_base:g}"
            + (f", stretched ({cfg.rope_scaling}, factor {cfg.rope_factor:g})" if cfg.rope_scaling != "none" else "")
            + ": slow turns where a layer may read far back, fast ones where it reads a short window.",
        ),
        "longrope": ("LongRoPE", _longrope_text(cfg)),
        "softcap": (
            "Logit softcap",
            f"The logits are {cfg.softcap:g}·tanh(z / {cfg.softcap:g}): none leaves (−{cfg.softcap:g}, {cfg.softcap:g}). "
            "The logit decomposition splits z, the logit before the cap, and shows the cap beside it.",
        ),
    }
    return [SwitchNote(name=k, title=text[k][0], text=text[k][1]) for k in cfg.switches]


def _layers(cfg: GPTConfig) -> list[LayerKind]:
    rope = cfg.pos == "rope"
    return [
        LayerKind(
            layer=i,
            window=layer_window(cfg, i),
            rope_base=layer_rope_base(cfg, i) if rope else None,
            rope_scaled=rope and cfg.rope_scaling != "none" and layer_rope_base(cfg, i) == cfg.rope_base,
        )
        for i in range(cfg.n_layer)
    ]


def _sublayers(t: Trace) -> list[SublayerNorms]:
    cfg, pos, rows = t.cfg, t.sel.position, []
    for li in range(cfg.n_layer):
        b = block(t.model, li)
        z = t.act("attn.hook_z", li)[pos]  # (nh, hs)
        attn_raw = b.attn.c_proj(z.reshape(1, -1))[0]
        mlp_raw = None
        if isinstance(b.mlp, MLP):  # (experts: no one hidden layer to read)
            mlp_raw = float(b.mlp.c_proj(t.act("mlp.hook_post", li)[pos : pos + 1])[0].norm())
        rows.append(
            SublayerNorms(
                layer=li,
                attn_raw=round(float(attn_raw.norm()), COARSE),
                attn_added=round(float(t.act("hook_attn_out", li)[pos].norm()), COARSE),
                mlp_raw=None if mlp_raw is None else round(mlp_raw, COARSE),
                mlp_added=round(float(t.act("hook_mlp_out", li)[pos].norm()), COARSE),
                mlp_reads="block input" if cfg.parallel else "after attention",
                resid_pre=round(float(t.act("hook_resid_pre", li)[pos].norm()), COARSE),
                resid_post=round(float(t.act("hook_resid_post", li)[pos].norm()), COARSE),
            )
        )
    return rows


def _attn_softcap(t: Trace) -> AttnSoftcapDetail:
    cfg, pos, layer, head = t.cfg, t.sel.position, t.sel.layer, t.sel.head
    cap, T, rows = cfg.attn_softcap, len(t.ids), []
    for li in range(cfg.n_layer):
        allowed = (
            causal_allowed(T, T, window=layer_window(cfg, li)) if cfg.causal else torch.ones(T, T, dtype=torch.bool)
        )
        s, c = t.act("attn.hook_attn_scores_uncapped", li)[:, allowed], t.act("attn.hook_attn_scores", li)[:, allowed]
        moved = ((c - s).abs() > CHANGED * s.abs()).float().mean()
        rows.append(
            ScoreCapLayer(
                layer=li, largest_uncapped=round(float(s.abs().max()), VALUE), changed_share=round(float(moved), FINE)
            )
        )
    allowed = (
        causal_allowed(T, T, window=layer_window(cfg, layer))[pos] if cfg.causal else torch.ones(T, dtype=torch.bool)
    )
    keys = [int(k) for k in torch.nonzero(allowed).flatten()]
    x = torch.linspace(-3 * cap, 3 * cap, 121)
    return AttnSoftcapDetail(
        cap=cap,
        layers=rows,
        layer=layer,
        head=head,
        keys=keys,
        uncapped=arr(t.act("attn.hook_attn_scores_uncapped", layer)[head, pos, keys], VALUE),
        capped=arr(t.act("attn.hook_attn_scores", layer)[head, pos, keys], VALUE),
        curve_x=arr(x, COARSE),
        curve_y=arr(cap * torch.tanh(x / cap), VALUE),
    )


def block_switches(t: Trace) -> BlockSwitchesBlock:
    cfg = t.cfg
    on = set(cfg.switches)
    out = BlockSwitchesBlock(position=t.sel.position, switches=notes(cfg), d_head=cfg.d_head)
    if on & {"local_global", "rope_local_base"}:
        out.layers = _layers(cfg)
    if on & {"parallel", "sandwich", "norm_out"}:
        out.sublayers = _sublayers(t)
    if cfg.attn_softcap:
        out.attn_softcap = _attn_softcap(t)
    if "embed_scale" in on:
        rows = t.act("hook_embed")
        out.embed_scale = EmbedScaleDetail(
            scale=cfg.embed_scale,
            row_norm=arr(rows.norm(dim=-1), COARSE),
            scaled_norm=arr(t.act("hook_x0").norm(dim=-1), COARSE),
        )
    if "softcap" in on:
        out.softcap = softcap_detail(t)
    if cfg.rotary_dim:
        out.rotary_dim = cfg.rotary_dim
    return out
