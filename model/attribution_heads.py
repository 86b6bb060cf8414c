"""Attention inside attribution graphs (issue #64): which heads carried an edge, and why a head attended.

An attribution graph (model/attribution.py) freezes every attention pattern, so its edges say how much a
source moved a target through the frozen model but not which heads carried it, nor why the pattern is
what it is. Both are exact in the same frozen replacement model.

**Head loadings.** With the patterns and norms frozen and the MLPs replaced by their writes, the map from
a source to a target is linear: a product over the blocks between them of (I + sum over heads of that
head's frozen OV map). Taking one block m apart, every edge is its *bypass* (the part that skips block
m's attention: that block's heads all taken out) plus one part per head of block m (that head alone
kept, minus the bypass), and these add up to the edge exactly, for every block separately:

    edge = bypass_m + sum_h (edge with only head h of block m - bypass_m)

since edge(only h) - bypass_m is J_after A_{m,h} J_before and the A_{m,h} add up to the attention. A
block that is not between the source and the target carries nothing of the edge (all of it is bypass).

**QK attributions.** A head's pre-softmax score at (query q, key k) is scale x q_q . k_k. With the norms'
divisors frozen (and the q/k norms' too, where the model has them), q_q and k_k are affine in the
graph's sources: every token's embedding, active feature and error node writes into the stream, and
the frozen attention below carries it to positions q and k; RoPE turns each by its position, linearly.
So q_q = sum_i Q_i + Q_0 and k_k = sum_j K_j + K_0 (the constant: the biases), and the score is
sum_ij scale Q_i . K_j, one term per (query source, key source), plus the terms with the constants:
adding up to the score exactly. A capped score (Gemma 2's attention softcap) is no such sum and is
refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch

from .attribution import (
    Edges,
    Target,
    Trace,
    block_ends,
    edges_into,
    feature_terms,
    frozen_attention,
    frozen_norm,
    reach,
    rows_per_batch,
)
from .gpt import GPT, Block, hook_name
from .transcoders import Transcoder


def path_layers(target: Target, n_layer: int) -> list[int]:
    """The blocks whose attention an edge into this target may pass: every block up to the target's own
    (a feature reads its block's MLP input, after the block's attention), every block for the logit."""
    last = reach([target])
    return list(range(n_layer if last is None else last + 1))


@dataclass
class HeadLoadings:
    """For each block on the path (layers[i]): edges (R = 1 + n_head rows per block) of the target with
    that block's heads all out (row 0, the bypass) and with only head h kept (row 1 + h)."""

    layers: list[int]
    n_head: int
    variants: Edges  # rows: block layers[0]'s 1 + n_head, then block layers[1]'s, ...
    whole: Edges  # the target's own edges (1 row), every head in

    def _row(self, i: int, h: int | None) -> int:
        return i * (1 + self.n_head) + (0 if h is None else 1 + h)

    def part(self, kind: str, i: int, h: int | None) -> torch.Tensor:
        """(columns of `kind`: tokens (T,), features (N,) or errors (L, T)) block layers[i]'s bypass (h None) or
        head h's part of every edge into the target."""
        rows = getattr(self.variants, kind)
        bypass = rows[self._row(i, None)]
        return bypass if h is None else rows[self._row(i, h)] - bypass


def _masked(tr: Trace, layer: int, masks: torch.Tensor) -> Trace:
    """The trace with block `layer`'s pattern multiplied per row by masks (R, nh): (L, R, nh, T, T)."""
    R = masks.shape[0]
    pattern = tr.pattern[:, None].expand(tr.pattern.shape[0], R, *tr.pattern.shape[1:]).clone()
    pattern[layer] = pattern[layer] * masks[:, :, None, None].to(pattern.dtype)
    return replace(tr, pattern=pattern)


def head_loadings(model: GPT, codes: Sequence[Transcoder], tr: Trace, target: Target) -> HeadLoadings:
    """Every edge into `target` split, for each block on its path, into that block's bypass and one part per
    head (module docstring): 1 + n_head rows of the frozen model per block, each block's in one batch."""
    nh = model.cfg.n_head
    layers = path_layers(target, model.cfg.n_layer)
    parts: list[Edges] = []
    masks = torch.cat([torch.zeros(1, nh), torch.eye(nh)])  # (1 + nh, nh): none, then each head alone
    batch = rows_per_batch(model.cfg, len(tr.ids))
    for li in layers:
        for lo in range(0, 1 + nh, batch):  # (a long prompt's rows in several passes, as build's are)
            m = masks[lo : lo + batch]
            parts.append(edges_into(model, codes, _masked(tr, li, m), [target] * len(m)))
    joined = Edges(
        *(torch.cat([getattr(p, f) for p in parts]) for f in ("tokens", "features", "errors", "constant", "value"))
    )
    return HeadLoadings(layers, nh, joined, edges_into(model, codes, tr, [target]))


# ---- QK attributions --------------------------------------------------------------------------------------


def check_scores(model: GPT) -> None:
    if model.cfg.attn_softcap:
        raise ValueError(
            f"this model caps its attention scores ({model.cfg.attn_softcap:g} tanh(s / {model.cfg.attn_softcap:g}), "
            "Gemma 2's attention softcap): a capped score is no sum of terms, so it has no QK attribution"
        )


def stream_entering(model: GPT, tr: Trace, embed: torch.Tensor, writes: torch.Tensor, layer: int) -> torch.Tensor:
    """(B, T, d) the frozen replacement's stream entering block `layer` (model/attribution.py's replacement,
    stopped there)."""
    x = embed
    for li in range(layer):
        b = cast(Block, model.blocks[li])
        x = x + frozen_attention(b, frozen_norm(b.ln1, x, tr.scale1[li]), tr.pattern[li]) + writes[:, li]
    return x


@torch.no_grad()
def score_scales(model: GPT, ids: Sequence[int], layer: int) -> dict[str, torch.Tensor]:
    """The real run's q and k norms' divisors at block `layer` (those it has) and its attention scores."""
    names = [hook_name(n, layer) for n in ("attn.q_norm.hook_scale", "attn.k_norm.hook_scale", "attn.hook_attn_scores")]
    names = [n for n in names if n in model.hook_dict]
    with model.capture(names) as c:
        model(torch.tensor([list(ids)], device=model.wte.weight.device), last_only=True)
    return {n.split(".", 2)[2]: t for n, t in c.items()}


def frozen_qk(model: GPT, tr: Trace, x: torch.Tensor, layer: int, scales: dict[str, torch.Tensor]):
    """Block `layer`'s q and k (B, nh, T, hs), RoPE applied, from the stream x (B, T, d) with every norm's
    divisor frozen at the real run's: affine in x. The block's own attention code computes them."""
    b = cast(Block, model.blocks[layer])
    frozen = []
    for which in ("q_norm", "k_norm"):
        key = f"attn.{which}.hook_scale"
        if key in scales:
            frozen.append((hook_name(key, layer), lambda _t, _n, s=scales[key]: s))
    with model.hooks(frozen):
        q, k, _v = b.attn.qkv(frozen_norm(b.ln1, x, tr.scale1[layer]), None, None)
    return q, k


@dataclass
class QKTerms:
    """Head `head` of block `layer` at (query, key): its score as scale x sum_ij Q_i . K_j over the sources
    (columns: tokens (T), features (N, those before the block), errors (layer x T), then the constant)."""

    layer: int
    head: int
    query: int
    key: int
    score: float  # the real model's pre-softmax score
    Q: torch.Tensor  # (S + 1, hs) each source's part of the query vector, the constant last
    K: torch.Tensor  # (S + 1, hs) ... of the key vector
    scale: float

    def terms(self) -> torch.Tensor:
        """(S + 1, S + 1) query source x key source; they add up to the score."""
        return self.scale * self.Q @ self.K.T


def _sources(tr: Trace, g_embed: torch.Tensor, g_write: torch.Tensor, layer: int) -> torch.Tensor:
    """(R, S) each row's gradient times what each source wrote: tokens, features (before `layer`), errors."""
    tokens = (g_embed * tr.embed).sum(-1)  # (R, T)
    features = feature_terms(tr, g_write, layer)[:, : block_ends(tr)[layer]]
    errors = (g_write[:, :layer] * tr.error[:layer]).sum(-1).flatten(1)  # (R, layer * T)
    return torch.cat([tokens, features, errors], 1)


def _gradients(model: GPT, tr: Trace, layer: int, scales, head: int, pos: int, which: str, comps: torch.Tensor):
    """One backward pass of len(comps) rows: row i's value is component comps[i] of head `head`'s query (which
    "q") or key ("k") vector at `pos`: (the gradient at the embeddings, at the MLPs' writes; that whole vector)."""
    R = len(comps)
    with torch.inference_mode(False), torch.enable_grad():
        frozen = replace(tr, scale1=tr.scale1.clone(), pattern=tr.pattern.clone())
        embed = tr.embed.expand(R, *tr.embed.shape).clone().requires_grad_(True)
        written = tr.mlp_out.expand(R, *tr.mlp_out.shape).clone().requires_grad_(True)
        x = stream_entering(model, frozen, embed, written, layer)
        q, k = frozen_qk(model, frozen, x, layer, {n: s.clone() for n, s in scales.items()})
        v = q if which == "q" else k
        value = v[torch.arange(R), head, pos, comps.clone()]  # (a caller's index made in inference mode)
        g_embed, g_write = torch.autograd.grad(value.sum(), [embed, written], allow_unused=True)
    g_write = torch.zeros_like(written) if g_write is None else g_write
    return g_embed.detach(), g_write.detach(), v[0, head, pos].detach()


def qk_terms(model: GPT, tr: Trace, layer: int, head: int, query: int, key: int) -> QKTerms:
    """Head `head` of block `layer`'s score at (query, key) split over the sources at both ends (module
    docstring): 2 x d_head rows of the frozen model's backward pass (in as many batches as a long prompt needs)."""
    check_scores(model)
    cfg = model.cfg
    if not key <= query < len(tr.ids):
        raise ValueError(f"a query position of the prompt and a key at or before it (got {query}, {key})")
    hs = cfg.d_head
    scales = score_scales(model, tr.ids, layer)
    batch = rows_per_batch(cfg, len(tr.ids))
    parts: dict[str, list[torch.Tensor]] = {"q": [], "k": []}  # per source, its part of the vector's components
    whole: dict[str, torch.Tensor] = {}
    for which, pos in (("q", query), ("k", key)):
        for lo in range(0, hs, batch):  # (a long prompt's rows in several passes, as build's are)
            comps = torch.arange(lo, min(hs, lo + batch))
            g_embed, g_write, whole[which] = _gradients(model, tr, layer, scales, head, pos, which, comps)
            parts[which].append(_sources(tr, g_embed, g_write, layer))
    with torch.no_grad():
        Qs, Ks = torch.cat(parts["q"]).T, torch.cat(parts["k"]).T  # (S, hs)
        Q = torch.cat([Qs, (whole["q"] - Qs.sum(0))[None]])  # the constant: what no source wrote
        K = torch.cat([Ks, (whole["k"] - Ks.sum(0))[None]])
    score = float(scales["attn.hook_attn_scores"][0, head, query, key])
    scale = cast(Block, model.blocks[layer]).attn.scale
    return QKTerms(layer, head, query, key, score, Q.detach(), K.detach(), float(scale))
