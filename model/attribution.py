"""Attribution graphs: how a model computes one answer, feature by feature.

Replace every MLP by its transcoder (model/transcoders.py) plus an *error* term, what the transcoder
misses on this prompt, so that the replacement's output is the MLP's exactly. Freeze every attention
pattern and every norm's divisor at their values on the prompt. What is left is linear: the
residual stream at each block is a sum of what the sources wrote,

    sources   the input tokens (each position's embedding, and position row), every active transcoder
              feature (activation a at block l, position p: a x its decoder row, written where the MLP
              writes), every error node (block l, position p), and constants (biases, norms' shifts)

passed on by attention (a fixed mix of earlier positions through W_V and W_O) and the frozen norms.
So every target, a feature's pre-activation (what its encoder reads from the stream entering its
MLP) or the answer's logit, is a sum of one term per source plus a constant, and a source's term is
its *direct effect* on the target: the weight of the edge source -> target. The graph's nodes are the
tokens, the active features, the error nodes and the target; its edges those weights.

Computed by gradients of the frozen model (`edges_into`): one backward pass per target (batched,
one target per row) gives d(target)/d(stream) at every block and position, and a source's edge
weight is what it wrote times that gradient where it wrote it. Exact by construction, and tested
so: every target's edge weights plus its constant add up to its value; an edge's weight is the
change in the target when that one source is taken out of the frozen model; with the error nodes
kept the frozen replacement's logits are the real model's.

Pruned by influence (`prune`, as circuit-tracer and Anthropic's circuit tracing do): each target's
incoming weights are normalised by their absolute sum, a feature's influence on the answer is the sum
over every path of the products of those shares, and the features that carry a chosen share of the
total influence are kept (the tokens and errors always), then the edges that carry a chosen share of
the kept nodes' edge influence.

Only a model whose stream is a plain sum (norm='pre') and whose logits are not capped (Gemma 2's softcap
is refused by name) has such a graph; a parallel block's MLP (GPT-NeoX) reads the block's input, as
the replacement model's does, and capped attention scores (Gemma 2) are frozen in the pattern. Shapes: L blocks, T
positions, d width, F features per transcoder, N active features, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import cast

import torch
import torch.nn.functional as F

from .clt import CLT
from .gpt import GPT, Block, GPTConfig, LayerNorm, RMSNorm, hook_name
from .patching import Cancelled
from .sae import SAEConfig
from .transcoders import Transcoder

Codes = Sequence[Transcoder] | CLT  # a per-layer set, or a cross-layer transcoder (its blocks' encoders)

ROWS = 128  # targets per batched backward pass, at most ...
ROW_BYTES = 256 * 2**20  # ... and fewer where their activations would hold more than this
FLOATS_KEPT = 24  # numbers the backward pass keeps per row, block, position and unit of width (measured: ~16)
SLOTS_WASTE = 2  # position_slots: slots at most this many times a block's features (TopK: as many)
CHUNK = 2**18  # cells of the graph's matrix that influence and prune read at a time (a cancel is asked between)
COMPACT_CELLS = CHUNK  # prune's cut counts its digits over the nonzero cells alone where there are at most this many


def rows_per_batch(cfg, T: int) -> int:
    """Targets per batched backward pass for a model of this config on T positions."""
    return max(1, min(ROWS, ROW_BYTES // (FLOATS_KEPT * 4 * cfg.n_layer * T * cfg.d_model)))


# ---- the memory a graph takes ----------------------------------------------------------------------------

EDGE_BYTES = 200  # one listed edge: prune's (column, row, weight) tuple, its numbers and its place in the list
CHUNK_BYTES = 64  # the chunked passes' buffers per cell of a block: keys, digits, masks, float64 weights
OVERHEAD = 32 * 2**20  # what a graph's run takes whatever its size (torch's buffers, Python's objects)


def most_active(cfg: GPTConfig, tc: SAEConfig, T: int) -> int:
    """The most features that can be active on T positions: TopK's k per block and position (ReLU: all)."""
    return cfg.n_layer * T * (tc.k if tc.activation == "topk" else tc.d_sae)


def peak_bytes(
    cfg: GPTConfig,
    tc: SAEConfig,
    T: int,
    max_rows: int,
    max_edges: int | None = None,
    item: int = 4,
    cross: bool = False,
) -> int:
    """An upper bound of the bytes that trace, build and prune take at their peak beyond the model and its
    transcoders, for T positions, up to max_rows rows and max_edges listed edges (None: every one), the
    model's numbers `item` bytes each. Measured on the built-in model (VmHWM): 1.1-1.4x the real peak for
    a long prompt and up to 1,024 rows (where the graph dominates), more for a small graph, where the
    room for one batch's backward pass (below) is most of it.

    The sum of: the trace (every head's pattern, the stream's reads and writes per block, the transcoders'
    activations, each active feature's decoder row); the graph's matrix (R = rows + 1 by C = T + N + L*T
    columns, N active features at most) twice, the graph and a copy of its size (influence's normalised
    matrix, then prune's scores, in place; or build's graph while a batch's rows are added to it); the
    largest batch's backward pass (FLOATS_KEPT numbers per row, block, position and unit of width, the
    patterns its product with the values keeps per row, its edges from every active feature; measured: 20
    a unit at 64 tokens, 28 at 255, every row into the last block), counted beside the graph's copy since
    the allocator keeps what the batches freed; the chunked passes' buffers; the listed edges. cross: a
    cross-layer transcoder's, whose active features keep a decoder row per block (L of them) and whose
    batch's products reach every earlier block's features."""
    L, d, F = cfg.n_layer, cfg.d_model, tc.d_sae
    N = most_active(cfg, tc, T)
    R, C = min(max_rows, N) + 1, T + N + L * T
    graph = R * C * item
    per_block = N if cross else T * (tc.k if tc.activation == "topk" else F)  # one block's active features, at most
    # the decoder rows; a per-layer set's laid out by position too (position_slots: SLOTS_WASTE x theirs at most)
    rows_kept = (L + 1) * N * d if cross else (2 + SLOTS_WASTE) * N * d
    trace = item * (3 * L * cfg.n_head * T * T + 12 * L * T * d + L * T * (3 * F + 2 * cfg.d_mlp) + rows_kept) + 32 * N
    rows = min(rows_per_batch(cfg, T), R - 1)  # build's batch: at most rows_per_batch, and max_rows
    # one batch's backward pass (with the one-row frozen run its graph comes from, kept for every batch since
    # reused_for, as it was made for each before)
    batch = rows * (FLOATS_KEPT * L * T * d + 3 * L * cfg.n_head * T * T + T * per_block + N) * item
    passes = min(CHUNK, R * C) * CHUNK_BYTES
    listed = min(R * C, max_edges if max_edges is not None else R * C) * (EDGE_BYTES + 16)
    return trace + 2 * graph + batch + passes + listed + OVERHEAD


# ---- the prompt's run, as the replacement model reads it -------------------------------------------


@dataclass
class Trace:
    ids: tuple[int, ...]
    embed: torch.Tensor  # (T, d) the stream entering block 0: each token's embedding (+ its position's row)
    scale1: torch.Tensor  # (L, T, 1) each block's attention norm's divisor
    scale2: torch.Tensor  # (L, T, 1) its MLP norm's divisor
    scale_f: torch.Tensor  # (T, 1) the final norm's divisor
    pattern: torch.Tensor  # (L, nh, T, T) every head's attention
    mlp_in: torch.Tensor  # (L, T, d) what each MLP read
    mlp_out: torch.Tensor  # (L, T, d) what each MLP wrote
    recon: torch.Tensor  # (L, T, d) its transcoder's output on that input
    layer: torch.Tensor  # (N,) the active features: block,
    position: torch.Tensor  # (N,) position,
    feature: torch.Tensor  # (N,) index in its transcoder,
    act: torch.Tensor  # (N,) and activation, ordered by block, then position, then feature
    decoder: torch.Tensor  # (N, d) each active feature's decoder row; a CLT's (N, L, d): its row at every
    # block it writes to (zeros before its own)
    logits: torch.Tensor  # (V,) the last position's

    @property
    def error(self) -> torch.Tensor:
        """(L, T, d) what each transcoder misses: the MLP's output minus the transcoder's."""
        return self.mlp_out - self.recon


def check_model(model: GPT) -> None:
    if model.cfg.softcap and model.cfg.extras == ["softcap"]:
        raise ValueError(
            f"an attribution graph explains the answer's logit as a sum of its sources; this model caps its logits "
            f"({model.cfg.softcap:g} tanh(z / {model.cfg.softcap:g}), Gemma 2's softcap), which no sum gives, and "
            "gptscope does not yet graph the logit before the cap"
        )
    if model.cfg.extras:
        raise ValueError(
            f"an attribution graph needs a stream that is a plain sum; nanochat's block ({', '.join(model.cfg.extras)}) "
            "scales and mixes the stream between blocks, reads the tokens again and caps the logits, and its frozen "
            "replacement is not built yet"
        )
    if model.cfg.norm != "pre":
        raise ValueError(
            "an attribution graph needs a stream that is a plain sum of what each part writes (norm='pre'); "
            "this model normalises it between them"
        )


@torch.no_grad()
def trace(model: GPT, codes: Codes, ids: Sequence[int]) -> Trace:
    """Run the prompt through the real model (explain mode) and its transcoders."""
    check_model(model)
    L = model.cfg.n_layer
    if len(codes) != L:
        raise ValueError(f"the set has {len(codes)} transcoders; the model has {L} MLPs")
    per = (
        "hook_resid_pre",
        "ln1.hook_scale",
        "ln2.hook_scale",
        "attn.hook_pattern",
        "ln2.hook_normalized",
        "hook_mlp_out",
    )
    names = [hook_name(n, i) for i in range(L) for n in per] + ["ln_final.hook_scale"]
    with model.capture(names) as c:
        logits, _ = model(torch.tensor([list(ids)], device=model.wte.weight.device), last_only=True)

    def stack(n: str) -> torch.Tensor:
        return torch.stack([c[hook_name(n, i)][0] for i in range(L)])

    mlp_in = stack("ln2.hook_normalized")
    if isinstance(codes, CLT):
        fs = [t.encode(mlp_in[i]) for i, t in enumerate(codes)]
        codes_out = [(codes.decode_to(fs, i), f) for i, f in enumerate(fs)]
    else:
        codes_out = [t(mlp_in[i]) for i, t in enumerate(codes)]  # (recon (T, d), f (T, F)) per block
    nz = [f.nonzero() for _, f in codes_out]  # (n, 2): position, feature; by position, then feature
    return Trace(
        ids=tuple(ids),
        embed=c[hook_name("hook_resid_pre", 0)][0],
        scale1=stack("ln1.hook_scale"),
        scale2=stack("ln2.hook_scale"),
        scale_f=c["ln_final.hook_scale"][0],
        pattern=stack("attn.hook_pattern"),
        mlp_in=mlp_in,
        mlp_out=stack("hook_mlp_out"),
        recon=torch.stack([r for r, _ in codes_out]),
        layer=torch.cat([torch.full((len(n),), i, dtype=torch.long) for i, n in enumerate(nz)]),
        position=torch.cat([n[:, 0] for n in nz]),
        feature=torch.cat([n[:, 1] for n in nz]),
        act=torch.cat([f[n[:, 0], n[:, 1]] for (_, f), n in zip(codes_out, nz)]),
        decoder=_decoders(codes, nz),
        logits=logits[0, -1],
    )


def _decoders(codes: Codes, nz: list[torch.Tensor]) -> torch.Tensor:
    """The active features' decoder rows: (N, d), or a CLT's (N, L, d), zeros before each one's block."""
    if not isinstance(codes, CLT):
        return torch.cat([t.W_dec[n[:, 1]] for t, n in zip(codes, nz)])
    L = len(codes)
    rows = [F.pad(codes.W_dec[i][n[:, 1]], (0, 0, i, 0)) for i, n in enumerate(nz)]  # (n, L, d) each
    return torch.cat(rows) if rows else codes.b_dec.new_zeros(0, L, codes.cfg.d_in)


# ---- the frozen replacement model ------------------------------------------------------------------


def frozen_norm(m: torch.nn.Module, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A norm with its divisor fixed (the prompt's): linear in x."""
    if isinstance(m, LayerNorm):
        y = (x - x.mean(-1, keepdim=True)) / scale * m.weight
        return y + m.bias if m.bias is not None else y
    assert isinstance(m, RMSNorm)
    return x / scale if m.weight is None else x / scale * m.weight


def value_rows(cfg: GPTConfig) -> slice:
    """W_V's rows of the fused q, k, v projection (c_attn): after the query heads' and the key heads'."""
    nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.d_head
    return slice((nh + nkv) * hs, (nh + 2 * nkv) * hs)


def frozen_attention(block: Block, h: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """What attention adds with its pattern fixed: each head's values (B, T, d) -> (B, T, d)."""
    attn = block.attn
    rows = value_rows(attn.cfg)
    bias = attn.c_attn.bias[rows] if attn.c_attn.bias is not None else None
    return mix_values(block, F.linear(h, attn.c_attn.weight[rows], bias), pattern)


def mix_values(block: Block, v: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Attention's output from its values v (B, T, n_kv * hs) and its fixed pattern -> (B, T, d)."""
    cfg = block.attn.cfg
    nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.d_head
    v = v.view(*v.shape[:2], nkv, hs).transpose(1, 2)  # (B, nkv, T, hs)
    if nkv != nh:
        v = v.repeat_interleave(nh // nkv, dim=1)  # (B, nh, T, hs)
    y = pattern @ v  # (B, nh, T, hs); a pattern per row (B, nh, T, T) may widen a batch of one
    z = y.transpose(1, 2).reshape(y.shape[0], v.shape[2], nh * hs)  # (B, T, nh * hs)
    return F.linear(z, block.attn.c_proj.weight, block.attn.c_proj.bias)


@dataclass(frozen=True)
class ValueMap:
    """A block's values as one affine map of the stream x entering it, its attention norm folded into W_V:
    v = (x @ M) / scale1 + c, the same as W_V norm(x) + b_V with the norm's divisor fixed. A backward pass
    through it is one product and one division, where the norm's own steps (centre, divide, scale) were
    five passes over every row's gradient."""

    M: torch.Tensor  # (d, n_kv * hs): diag(gain) W_V^T, centred over its rows for a LayerNorm (x - mean(x))
    c: torch.Tensor | None  # (n_kv * hs,): W_V (the norm's shift) + b_V, or None without either


def value_map(block: Block) -> ValueMap:
    """The block's ValueMap, computed in float64 and kept in the weights' dtype."""
    attn, norm = block.attn, block.ln1
    rows = value_rows(attn.cfg)
    W = attn.c_attn.weight[rows].double()  # (n_kv * hs, d)
    gain = norm.weight.double() if norm.weight is not None else None
    A = W.T * gain[:, None] if gain is not None else W.T  # (d, n_kv * hs)
    parts = []  # of c
    if isinstance(norm, LayerNorm):
        A = A - A.mean(0, keepdim=True)  # x - mean(x) is x times the centring matrix, symmetric
        if norm.bias is not None:
            parts.append(norm.bias.double() @ W.T)
    if attn.c_attn.bias is not None:
        parts.append(attn.c_attn.bias[rows].double())
    c = sum(parts[1:], parts[0]) if parts else None
    dtype = attn.c_attn.weight.dtype
    return ValueMap(A.to(dtype), None if c is None else c.to(dtype))


def replacement(
    model: GPT,
    tr: Trace,
    embed: torch.Tensor,
    writes: torch.Tensor | Sequence[torch.Tensor],
    upto: int | None = None,
    maps: Sequence[ValueMap] | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The frozen replacement model: embed (B, T, d) enters block 0; block l's MLP writes
    writes[:, l] (B, L, T, d), or writes[l] of a list of L (B, T, d) -> (what each MLP's transcoder reads,
    (B, T, d) per block; the final norm's output (B, T, d)). upto: stop once block `upto`'s transcoder
    input is read (no final). maps: each block's values through its ValueMap (`value_map`: what a backward
    pass reads fastest; the same to float rounding), else through the norm and W_V as the model computes
    them. (A list of leaves of their own is what a backward pass reads best: from one (B, L, T, d) leaf,
    each block's slice gave it a (B, L, T, d) gradient of zeros to fill and add.)"""
    if isinstance(writes, torch.Tensor):
        writes = writes.unbind(1)
    x, reads = embed, []
    for li, block in enumerate(model.blocks):
        b = cast(Block, block)
        enter = x
        if maps is None:
            x = x + frozen_attention(b, frozen_norm(b.ln1, x, tr.scale1[li]), tr.pattern[li])
        else:
            vm = maps[li]
            v = (x @ vm.M) / tr.scale1[li]  # (B, T, n_kv * hs)
            x = x + mix_values(b, v if vm.c is None else v + vm.c, tr.pattern[li])
        reads.append(frozen_norm(b.ln2, enter if b.parallel else x, tr.scale2[li]))  # parallel: the block's input
        if li == upto:
            return reads, None
        x = x + writes[li]
    return reads, frozen_norm(model.ln_final, x, tr.scale_f)


# ---- targets and their incoming edges --------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A node whose value the graph explains: the answer's logit (layer None: unembedding row `up`
    minus row `down`, if given) or feature (layer, position, feature)'s pre-activation."""

    layer: int | None
    position: int
    feature: int = 0
    up: int = 0
    down: int | None = None


def reach(targets: Sequence[Target]) -> int | None:
    """How far the replacement must run for these targets: the last block a feature target reads,
    or None (every block and the final norm) for the logit."""
    layers = [t.layer for t in targets]
    return None if None in layers else max(cast(list[int], layers))


def values(model: GPT, codes: Codes, targets: Sequence[Target], reads, final) -> torch.Tensor:
    """(B,) row r's target's value, targets[r] read from row r of the replacement's reads."""
    out = []
    for r, t in enumerate(targets):
        if t.layer is None:
            w = model.lm_head.weight[t.up] - (model.lm_head.weight[t.down] if t.down is not None else 0.0)
            out.append(final[r, t.position] @ w)
        else:
            c = codes[t.layer]
            out.append(reads[t.layer][r, t.position] @ c.W_enc[:, t.feature] + c.b_enc[t.feature])
    return torch.stack(out)


@dataclass
class Edges:
    """The incoming weights of some targets: from every token, active feature and error node."""

    tokens: torch.Tensor  # (R, T)
    features: torch.Tensor  # (R, N)
    errors: torch.Tensor  # (R, L, T)
    constant: torch.Tensor  # (R,) what the biases and norms' shifts add
    value: torch.Tensor  # (R,) the target's value in the replacement model

    def total(self) -> torch.Tensor:
        return self.tokens.sum(1) + self.features.sum(1) + self.errors.sum((1, 2)) + self.constant


@dataclass
class FrozenRun:
    """One run of the frozen replacement model on the prompt (batch 1) with its autograd graph, kept for
    many backward passes (a graph's build: one run for all its batches instead of one per batch). The
    model is linear in its sources, so every batch's gradients are those of a run of its own, bit for bit:
    a backward pass from block l's reads goes through blocks l, l - 1, ... only."""

    embed: torch.Tensor  # (1, T, d) the leaf the tokens' gradients are read at
    written: list[torch.Tensor]  # L (1, T, d): the leaves each MLP's write's gradients are read at
    reads: list[torch.Tensor]
    final: torch.Tensor | None


def frozen_run(model: GPT, tr: Trace, upto: int | None = None, rows: int = 1) -> FrozenRun:
    """The replacement's run of the prompt in `rows` rows (a trace with a pattern per row: one each), every
    block's reads (upto: block upto's last) and the final norm's, with autograd's graph (the trace may come
    from an inference-mode run: what the backward pass keeps is copied out)."""
    with torch.inference_mode(False), torch.enable_grad():
        frozen = replace(
            tr,
            scale1=tr.scale1.clone(),
            scale2=tr.scale2.clone(),
            scale_f=tr.scale_f.clone(),
            pattern=tr.pattern.clone(),
        )
        embed = tr.embed.expand(rows, *tr.embed.shape).clone().requires_grad_(True)
        written = [w.expand(rows, *w.shape).clone().requires_grad_(True) for w in tr.mlp_out]
        with torch.no_grad():
            maps = [value_map(cast(Block, b)) for b in model.blocks]
        reads, final = replacement(model, frozen, embed, written, upto, maps)
    return FrozenRun(embed, written, reads, final)


@dataclass
class Reused:
    """What every batch of a graph's build reads, made once for all of them."""

    base: tuple  # the constants' run (`source_free_run`, every block)
    run: FrozenRun  # the gradients' run (`frozen_run`, every block)
    slots: list[Slots | None]  # each block's features laid out by position (`position_slots`)


def reused_for(model: GPT, codes: Codes, tr: Trace) -> Reused:
    slots = [None if tr.decoder.dim() == 3 else position_slots(tr, li) for li in range(model_depth(tr))]
    return Reused(source_free_run(model, codes, tr), frozen_run(model, tr), slots)


def edges_into(model: GPT, codes: Codes, tr: Trace, targets: Sequence[Target], reused: Reused | None = None) -> Edges:
    """Every source's direct effect on each target (one row of the batched backward pass each); reused:
    the runs and layouts a graph's build makes once for all its calls (`reused_for`), else made here.

    The frozen replacement is linear, so a target's gradient does not depend on where the model runs:
    one run of the prompt (batch 1) and one backward pass per target, batched over the targets
    (autograd's is_grads_batched), give every row's gradient, bit for bit what R runs would. A trace whose
    pattern differs by row (head loadings' masks) runs R rows, as before."""
    R = len(targets)
    one = tr.pattern.dim() == 4  # the same frozen model for every row
    retain = reused is not None and one
    run = reused.run if reused is not None and one else frozen_run(model, tr, reach(targets), 1 if one else R)
    with torch.inference_mode(False), torch.enable_grad():
        value = _row_values(model, codes, targets, run.reads, run.final, per_row=not one)
        if one:
            g_embed, *g_blocks = torch.autograd.grad(
                value,
                [run.embed, *run.written],
                torch.eye(R, dtype=value.dtype),
                is_grads_batched=True,
                allow_unused=True,
                retain_graph=retain,
            )
            g_embed = g_embed[:, 0]
            g_blocks = [None if g is None else g[:, 0] for g in g_blocks]
        else:
            g_embed, *g_blocks = torch.autograd.grad(value.sum(), [run.embed, *run.written], allow_unused=True)
    # each block's gradient where its MLP writes (R, T, d), up to the targets' reads (from block `upto` on no
    # MLP writes what the targets read: no edge, and no gradient)
    L, upto = len(g_blocks), reach(targets)
    upto = L if upto is None else upto
    g_write = cast(list[torch.Tensor], g_blocks[:upto])
    with torch.no_grad():
        tokens = (g_embed * tr.embed).sum(-1)  # (R, T)
        errors = g_embed.new_zeros(R, L, len(tr.ids))  # (R, L, T)
        for li, g in enumerate(g_write):
            errors[:, li] = (g * tr.error[li]).sum(-1)
        slots = reused.slots if reused is not None else None
        features = feature_terms(tr, g_write, upto, slots) if upto else g_embed.new_zeros(R, len(tr.act))
    constant = constants(model, codes, tr, targets, reused.base if reused is not None else None)
    return Edges(tokens, features, errors, constant, value.detach())


def _row_values(model: GPT, codes: Codes, targets: Sequence[Target], reads, final, per_row: bool) -> torch.Tensor:
    """(R,) the targets' values, row r's read from row r of the replacement's run (per_row) or from its
    only row (a run of batch 1), as one node of the graph per kind of target: a Python loop of R nodes
    would make a backward pass batched over the rows cost R x R."""
    order: list[int] = []
    parts: list[torch.Tensor] = []
    kinds: dict[int | None, list[int]] = {}
    for r, t in enumerate(targets):
        kinds.setdefault(t.layer, []).append(r)
    for layer, rs in kinds.items():
        at = (torch.tensor(rs) if per_row else 0, [targets[r].position for r in rs])  # (row, position) of each
        if layer is None:
            W = model.lm_head.weight
            down = [targets[r].down for r in rs]
            has = torch.tensor([d is not None for d in down], dtype=W.dtype)
            w = W[[targets[r].up for r in rs]] - W[[0 if d is None else d for d in down]] * has[:, None]
            parts.append((final[at] * w).sum(-1))
        else:
            c, f = codes[layer], torch.tensor([targets[r].feature for r in rs])
            parts.append((reads[layer][at] * c.W_enc[:, f].T).sum(-1) + c.b_enc[f])
        order += rs
    return torch.cat(parts)[torch.argsort(torch.tensor(order))]


def feature_terms(
    tr: Trace, g_write: torch.Tensor | Sequence[torch.Tensor], upto: int, slots: list[Slots | None] | None = None
) -> torch.Tensor:
    """(R, N) each row's gradient where the MLPs write (R, L, T, d), or a list of each block's (R, T, d) up
    to `upto`, times what each active feature wrote there (act x its decoder row), for the features of
    blocks before `upto` (the rest: 0); a CLT's feature wrote at its own block and every later one, and its
    term is the sum over them. Per block, each feature's own position's gradient against its row: one
    batched product over the positions where the block's features are laid out by position
    (`position_slots`; slots: every block's, where the caller keeps them), else (R, n, d) products, where
    all positions' against all rows took T times that."""
    g = g_write.unbind(1) if isinstance(g_write, torch.Tensor) else g_write  # each block's (R, T, d)
    features = torch.zeros(g[0].shape[0], len(tr.act), dtype=g[0].dtype)
    ends = block_ends(tr)
    if tr.decoder.dim() == 3:  # a CLT's: what blocks 0..li's features wrote at block li
        for li in range(upto):
            at = slice(0, ends[li + 1])
            if at.stop:
                features[:, at] += _own(g[li], tr.position[at], tr.decoder[at, li]) * tr.act[at]
        return features
    for li in range(upto):
        at = slice(ends[li], ends[li + 1])
        if at.stop > at.start:
            laid = slots[li] if slots is not None else position_slots(tr, li)
            own = _own(g[li], tr.position[at], tr.decoder[at]) if laid is None else laid.dot(g[li])
            features[:, at] = own * tr.act[at]
    return features


def _own(g: torch.Tensor, position: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(R, n) g (R, T, d) at each of n features' positions, dotted with its row (n, d)."""
    return (g.index_select(1, position) * rows).sum(-1)


@dataclass(frozen=True)
class Slots:
    """One block's active features laid out by position: K slots a position, each feature in the next free
    slot of its own (they come by position, then feature), zero rows in the slots left over."""

    rows: torch.Tensor  # (T, d, K) the decoder rows, a position's as the columns of one matrix
    place: torch.Tensor  # (n,) each feature's product among the (T * K): position * K + slot

    def dot(self, g: torch.Tensor) -> torch.Tensor:
        """(R, n) g (R, T, d) at each feature's position dotted with its row: T products (R, d) x (d, K)."""
        out = torch.bmm(g.transpose(0, 1), self.rows)  # (T, R, K)
        return out.transpose(0, 1).reshape(g.size(0), -1).index_select(1, self.place)


def position_slots(tr: Trace, li: int) -> Slots | None:
    """Block li's features laid out by position (a per-layer transcoder's), or None where the slots would be
    more than SLOTS_WASTE times the features (a few positions with far more features than the rest)."""
    ends = block_ends(tr)
    at = slice(ends[li], ends[li + 1])
    position, rows = tr.position[at], tr.decoder[at]
    T, n = len(tr.ids), len(position)
    count = torch.bincount(position, minlength=T)
    K = int(count.max()) if n else 0
    if not n or T * K / n > SLOTS_WASTE:
        return None
    first = torch.cumsum(count, 0) - count  # each position's first feature
    place = position * K + (torch.arange(n) - first[position])
    laid = rows.new_zeros(T * K, rows.size(1))
    laid[place] = rows
    return Slots(laid.view(T, K, -1).transpose(1, 2).contiguous(), place)


def block_ends(tr: Trace) -> list[int]:
    """(L + 1,) where each block's features start in the trace's (ordered by block), then N."""
    return [0, *torch.cumsum(torch.bincount(tr.layer, minlength=model_depth(tr)), 0).tolist()]


def constants(
    model: GPT, codes: Codes, tr: Trace, targets: Sequence[Target], base: tuple | None = None
) -> torch.Tensor:
    """(R,) each target's value in the frozen model with every source taken out (no token, no
    feature, no error: each MLP writes only its transcoder's bias), computed on its own. base: that
    run (`source_free_run`) where the caller keeps it (a graph's build: one for all its batches)."""
    R = len(targets)
    with torch.no_grad():  # the run is the same for every target: once, then read R times
        reads, final = base if base is not None else source_free_run(model, codes, tr, reach(targets))
        reads = [r.expand(R, *r.shape[1:]) for r in reads]
        final = None if final is None else final.expand(R, *final.shape[1:])
        return values(model, codes, targets, reads, final)


@torch.no_grad()
def source_free_run(model: GPT, codes: Codes, tr: Trace, upto: int | None = None) -> tuple:
    """The frozen model's run with no source (`constants`'): its reads up to block `upto` (None: every
    block and the final norm), each block's as a shorter run reads it, bit for bit."""
    embed = torch.zeros(1, *tr.embed.shape)
    b_dec = codes.b_dec if isinstance(codes, CLT) else torch.stack([c.b_dec for c in codes])
    bias = b_dec[None, :, None, :].expand(1, *tr.mlp_out.shape)
    return replacement(model, tr, embed, bias, upto)


# ---- the whole graph -------------------------------------------------------------------------------


@dataclass
class Graph:
    """Rows: the target (row 0), then each active feature whose inputs were computed (`rows`: their
    index into the trace's features). Columns: every token, feature and error node."""

    target: Target
    rows: torch.Tensor  # (R - 1,)
    edges: Edges

    def matrix(self, tr: Trace) -> torch.Tensor:
        """(R, T + N + L * T) the rows' incoming weights, columns: tokens, features, errors."""
        e = self.edges
        return torch.cat([e.tokens, e.features, e.errors.flatten(1)], 1)


def build(
    model: GPT,
    codes: Codes,
    tr: Trace,
    target: Target,
    max_rows: int = 1024,
    on_rows: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    workers: int = 1,
) -> Graph:
    """The target's incoming edges, then those of the active features that matter most: at each
    round the ROWS features of largest influence on the target (by the edges known so far) whose
    inputs are not computed yet, up to max_rows of them (a feature with no influence never is); each
    batch holds the features of one block, so the frozen model runs only up to it. on_rows(done,
    total) after each round, cancel() before each batch (True stops with Cancelled). workers: threads
    that compute a round's batches side by side, on one torch thread each (a batch's small products
    keep a second torch thread idle: one core each does more); the edges are the same whatever it is.

    The rows' edges are written once into buffers of max_rows rows, and each round's influence is one
    sweep over the rows, block by block from the last (`_Influence`), not a copy of the graph and a
    power iteration over all of it: a round costs about what its own rows do, and the rows chosen are
    those that `influence` ranks first on the graph so far (up to float rounding)."""
    T, N = len(tr.ids), len(tr.act)
    budget = min(max_rows, N)
    reused = reused_for(model, codes, tr)  # the runs and layouts every batch reads
    first = edges_into(model, codes, tr, [target], reused)
    store, infl = _Store(first, budget + 1), _Influence(tr, first)
    rows: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long)]
    done, n_done = torch.zeros(N, dtype=torch.bool), 0
    inference = torch.is_inference_mode_enabled()  # the caller's, for the workers' threads too

    def batch(picked: torch.Tensor) -> Edges:  # one block's features
        _check(cancel)
        tgts = [Target(int(tr.layer[i]), int(tr.position[i]), int(tr.feature[i])) for i in picked]
        with torch.inference_mode(inference):
            return edges_into(model, codes, tr, tgts, reused)

    with _Batches(workers) as run:
        while n_done < budget:
            _check(cancel)
            score = infl.features().masked_fill(done, -1.0)
            best = torch.argsort(-score, stable=True)[: min(rows_per_batch(model.cfg, T), budget - n_done)]
            best = best[score[best] > 0]
            if not len(best):
                break
            done[best] = True
            n_done += len(best)
            picked = [best[tr.layer[best] == li] for li in tr.layer[best].unique().tolist()]
            for p, new in zip(picked, run(batch, picked)):  # by block, as they were chosen
                store.add(new)
                infl.add(int(tr.layer[p[0]]), p, new)
                rows.append(p)
            if on_rows is not None:
                on_rows(n_done, budget)
    del infl
    return Graph(target, torch.cat(rows), store.edges())


class _Batches:
    """`run(fn, items)`: [fn(item) for item in items], on `workers` threads of one torch thread each side by
    side (the last items first: a later block's batch goes through more blocks), or in this thread."""

    def __init__(self, workers: int):
        self.pool = (
            ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,)) if workers > 1 else None
        )

    def __enter__(self) -> Callable[[Callable[[torch.Tensor], Edges], list[torch.Tensor]], list[Edges]]:
        return self.run

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def run(self, fn: Callable[[torch.Tensor], Edges], items: list[torch.Tensor]) -> list[Edges]:
        if self.pool is None or len(items) < 2:
            return [fn(x) for x in items]
        futures = {i: self.pool.submit(fn, items[i]) for i in reversed(range(len(items)))}
        return [futures[i].result() for i in range(len(items))]


_FIELDS = ("tokens", "features", "errors", "constant", "value")


class _Store:
    """A graph's rows' edges as they come, in buffers of `cap` rows (torch.empty: the memory is the rows
    written), so that adding a batch copies only the batch."""

    def __init__(self, first: Edges, cap: int):
        self.parts = [torch.empty(cap, *getattr(first, f).shape[1:], dtype=getattr(first, f).dtype) for f in _FIELDS]
        self.n = 0
        self.add(first)

    def add(self, e: Edges) -> None:
        r = len(e.value)
        for buf, f in zip(self.parts, _FIELDS):
            buf[self.n : self.n + r] = getattr(e, f)
        self.n += r

    def edges(self) -> Edges:
        """The rows written (copied out where fewer than the buffers hold, and the buffers let go)."""
        full = self.n == len(self.parts[0])
        parts = [b if full else b[: self.n].clone() for b in self.parts]
        self.parts = []
        return Edges(*parts)


class _Influence:
    """Every feature's influence on the target by the rows known so far, as `influence` defines it (every
    path's product of normalised absolute weights, summed), in one sweep: a row of block l reads only the
    features of earlier blocks, so once the rows of every later block have passed theirs on, a row's own
    influence (what flowed into its column) is whole, and it passes that times its normalised weights on
    to the features before its block. Per block: its rows' feature columns (into the trace's features) and
    their normalised weights from the features of the blocks before (N_l by features before it), grown
    by doubling."""

    def __init__(self, tr: Trace, first: Edges):
        L = model_depth(tr)
        self.before = block_ends(tr)  # block l's features are [before[l], before[l + 1])
        self.cap = [b - a for a, b in zip(self.before, self.before[1:])]
        self.target = _normalised(first)[0]  # (N,) the target's shares
        self.cols: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long) for _ in range(L)]
        self.rows: list[torch.Tensor] = [first.features.new_empty(0, self.before[li]) for li in range(L)]
        self.n = [0] * L

    def add(self, li: int, picked: torch.Tensor, e: Edges) -> None:
        """Rows of block li: the features `picked` and their incoming edges `e`."""
        w = _normalised(e)[:, : self.before[li]]
        n, buf = self.n[li], self.rows[li]
        if n + len(w) > len(buf):  # grow: double, at most every feature of the block
            grown = buf.new_empty(min(self.cap[li], max(n + len(w), 2 * len(buf), 16)), buf.size(1))
            grown[:n] = buf[:n]
            self.rows[li] = buf = grown
        buf[n : n + len(w)] = w
        self.n[li] = n + len(w)
        self.cols[li] = torch.cat([self.cols[li], picked])

    def features(self) -> torch.Tensor:
        """(N,) every feature's influence on the target (the features columns of `influence`'s first)."""
        total = self.target.clone()
        for li in range(len(self.n) - 1, 0, -1):  # block 0's rows read no feature
            if self.n[li]:
                own = total[self.cols[li]]  # whole: only later blocks' rows (and the target) feed these
                total[: self.before[li]] += own @ self.rows[li][: self.n[li]]
        return total


def _normalised(e: Edges) -> torch.Tensor:
    """(R, N) the rows' absolute feature weights as shares of each row's absolute sum (every column)."""
    a = torch.cat([e.tokens, e.features, e.errors.flatten(1)], 1).abs_()
    a.div_(a.sum(1, keepdim=True).clamp_min(1e-12))
    T = e.tokens.size(1)
    return a[:, T : T + e.features.size(1)]


@dataclass
class Pruned:
    features: torch.Tensor  # the kept features, by index into the trace's
    influence: torch.Tensor  # (N,) every feature's influence on the target (share of the total, 0..1)
    token_influence: torch.Tensor  # (T,)
    error_influence: torch.Tensor  # (L * T,)
    kept_share: float  # the kept features' share of all features' influence
    edges: list[tuple[int, int, float]]  # (source column, target row, weight) of the kept edges, largest
    # influence first: every one, or the max_edges largest
    edge_share: float  # the kept edges' share of the kept nodes' edge influence
    kept_edges: int  # how many edges are kept, listed or not
    columns: torch.Tensor  # the columns (tokens, features, errors) with a kept edge, listed or not, ascending


def _check(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled()


def _row_chunks(M: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    """(first row, view) for blocks of M's rows (R, C) of about CHUNK cells: writing a view writes M."""
    step = max(1, CHUNK // max(1, M.size(1)))
    for a in range(0, M.size(0), step):
        yield a, M[a : a + step]


def influence(g: Graph, tr: Trace, cancel: Callable[[], bool] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(columns' influence on the target (T + N + L*T,), the normalised matrix (R, columns)): each row's
    absolute weights as shares of their sum, and every path's product of shares, summed. cancel() is
    asked between the steps (True stops with Cancelled)."""
    A = g.matrix(tr)
    for _, a in _row_chunks(A):  # in place, a block of rows at a time: one matrix besides the graph's
        _check(cancel)
        a.abs_()
        a.div_(a.sum(1, keepdim=True).clamp_min(1e-12))
    T = len(tr.ids)
    col_of_row = torch.cat([torch.tensor([-1]), T + g.rows])  # row r's node as a column (-1: the target)
    total = torch.zeros(A.size(1), dtype=A.dtype)
    weight = torch.zeros(A.size(0), dtype=A.dtype)
    weight[0] = 1.0  # how much each row's node matters: the target fully, then by the paths into it
    for _ in range(model_depth(tr) + 2):
        _check(cancel)
        reach = weight @ A  # (columns,)
        total += reach
        weight = reach[col_of_row.clamp_min(0)] * (col_of_row >= 0)
        if float(weight.abs().sum()) < 1e-9:
            break
    return total, A


def model_depth(tr: Trace) -> int:
    return int(tr.scale1.size(0))


# ---- the largest cells of a matrix, without sorting it -----------------------------------------------
# A cut of a matrix S (R, C) with no negative cell, its cells taken largest first (ties: in the flattened
# order, as a stable sort would): every cell whose key is above `key` and the first `ties` equal to it,
# `count` cells in all. A float's key is its bit pattern as an integer, in the same order for numbers that
# are not negative, so the cut is found digit by digit (DIGIT bits a pass over S, a block of rows at a
# time) instead of by sorting S, which took seconds per 27M cells, twice S's memory, and no cancel.

KEY_TYPES = {2: torch.int16, 4: torch.int32, 8: torch.int64}
DIGIT = 11


@dataclass(frozen=True)
class Cut:
    key: int
    ties: int
    count: int


def _keys(a: torch.Tensor) -> torch.Tensor:
    return a.contiguous().view(KEY_TYPES[a.element_size()])


def _select(S: torch.Tensor, want: float, by_sum: bool, cancel: Callable[[], bool] | None) -> Cut | None:
    """by_sum: the fewest largest cells whose sum reaches `want`; else the `want` largest. None when
    S falls short of it. Where S has at most COMPACT_CELLS cells that are not zero (a graph's scores: about
    2% of them), the digits are counted over those alone, gathered in one pass; a zero cell takes part in a
    cut only as its last cell (a cut at 0), which the passes over S then find."""
    nonzero = _nonzero_cells(S, cancel)
    if nonzero is not None:
        cut = _select_in(lambda: iter([nonzero]), S.dtype, want, by_sum, cancel)
        if (cut is None and by_sum) or (cut is not None and cut.key != 0):
            return cut
        del nonzero
    return _select_in(
        lambda: ((_keys(a).flatten(), a.flatten()) for _, a in _row_chunks(S)), S.dtype, want, by_sum, cancel
    )


def _nonzero_cells(S: torch.Tensor, cancel: Callable[[], bool] | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(keys, values) of S's cells that are not zero, in the flattened order; None where there are more
    than COMPACT_CELLS."""
    keys, values, n = [], [], 0
    for _, a in _row_chunks(S):
        _check(cancel)
        v = a.flatten()
        v = v[v != 0]
        n += len(v)
        if n > COMPACT_CELLS:
            return None
        keys.append(_keys(v))
        values.append(v)
    return (torch.cat(keys), torch.cat(values)) if keys else None


def _select_in(
    chunks: Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]],
    dtype: torch.dtype,
    want: float,
    by_sum: bool,
    cancel: Callable[[], bool] | None,
) -> Cut | None:
    """_select over the cells chunks() gives as (keys, values) pairs, a pass each digit."""
    size = torch.empty(0, dtype=dtype).element_size()
    high, prefix, left, above = size * 8 - 1, 0, float(want), 0
    count = torch.zeros(0)
    while high > 0:
        width = min(DIGIT, high)
        shift = high - width
        count, total = torch.zeros(2**width, dtype=torch.float64), torch.zeros(2**width, dtype=torch.float64)
        for k, v in chunks():
            _check(cancel)
            on = (k >> high) == prefix  # the cells that the digits found so far leave
            digit = (k[on] >> shift) & (2**width - 1)
            count += torch.bincount(digit, minlength=2**width)
            if by_sum:
                total += torch.bincount(digit, weights=v[on].double(), minlength=2**width)
        amount = total if by_sum else count
        upward = amount.flip(0).cumsum(0).flip(0)  # what the bins from b upward hold
        hit = torch.nonzero(upward >= left).flatten()
        if not len(hit):
            return None
        b = int(hit[-1])
        left -= float(upward[b] - amount[b])
        above += int(count[b + 1 :].sum())
        prefix, high = (prefix << width) | b, shift
    value = float(torch.tensor([prefix]).to(KEY_TYPES[size]).view(dtype))
    ties = max(1, min(int(count[prefix & (2**width - 1)]), math.ceil(left / value if by_sum else left)))
    return Cut(prefix, ties, above + ties)


def _collect(S: torch.Tensor, cut: Cut, cancel: Callable[[], bool] | None, flat: bool) -> tuple:
    """The cut's cells: (the columns with one (C,) bool, their sum in float64, and with `flat` their
    indices into S.flatten(), ascending, else None)."""
    columns, total, found, ties = torch.zeros(S.size(1), dtype=torch.bool), 0.0, [], cut.ties
    for start, a in _row_chunks(S):
        _check(cancel)
        k = _keys(a)
        take = k > cut.key
        if ties:
            eq = torch.nonzero((k == cut.key).flatten()).flatten()[:ties]
            take.view(-1)[eq] = True
            ties -= len(eq)
        columns |= take.any(0)
        total += float(a[take].double().sum())
        if flat:
            found.append(torch.nonzero(take.flatten()).flatten() + start * S.size(1))
    return columns, total, torch.cat(found) if flat else None


def _weights(e: Edges, T: int, N: int, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The graph's weights at (rows, cols) of its matrix, read from its parts."""
    w = torch.empty(len(rows), dtype=e.tokens.dtype)
    for lo, hi, part in ((0, T, e.tokens), (T, T + N, e.features), (T + N, None, e.errors.flatten(1))):
        at = (cols >= lo) & (cols < hi) if hi is not None else cols >= lo
        w[at] = part[rows[at], cols[at] - lo]
    return w


def prune(
    g: Graph,
    tr: Trace,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    max_edges: int | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Pruned:
    """Keep the features carrying `node_threshold` of the features' influence, and the fewest edges between
    kept nodes (and into the target), largest first, carrying `edge_threshold` of those edges' influence (an
    edge of no influence never is); list the `max_edges` of largest influence (None: all). The graph's matrix
    is read in blocks of rows, cancel() asked between them (True stops with Cancelled)."""
    T, N = len(tr.ids), len(tr.act)
    total, A = influence(g, tr, cancel)
    feats = total[T : T + N]
    share = feats / feats.sum().clamp_min(1e-12)
    order = torch.argsort(-share, stable=True)
    cum = torch.cumsum(share[order], 0)
    n_keep = int((cum < node_threshold).sum()) + 1 if N else 0
    kept = order[:n_keep].sort().values
    keep_col = torch.zeros(A.size(1), dtype=torch.bool)
    keep_col[:T] = True
    keep_col[T + kept] = True
    keep_col[T + N :] = True
    row_node = torch.cat([torch.tensor([True]), torch.isin(g.rows, kept)])
    weight = torch.cat([torch.ones(1), total[T + g.rows]]) * row_node  # each kept row node's own influence
    for start, a in _row_chunks(A):  # A becomes every edge's influence, in place (it is not needed again)
        _check(cancel)
        a.mul_(weight[start : start + len(a), None]).mul_(keep_col)
    edges, n_e, edge_share, columns = _kept_edges(g, tr, A, edge_threshold, max_edges, cancel)
    return Pruned(
        features=kept,
        influence=share,
        token_influence=total[:T] / total.sum().clamp_min(1e-12),
        error_influence=total[T + N :] / total.sum().clamp_min(1e-12),
        kept_share=float(share[kept].sum()) if N else 1.0,
        edges=edges,
        edge_share=edge_share,
        kept_edges=n_e,
        columns=columns,
    )


def _kept_edges(
    g: Graph, tr: Trace, score: torch.Tensor, threshold: float, max_edges: int | None, cancel
) -> tuple[list[tuple[int, int, float]], int, float, torch.Tensor]:
    """prune's edges from every edge's influence `score` (R, C): (the listed edges, how many are kept,
    their share, the columns with one)."""
    mass = sum(float(a.sum(dtype=torch.float64)) for _, a in _row_chunks(score))
    if mass <= 0:
        return [], 0, 1.0, torch.zeros(0, dtype=torch.long)
    cut = _select(score, threshold * mass, True, cancel) or Cut(0, 0, int((score > 0).sum()))  # short: all > 0
    listed = cut.count if max_edges is None else min(cut.count, max_edges)
    columns, kept_sum, found = _collect(score, cut, cancel, flat=listed == cut.count)
    if found is None:
        top = _select(score, listed, False, cancel)
        assert top is not None
        found = _collect(score, top, cancel, flat=True)[2]
    found = found[torch.sort(score.flatten()[found], descending=True, stable=True).indices]
    rows, cols = found // score.size(1), found % score.size(1)
    w = _weights(g.edges, len(tr.ids), len(tr.act), rows, cols)
    edges = list(zip(cols.tolist(), rows.tolist(), w.tolist()))
    return edges, cut.count, kept_sum / mass, torch.nonzero(columns).flatten()


# ---- interventions on the real model ---------------------------------------------------------------


@torch.no_grad()
def steered_logits(
    model: GPT, codes: Codes, ids: Sequence[int], changes: Sequence[tuple[int, int, int, float]]
) -> torch.Tensor:
    """The real model's last-position logits (V,) with each (layer, position, feature, scale) of
    `changes` steered through its transcoder: at that block the MLP's output at that position gets
    (scale - 1) x the feature's activation (on the MLP's input of this very run) x its decoder row
    added, so scale 0 takes the feature out and 2 doubles it; everything after runs as usual. A CLT's
    feature writes at its block and every later one: each of those MLPs' outputs gets its change there."""
    seen: dict[int, torch.Tensor] = {}
    by_layer: dict[int, list[tuple[int, int, float]]] = {}
    for layer, pos, feat, scale in changes:
        by_layer.setdefault(layer, []).append((pos, feat, scale))
    cross = isinstance(codes, CLT)
    acts: dict[int, torch.Tensor] = {}  # block li's activations in this run, once its MLP input is read

    def add(lo: int) -> Callable[[torch.Tensor, str], torch.Tensor]:
        def fn(out: torch.Tensor, _name: str) -> torch.Tensor:
            out = out.clone()
            for li in (li for li in by_layer if li <= lo) if cross else [lo]:
                if li not in acts:
                    acts[li] = codes[li].encode(seen[li][0])  # (T, F) this run's activations
                f = acts[li]
                for pos, feat, scale in by_layer[li]:
                    row = cast(CLT, codes).W_dec[li][feat, lo - li] if cross else codes[li].W_dec[feat]
                    out[0, pos] += (scale - 1.0) * f[pos, feat] * row
            return out

        return fn

    def keep(li: int) -> Callable[[torch.Tensor, str], None]:
        return lambda t, _n: seen.__setitem__(li, t)

    hooks: list[tuple[str, Callable[[torch.Tensor, str], torch.Tensor | None]]] = []
    writes = range(min(by_layer), len(codes)) if cross and by_layer else by_layer
    for li in by_layer:
        hooks.append((hook_name("ln2.hook_normalized", li), keep(li)))
    for lo in writes:
        hooks.append((hook_name("hook_mlp_out", lo), add(lo)))
    with ExitStack() as stack:
        stack.enter_context(model.hooks(hooks))
        logits, _ = model(torch.tensor([list(ids)]), last_only=True)
    return logits[0, -1]
