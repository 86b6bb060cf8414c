"""Circuits from edges: which connections between a model's components carry the answer.

Activation patching (model/patching.py) asks which *site* carries the answer. Circuit work asks
which *connection*: a head's output read by a later head's query, key or value, or by an MLP, or by
the logits. In a pre-norm Transformer the residual stream is a sum, so every component that reads it
reads the sum of what the earlier components wrote; split that sum and each (writer, reader) pair
is an edge of the model's computational graph (`Graph`):

    upstream nodes (writers)    input: the embeddings (token + position) entering block 0
                                a{l}.h{h}: head h of block l, its output in the residual space
                                m{l}: block l's MLP (or mixture of experts)
    downstream nodes (readers)  a{l}.h{h}<q>: head h's query input; a{l}.h{g}<k>, <v>: key/value head
                                g's key and value inputs (g < n_kv_head: a shared head is one reader)
                                m{l}: the MLP's input; logits: the final norm's input

An edge u -> v exists when u writes before v reads: into block l's attention from the input and every
node of blocks before l; into block l's MLP from those and block l's heads too; into the logits from
every node. Attention's and the MLP's biases write the same on every run and are no node.

Patching an edge (`run_graph`): the clean prompt's forward pass, in which reader v gets, instead of
u's output of this run, u's output on the corrupted prompt. Each reader has its own copy of the
stream: v reads  resid - sum over its patched edges (u's output now - u's corrupted output).  The
change then flows on through every later component as usual. Patching a set of edges with weights
w (1: the edge keeps this run's value, 0: the corrupted one, between: a mix) is the same with
(1 - w) in the sum, so a circuit is the edges kept at 1 with every other edge patched. Exact by
construction: every edge kept is the clean run; none kept, every reader reads the corrupted stream,
which is the corrupted run.

Estimates from gradients (`attribution`):

    AtP (attribution patching)  score(u -> v) = (u's corrupted output - u's clean output) . dM/d(v's input)
                                at the clean run, summed over positions: one forward and one backward
                                pass give every edge's first-order estimate of what patching it changes
    EAP-IG                      the same with dM/d(v's input) averaged over `steps` runs whose token
                                embeddings lie on the straight path from the corrupted prompt's to the
                                clean one's (the midpoint of each of `steps` equal parts), integrated
                                gradients, which AtP's one-point gradient gets wrong where the metric
                                saturates

The metric M is measured on the last position's logits (model/patching.py's logit_diff or logprob).
Only GPT-2-style residual streams qualify: a post-norm (GPT-1), sandwich-norm (Gemma 2) or output-norm
(OLMo 2) block normalises the sum before the next reader, so its writers do not add up into it; a
parallel block (GPT-NeoX) feeds its MLP the block's input, not its attention's writes; a q/k norm over
every head at once (OLMo 2) makes one head's query depend on every head's input (`graph_of` refuses
them all, by name). A softcap on the logits (Gemma 2) is read through as the model reads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Literal, cast

import torch
import torch.nn.functional as F

from .attention import CausalSelfAttention
from .gpt import GPT, Block, GPTConfig, HookFn, KVCache, LayerNorm, RMSNorm, hook_name
from .patching import TOKENS_PER_CHUNK, Cancelled, SharedPrefix
from .positions import causal_allowed

ROW_BYTES = 192 * 2**20  # the upstream outputs one batched pass of `run_graph` holds (rows x n_up x T x d)


# ---- the graph -----------------------------------------------------------------------------------


KINDS = ("input", "head", "mlp", "q", "k", "v", "logits")


@dataclass(frozen=True)
class Node:
    name: str
    kind: Literal["input", "head", "mlp", "q", "k", "v", "logits"]
    layer: int  # -1 for the input, n_layer for the logits
    head: int | None = None  # a head (upstream, or q), or a key/value head (k, v)


@dataclass(frozen=True)
class Graph:
    """The nodes and edges of a config's graph. Edges are numbered reader by reader: reader v's edges
    come from upstream nodes 0 .. feeds[v] - 1 (the writers before it, in the model's order), and are
    edges first[v] .. first[v] + feeds[v] - 1."""

    upstream: tuple[Node, ...]
    downstream: tuple[Node, ...]
    feeds: tuple[int, ...]  # per reader: how many writers (the first ones) feed it
    first: tuple[int, ...]  # per reader: its first edge's number

    @property
    def n_edges(self) -> int:
        return self.first[-1] + self.feeds[-1]

    def edge(self, e: int) -> tuple[int, int]:
        """(writer, reader) of edge e."""
        v = max(i for i, f in enumerate(self.first) if f <= e)
        return e - self.first[v], v

    def ends(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(writer, reader) of every edge, two (n_edges,) long tensors."""
        up = torch.cat([torch.arange(f) for f in self.feeds])
        down = torch.repeat_interleave(torch.arange(len(self.feeds)), torch.tensor(self.feeds))
        return up, down

    def names(self) -> list[str]:
        return [
            f"{self.upstream[u].name}->{self.downstream[v].name}" for v, f in enumerate(self.feeds) for u in range(f)
        ]

    def reader_layer(self) -> torch.Tensor:
        """(n_edges,) the block each edge's reader is in (n_layer: the logits)."""
        _, down = self.ends()
        return torch.tensor([n.layer for n in self.downstream])[down]


NORMED = {
    "post": "after each sublayer (post-norm, GPT-1)",
    "both": "on each sublayer output (sandwich norm, Gemma)",
    "out": "on each sublayer output (OLMo 2)",
}


def check_config(cfg: GPTConfig) -> None:
    """Raise ValueError unless the writers of this config add up into a residual stream that each
    reader reads on its own (a softcap on the logits alone is read through: `unembed`)."""
    if cfg.nanochat_stream:
        raise ValueError(
            f"edges need a residual stream that is a plain sum; nanochat's block ({', '.join(cfg.extras)}) scales "
            "and mixes the stream between blocks, reads the tokens again and caps the logits, and gptscope "
            "does not yet define its edges"
        )
    if cfg.norm != "pre":
        raise ValueError(
            f"edges need a residual stream that is a plain sum (norm='pre'); this model normalises it "
            f"{NORMED[cfg.norm]}, so what its components write does not add up into what the next one reads"
        )
    if cfg.parallel:
        raise ValueError(
            "edges need each MLP to read the stream after its block's attention; a parallel block (GPT-NeoX, "
            "parallel=True) feeds its MLP the block's input, and gptscope does not yet define that graph's edges"
        )
    if cfg.qk_norm_all:
        raise ValueError(
            "edges give each head's query and key inputs a stream of their own; this model's q/k norm spans every "
            "head at once (OLMo 2, qk_norm_all), so one head's query depends on the others' inputs and no edge is its own"
        )


def graph_of(cfg: GPTConfig) -> Graph:
    """The graph of a pre-norm model of this config."""
    check_config(cfg)
    L, nh, nkv = cfg.n_layer, cfg.n_head, cfg.n_kv_head
    up = [Node("input", "input", -1)]
    down: list[Node] = []
    feeds: list[int] = []
    for li in range(L):
        before = len(up)  # the input and every node of the blocks before
        down += [Node(f"a{li}.h{h}<q>", "q", li, h) for h in range(nh)]
        down += [Node(f"a{li}.h{g}<{kv}>", kv, li, g) for kv in ("k", "v") for g in range(nkv)]  # type: ignore[arg-type]
        feeds += [before] * (nh + 2 * nkv)
        up += [Node(f"a{li}.h{h}", "head", li, h) for h in range(nh)]
        down.append(Node(f"m{li}", "mlp", li))
        feeds.append(len(up))  # ... and this block's heads
        up.append(Node(f"m{li}", "mlp", li))
    down.append(Node("logits", "logits", L))
    feeds.append(len(up))
    first = [0]
    for f in feeds[:-1]:
        first.append(first[-1] + f)
    return Graph(tuple(up), tuple(down), tuple(feeds), tuple(first))


# ---- a prompt's run, as the graph reads it ---------------------------------------------------------


@dataclass
class Run:
    """One prompt's forward pass: every writer's output (n_up, T, d), the stream entering each block
    and leaving the last ((n_layer + 1), T, d), and the last position's logits (V,)."""

    ids: tuple[int, ...]
    writers: torch.Tensor
    resid: torch.Tensor
    logits: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in (self.writers, self.resid, self.logits))


def run_bytes(cfg: GPTConfig, T: int, element: int = 4) -> int:
    """Run.nbytes of a T-token prompt, before running it."""
    n_up = 1 + cfg.n_layer * (cfg.n_head + 1)
    return (T * cfg.d_model * (n_up + cfg.n_layer + 1) + cfg.vocab_size) * element


def record(model: GPT, ids: Sequence[int]) -> Run:
    """Run a prompt and keep what the graph reads."""
    check_config(model.cfg)
    L, nh = model.cfg.n_layer, model.cfg.n_head
    names = [hook_name(n, i) for i in range(L) for n in ("hook_resid_pre", "attn.hook_result", "hook_mlp_out")]
    names.append(hook_name("hook_resid_post", L - 1))
    idx = torch.tensor([list(ids)], device=model.wte.weight.device)
    with model.capture(names) as c:
        logits, _ = model(idx, last_only=True)
    writers = [c[hook_name("hook_resid_pre", 0)][0]]  # the input: embeddings (+ positions)
    for i in range(L):
        result = c[hook_name("attn.hook_result", i)][0]  # (T, nh, d)
        writers += [result[:, h] for h in range(nh)] + [c[hook_name("hook_mlp_out", i)][0]]
    resid = [c[hook_name("hook_resid_pre", i)][0] for i in range(L)] + [c[hook_name("hook_resid_post", L - 1)][0]]
    return Run(tuple(ids), torch.stack(writers), torch.stack(resid), logits[0, -1])


# ---- running the graph ---------------------------------------------------------------------------


def _at(fn: Callable[[int, torch.Tensor], torch.Tensor | None], li: int) -> HookFn:
    """A hook function that calls fn(li, tensor)."""
    return lambda t, _name: fn(li, t)


def _norm(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A norm module's arithmetic (explain mode's, step by step) without firing its hook points."""
    if isinstance(m, LayerNorm):
        x = x - x.mean(-1, keepdim=True)
        y = x / (x.pow(2).mean(-1, keepdim=True) + m.eps).sqrt() * m.weight
        return y + m.bias if m.bias is not None else y
    assert isinstance(m, RMSNorm)
    y = x / (x.pow(2).mean(-1, keepdim=True) + m.eps).sqrt()
    return y if m.weight is None else y * m.weight


class _Readers:
    """The hooks of one batched graph run: each reader's own input, put in where the block reads it.

    weights (B, n_edges): 1 keeps an edge, 0 patches it to the corrupted run (None: every edge kept).
    deltas: per block, a (B, n_readers, T, d) tensor added to its readers' inputs (the gradient
    pass's leaves: dM/d(delta) is dM/d(reader's input)); and one (B, 1, T, d) for the logits."""

    def __init__(self, model: GPT, graph: Graph, corrupt: Run | None, weights: torch.Tensor | None, writers, deltas):
        self.model, self.graph, self.cfg = model, graph, model.cfg
        self.corrupt, self.weights, self.writers, self.deltas = corrupt, weights, writers, deltas
        self.att_in: torch.Tensor | None = None  # (B, nh + 2 n_kv, T, d) this block's attention readers
        self.mlp_in: torch.Tensor | None = None

    def inputs(self, v0: int, n: int, resid: torch.Tensor, key: object) -> torch.Tensor:
        """(B, n, T, d): what readers v0 .. v0 + n - 1 (fed by the same writers) read, given the
        stream `resid` (B, T, d) of this run."""
        B, T, d = resid.shape
        x = resid[:, None].expand(B, n, T, d)
        if self.weights is not None:
            p, e0 = self.graph.feeds[v0], self.graph.first[v0]
            assert self.corrupt is not None
            diff = (self.writers[:B, :p] - self.corrupt.writers[:p]).flatten(2)  # (B, p, T * d)
            off = (1 - self.weights[:B, e0 : e0 + n * p]).view(B, n, p).to(diff.dtype)
            x = x - torch.bmm(off, diff).view(B, n, T, d)
        if self.deltas is not None:
            x = x + self.deltas[key]
        return x

    def hooks(self) -> list[tuple[str, HookFn]]:
        out: list[tuple[str, HookFn]] = []
        for li in range(self.cfg.n_layer):
            out += [
                (hook_name("hook_resid_pre", li), _at(self.enter, li)),
                (hook_name("attn.hook_q", li), _at(self.project_q, li)),
                (hook_name("attn.hook_k", li), _at(self.project_k, li)),
                (hook_name("attn.hook_v", li), _at(self.project_v, li)),
                (hook_name("hook_resid_mid", li), _at(self.middle, li)),
                (hook_name("ln2.hook_normalized", li), _at(self.mlp_input, li)),
            ]
            if self.weights is not None:  # the writers' outputs of this run, which the later readers mix
                out += [
                    (hook_name("attn.hook_result", li), _at(self.wrote_heads, li)),
                    (hook_name("hook_mlp_out", li), _at(self.wrote_mlp, li)),
                ]
        return out

    def block(self, li: int) -> Block:
        return cast(Block, self.model.blocks[li])

    def _first_reader(self, li: int) -> int:
        return li * (self.cfg.n_head + 2 * self.cfg.n_kv_head + 1)

    def _first_writer(self, li: int) -> int:
        return 1 + li * (self.cfg.n_head + 1)

    def enter(self, li: int, resid: torch.Tensor) -> None:
        if li == 0 and self.weights is not None:
            self.writers[: resid.size(0), 0] = resid  # the input (every row's embeddings)
        self.att_in = self.inputs(self._first_reader(li), self.cfg.n_head + 2 * self.cfg.n_kv_head, resid, li)

    def project_q(self, li: int, _q: torch.Tensor) -> torch.Tensor:
        return self.project(li, "q")

    def project_k(self, li: int, _k: torch.Tensor) -> torch.Tensor:
        return self.project(li, "k")

    def project_v(self, li: int, _v: torch.Tensor) -> torch.Tensor:
        return self.project(li, "v")

    def project(self, li: int, which: str) -> torch.Tensor:
        """q (B, T, nh, hs), or k or v (B, T, n_kv, hs): each head's projection of its own reader's
        normalised input (then, with qk_norm, its per-head RMSNorm, as the block does)."""
        cfg, attn = self.cfg, self.block(li).attn
        nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.d_head
        lo, n = {"q": (0, nh), "k": (nh, nkv), "v": (nh + nkv, nkv)}[which]
        assert self.att_in is not None
        x = _norm(self.block(li).ln1, self.att_in[:, lo : lo + n])  # (B, n, T, d)
        rows = slice(lo * hs, (lo + n) * hs)  # this projection's rows of the fused W_Q, W_K, W_V
        w = attn.c_attn.weight[rows].view(n, hs, -1)  # (n, hs, d)
        y = torch.einsum("bntd,nsd->btns", x, w)  # (B, T, n, hs)
        if attn.c_attn.bias is not None:
            y = y + attn.c_attn.bias[rows].view(n, hs)
        if cfg.qk_norm and which != "v":
            y = _norm(attn.q_norm if which == "q" else attn.k_norm, y)
        return y

    def middle(self, li: int, resid: torch.Tensor) -> None:
        self.mlp_in = self.inputs(self._first_reader(li + 1) - 1, 1, resid, ("mlp", li))

    def mlp_input(self, li: int, _normalized: torch.Tensor) -> torch.Tensor:
        assert self.mlp_in is not None
        return _norm(self.block(li).ln2, self.mlp_in[:, 0])

    def wrote_heads(self, li: int, result: torch.Tensor) -> None:
        w0 = self._first_writer(li)
        self.writers[: result.size(0), w0 : w0 + self.cfg.n_head] = result.transpose(1, 2)

    def wrote_mlp(self, li: int, out: torch.Tensor) -> None:
        self.writers[: out.size(0), self._first_writer(li) + self.cfg.n_head] = out

    def logits(self, resid: torch.Tensor) -> torch.Tensor:
        """(B, V): the last position's logits from the logits reader's own input."""
        x = self.inputs(len(self.graph.downstream) - 1, 1, resid, "logits")[:, 0, -1:]
        return self.model.unembed(_norm(self.model.ln_final, x))[:, -1]


def run_graph(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run | None,
    weights: torch.Tensor | None,
    starts: Sequence[int] | None = None,
    embed: torch.Tensor | None = None,
    deltas: dict | None = None,
) -> torch.Tensor:
    """One graph run per row of `weights` (B, n_edges): the clean prompt's forward pass with each
    reader's input mixed as the weights say -> the last position's logits (B, V).

    starts: per row, the first block whose readers it changes (sorted; the blocks before it are the
    clean run's, so the row joins the batch there); embed (B, T, d): each row's input instead of the
    clean prompt's (the gradient pass's interpolations); deltas: added to the readers' inputs."""
    B = weights.size(0) if weights is not None else (embed.size(0) if embed is not None else 1)
    writers = None
    if weights is not None:  # every row starts from the clean run's writers; each overwrites what it computes
        writers = clean.writers.expand(B, *clean.writers.shape).clone()
    readers = _Readers(model, graph, corrupt, weights, writers, deltas)
    return _forward(model, clean, readers, list(starts) if starts is not None else [0] * B, embed)


def _forward(
    model: GPT, clean: Run, readers: _Readers, starts: list[int], embed: torch.Tensor | None = None
) -> torch.Tensor:
    """The blocks with the readers' hooks, each row joining at its start (sorted) with the clean
    run's stream there -> the last position's logits (B, V)."""
    T, d = clean.resid.shape[1:]
    x: torch.Tensor | None = None
    with model.hooks(readers.hooks()):
        for li, block in enumerate([*model.blocks, None]):  # None: rows that patch only edges into the logits
            joining = starts.count(li)
            if joining:
                enter = embed if li == 0 and embed is not None else clean.resid[li].expand(joining, T, d)
                x = enter.clone() if x is None else torch.cat([x, enter])
            if x is not None and block is not None:
                x = block(x)
        assert x is not None
        return readers.logits(x)


# ---- exact scores: one edge a row ----------------------------------------------------------------


@dataclass
class _Clean:
    """What exact scores read of the clean run besides `Run`. s0: the first position at which any
    writer's corrupted output differs from its clean one (0 without a causal mask); before it every
    patched run is the clean run, so a row computes positions s0 .. T - 1 only. Per block: the stream
    after attention (T, d), each head's query after its norm and turn (T, nh, hs), key and value
    (T, n_kv, hs) and weighted sum of values (T, nh, hs); and the keys and values as a prefix cache of
    length s0 (model/patching.py's SharedPrefix reads it)."""

    s0: int
    mid: list[torch.Tensor]
    q: list[torch.Tensor]
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    z: list[torch.Tensor]
    cache: KVCache


def _clean_parts(model: GPT, clean: Run, corrupt: Run) -> _Clean:
    cfg = model.cfg
    L, T, rot = cfg.n_layer, len(clean.ids), cfg.pos == "rope"
    names = {
        "mid": "hook_resid_mid",
        "q": "attn.hook_q_rot" if rot else "attn.hook_q",
        "k": "attn.hook_k_rot" if rot else "attn.hook_k",
        "v": "attn.hook_v",
        "z": "attn.hook_z",
    }
    with model.capture([hook_name(n, i) for n in names.values() for i in range(L)]) as c:
        model(torch.tensor([list(clean.ids)], device=clean.writers.device), last_only=True)
    got = {key: [c[hook_name(n, i)][0] for i in range(L)] for key, n in names.items()}
    moved = torch.nonzero((clean.writers != corrupt.writers).any(2).any(0)).flatten()
    s0 = 0 if not cfg.causal else int(moved[0]) if len(moved) else T - 1
    cache = KVCache(replace(cfg, n_ctx=T), 1, clean.writers.device, clean.writers.dtype)
    for i in range(L):
        cache.k[i, 0], cache.v[i, 0] = got["k"][i].transpose(0, 1), got["v"][i].transpose(0, 1)
    cache.length = s0
    return _Clean(s0, got["mid"], got["q"], got["k"], got["v"], got["z"], cache)


def _own_projection(attn: CausalSelfAttention, which: str, heads: torch.Tensor, x: torch.Tensor, start: int):
    """(B, P, hs): row r's head heads[r] of W_Q (which "q"), W_K or W_V applied to its own normalised
    input x[r] (P, d) at positions start .., then the per-head q/k norm and RoPE's turn as the block
    applies them."""
    cfg = attn.cfg
    nh, nkv, hs = cfg.n_head, cfg.n_kv_head, cfg.d_head
    lo, n = {"q": (0, nh), "k": (nh, nkv), "v": (nh + nkv, nkv)}[which]
    rows = slice(lo * hs, (lo + n) * hs)  # this projection's rows of the fused W_Q, W_K, W_V
    w = attn.c_attn.weight[rows].view(n, hs, -1)[heads]  # (B, hs, d)
    y = torch.bmm(x, w.transpose(1, 2))  # (B, P, hs)
    if attn.c_attn.bias is not None:
        y = y + attn.c_attn.bias[rows].view(n, hs)[heads][:, None]
    if which == "v":
        return y
    if cfg.qk_norm:
        y = _norm(attn.q_norm if which == "q" else attn.k_norm, y)
        if cfg.qk_norm_scale:
            y = y * cfg.qk_norm_scale
    if cfg.pos == "rope":
        y = attn.rope(y[:, :, None], y[:, :, None], start)[0][:, :, 0]
    return y


def _attend(attn: CausalSelfAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Explain mode's attention of queries q (B, H, P, hs), the last P positions, over keys and values
    (B, H or 1, T, hs) -> each head's weighted sum of values (B, H, P, hs)."""
    scores = (q @ k.transpose(-2, -1)) * attn.scale  # (B, H, P, T)
    if attn.cfg.attn_softcap:
        cap = attn.cfg.attn_softcap
        scores = cap * torch.tanh(scores / cap)
    if attn.cfg.causal:
        scores = scores.masked_fill(~causal_allowed(q.size(2), k.size(2), q.device, attn.window), float("-inf"))
    return F.softmax(scores, dim=-1) @ v


def _head_change(block: Block, parts: _Clean, resid: torch.Tensor, which: str, heads, delta, P: int) -> torch.Tensor:
    """(B, P, d): how much what attention adds at the last P positions changes when row r's head
    heads[r] (which "q") or key/value head (k, v) reads resid - delta[r] instead of resid (T, d):
    its one head's new output (the heads that read the key or value, for k and v) minus the clean."""
    attn, li = block.attn, block.attn.layer
    cfg, T, s0 = attn.cfg, resid.size(0), parts.s0
    nh, rep, d = cfg.n_head, cfg.n_head // cfg.n_kv_head, cfg.d_model
    if which == "q":  # one query head changes, at the positions asked for
        x = _norm(block.ln1, resid[T - P :] - delta[:, T - P :])
        q = _own_projection(attn, "q", heads, x, T - P)[:, None]  # (B, 1, P, hs)
        g = heads // rep
        k, v = parts.k[li][:, g].transpose(0, 1)[:, None], parts.v[li][:, g].transpose(0, 1)[:, None]
        qh = heads[:, None]  # (B, 1) the query heads whose output changes
    else:  # a key or value head changes from s0 on, and every query head that reads it
        x = _norm(block.ln1, resid[s0:] - delta[:, s0:])
        kv = [parts.k[li][:, heads].transpose(0, 1).clone(), parts.v[li][:, heads].transpose(0, 1).clone()]
        kv[which == "v"][:, s0:] = _own_projection(attn, which, heads, x, s0)
        k, v = kv[0][:, None], kv[1][:, None]  # (B, 1, T, hs)
        qh = heads[:, None] * rep + torch.arange(rep, device=heads.device)  # (B, rep)
        q = parts.q[li][T - P :][:, qh].permute(1, 2, 0, 3)  # (B, rep, P, hs)
    z = _attend(attn, q, k, v) - parts.z[li][T - P :][:, qh].permute(1, 2, 0, 3)  # (B, H, P, hs)
    w_o = attn.c_proj.weight.view(d, nh, -1)[:, qh]  # (d, B, H, hs)
    return torch.einsum("bhps,dbhs->bpd", z, w_o)


def _reader_block(block: Block, parts: _Clean, resid: torch.Tensor, kind, head, delta, P: int) -> torch.Tensor:
    """(B, P, d): the stream leaving the block at its last P positions, for rows whose readers are in
    it (kind: indices into KINDS, head: per row), each reading resid (T, d) - delta[r] (B, T, d)."""
    T = resid.size(0)
    mid = parts.mid[block.attn.layer][T - P :].expand(len(kind), -1, -1).clone()  # (B, P, d)
    for name in ("q", "k", "v"):
        rows = torch.nonzero(kind == KINDS.index(name)).flatten()
        if len(rows):
            mid[rows] += _head_change(block, parts, resid, name, head[rows], delta[rows], P)
    inp = block.ln2(mid)
    rows = torch.nonzero(kind == KINDS.index("mlp")).flatten()
    if len(rows):  # the MLP reads its own input (attention's output is the clean one)
        inp[rows] = _norm(block.ln2, mid[rows] - delta[rows, T - P :])
    return mid + block.mlp(inp)


def _last_block(block: Block, parts: _Clean, x: torch.Tensor) -> torch.Tensor:
    """The last block on rows x (B, T - s0, d): keys and values at every position, the rest at the
    last position only (the metric reads nothing else) -> (B, 1, d)."""
    attn = block.attn
    q, k, v = attn.qkv(block.ln1(x), SharedPrefix(parts.cache, attn.layer) if parts.s0 else None)
    mid = x[:, -1:] + attn.explained(q[:, :, -1:], k, v)
    return mid + block.mlp(block.ln2(mid))


def _one_edge_rows(model: GPT, graph: Graph, clean: Run, corrupt: Run, parts: _Clean, edges) -> torch.Tensor:
    """The last position's final norm (B, d) of the clean run with one edge patched a row (every reader
    in one block, or the logits): from the reader's block on, positions s0 .. T - 1."""
    L, T, s0 = model.cfg.n_layer, len(clean.ids), parts.s0
    up, down = graph.ends()
    delta = clean.writers[up[edges]] - corrupt.writers[up[edges]]  # (B, T, d): what each row takes away
    node = [graph.downstream[int(v)] for v in down[edges]]
    li = node[0].layer
    if li == L:  # the final norm reads its own input
        x = clean.resid[L][-1:] - delta[:, -1:]
    else:
        blocks = [cast(Block, b) for b in model.blocks]
        kind = torch.tensor([KINDS.index(n.kind) for n in node])
        head = torch.tensor([n.head or 0 for n in node], device=delta.device)
        x = _reader_block(blocks[li], parts, clean.resid[li], kind, head, delta, T - s0 if li < L - 1 else 1)
        for j in range(li + 1, L - 1):
            x = blocks[j](x, SharedPrefix(parts.cache, j) if s0 else None)
        if li < L - 1:
            x = _last_block(blocks[L - 1], parts, x)
    return _norm(model.ln_final, x[:, -1])


class _Unembed:
    """The logits (B, V) of final norms h (B, d): every column, or (columns given) only those, the
    others left 0 in a buffer kept from batch to batch."""

    def __init__(self, model: GPT, columns: Sequence[int] | None) -> None:
        self.model, self.columns, self.buffer = model, columns, torch.empty(0)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if self.columns is None:
            return self.model.unembed(h)
        cols = torch.tensor(list(self.columns), device=h.device)
        if self.buffer.size(0) < h.size(0):
            self.buffer = h.new_zeros(h.size(0), self.model.cfg.vocab_size)
        z = h @ self.model.lm_head.weight[cols].T  # (B, len(columns))
        cap = self.model.cfg.softcap
        self.buffer[: h.size(0), cols] = cap * torch.tanh(z / cap) if cap else z
        return self.buffer[: h.size(0)]


EXACT_ROWS = 64  # rows of one batch of exact scores, at most (each keeps its own logits and writer's change)


def exact_chunk(T: int, positions: int) -> int:
    """Rows per batch of exact scores of T-token prompts whose rows run `positions` positions:
    TOKENS_PER_CHUNK positions, and keys and values of 4 x TOKENS_PER_CHUNK, at most EXACT_ROWS rows."""
    return max(1, min(EXACT_ROWS, TOKENS_PER_CHUNK // max(1, positions), 4 * TOKENS_PER_CHUNK // T))


LAST_KEYS = 0.25  # of the last block a row computes before its last position W_Q, W_K, W_V: GPT-2's quarter


def first_changed(cfg: GPTConfig, clean_ids: Sequence[int], corrupted_ids: Sequence[int]) -> int:
    """The first position whose token differs (T - 1 if none; 0 without a causal mask): before it every
    writer's corrupted output is its clean one."""
    if not cfg.causal:
        return 0
    return next((i for i, (a, b) in enumerate(zip(clean_ids, corrupted_ids)) if a != b), len(clean_ids) - 1)


def exact_share(cfg: GPTConfig, T: int, s0: int, layers: torch.Tensor) -> torch.Tensor:
    """Per exact row whose reader is in block `layers` (n_layer: the logits), its work as a share of a
    plain forward pass's block-positions (n_layer x T), an upper bound: T - s0 positions of its reader's
    block and of each one after but the last, of the last block its keys and values there (LAST_KEYS of
    its weights), and one position more (the last block's last, or the unembedding's)."""
    L, S = cfg.n_layer, T - s0
    before_last = (L - 1 - layers).clamp(min=0).double()
    return (before_last * S + (before_last > 0).double() * LAST_KEYS * S + 1) / (L * T)


def row_chunks(cfg: GPTConfig, T: int, n_rows: int, writers: bool = True) -> int:
    """Rows per batched pass of a graph run: so that its copy of the writers' outputs stays within
    ROW_BYTES (a run that mixes edges), or of TOKENS_PER_CHUNK positions (one edge per row)."""
    if not writers:
        return max(1, min(n_rows, TOKENS_PER_CHUNK // T))
    per_row = (1 + cfg.n_layer * (cfg.n_head + 1)) * T * cfg.d_model * 4
    return max(1, min(n_rows, ROW_BYTES // per_row))


PASS_MAPS = 4  # (rows, heads, T, T) tensors of one block at once: q k^T, scaled, masked, the pattern
HEAP = 1.5  # resident bytes per live byte of batched passes: the C heap keeps freed blocks for reuse (measured)


def _width(cfg: GPTConfig) -> int:
    """The widest activation of a block per position: the MLP's, the fused q, k, v, or each head's result."""
    qkv = (cfg.n_head + 2 * cfg.n_kv_head) * cfg.d_head
    return max(cfg.d_mlp * max(1, cfg.top_k_experts), 3 * cfg.d_model, qkv, cfg.n_head * cfg.d_model)


def graph_run_bytes(cfg: GPTConfig, T: int, n_edges: int, n_rows: int, element: int = 4) -> int:
    """The peak working memory of `run_weights` over n_rows graph runs that mix edges (the curve, the
    circuit's bisection), an upper bound: a batch's copy of the writers' outputs and their difference
    from the corrupted run's (rows x n_up x T x d each), the rows' edge weights, a block's readers'
    inputs and their norms (rows x readers x T x d), one block's scores and pattern, its widest
    activations, and the logits; times HEAP."""
    B = row_chunks(cfg, T, n_rows)
    n_up = 1 + cfg.n_layer * (cfg.n_head + 1)
    readers = cfg.n_head + 2 * cfg.n_kv_head + 1
    per_row = (
        2 * n_up * T * cfg.d_model
        + 4 * readers * T * cfg.d_model
        + PASS_MAPS * cfg.n_head * T * T
        + 8 * T * _width(cfg)
        + 3 * n_edges
        + 3 * cfg.vocab_size
    )
    return int(HEAP * B * per_row * element)


def exact_bytes(cfg: GPTConfig, T: int, element: int = 4) -> int:
    """The peak working memory of exact edge scores (`exact`), an upper bound whatever position the
    prompts first differ at: the clean run's parts it reads (`_Clean`: per block the stream after
    attention, each head's query and weighted sum of values, the keys and values twice, L x T x ...),
    the writers' changed-or-not mask (n_up x T x d, counted as numbers), and the larger of the parts'
    own forward pass and a batch: B rows of up to `tokens` positions in all (B x (T - s0), exact_chunk),
    each row's writer's change (T x d), a block's keys and values joined to the prefix's (the shared
    heads repeated), its scores and pattern, its widest activations and the stream's copies, and the
    logits with the metric's copy; times HEAP."""
    L, d, nh, hs = cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_head
    n_up = 1 + L * (nh + 1)
    B = exact_chunk(T, 1)
    tokens = min(max(TOKENS_PER_CHUNK, T), B * T)
    parts = L * T * (d + 2 * nh * hs + 4 * cfg.n_kv_head * hs)
    capture = T * (4 * d + PASS_MAPS * nh * T + 8 * _width(cfg)) + 3 * cfg.vocab_size
    batch = B * (T * d + 4 * T * nh * hs + 3 * cfg.vocab_size) + tokens * (PASS_MAPS * nh * T + 8 * _width(cfg) + 4 * d)
    return int(HEAP * (parts + n_up * T * d + max(capture, batch)) * element)


def run_rows(
    model: GPT,
    clean: Run,
    n_rows: int,
    readers_of: Callable[[torch.Tensor], _Readers],
    reduce: Callable[[torch.Tensor], torch.Tensor],
    starts: Sequence[int] | None = None,
    chunk: int | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    lock: Callable[[], AbstractContextManager] | None = None,
) -> torch.Tensor:
    """reduce(logits) of `n_rows` graph runs, in batches of `chunk` rows (rows sorted by `starts` join
    at their first block), the hooks of each batch `readers_of(rows)` (made batch by batch: all rows'
    weights at once could be n_rows x n_edges) -> (n_rows,) in row order. on_chunk(done, total) after
    each batch, cancel() before each (True: Cancelled), lock() held during each."""
    starts_t = torch.tensor(list(starts) if starts is not None else [0] * n_rows, dtype=torch.long)
    order = torch.argsort(starts_t, stable=True)
    out = torch.empty(n_rows, dtype=torch.float64)
    step = chunk or row_chunks(model.cfg, len(clean.ids), n_rows)
    for lo in range(0, n_rows, step):
        if cancel is not None and cancel():
            raise Cancelled()
        rows = order[lo : lo + step]
        with lock() if lock is not None else nullcontext():
            logits = _forward(model, clean, readers_of(rows), starts_t[rows].tolist())
            out[rows] = reduce(logits).double()
        if on_chunk is not None:
            on_chunk(min(n_rows, lo + step), n_rows)
    return out


def run_weights(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    n_rows: int,
    weights_of: Callable[[torch.Tensor], torch.Tensor],
    reduce: Callable[[torch.Tensor], torch.Tensor],
    **kw,
) -> torch.Tensor:
    """run_rows of graph runs whose rows' edge weights (n_edges,) are weights_of(rows)."""

    def readers(rows: torch.Tensor) -> _Readers:
        writers = clean.writers.expand(len(rows), *clean.writers.shape).clone()
        return _Readers(model, graph, corrupt, weights_of(rows), writers, None)

    return run_rows(model, clean, n_rows, readers, reduce, **kw)


# ---- scores --------------------------------------------------------------------------------------


def _batches(layer: torch.Tensor, step: int) -> list[torch.Tensor]:
    """The rows, by reader block (layer (n,)), in batches of at most `step` rows of one block each."""
    order = torch.argsort(layer, stable=True)
    ends = torch.cumsum(torch.bincount(layer[order]), 0).tolist()
    out, lo = [], 0
    for end in ends:
        out += [order[i : min(i + step, end)] for i in range(lo, end, step)]
        lo = end
    return out


def exact(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    edges: Sequence[int],
    reduce: Callable[[torch.Tensor], torch.Tensor],
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    lock: Callable[[], AbstractContextManager] | None = None,
    columns: Sequence[int] | None = None,
) -> torch.Tensor:
    """(len(edges),) M(clean run with that one edge patched) - M(clean run): each edge's exact score,
    one graph run each, batched by reader block (`exact_chunk` rows): a row starts at its reader's
    block, computes of it only what the edge changes (the reader's head, or the MLP's input, and what
    follows) and only the positions from the first one the corrupted prompt changes, and of the last
    block only the keys and values before the last position. Explain mode's arithmetic, as the model's
    own forward pass with that reader's input replaced; on_chunk(done, total) after each batch, cancel()
    before each (True: Cancelled), lock() held during each and while the clean run's parts are taken.
    columns: the only logits `reduce` reads (a logit difference's two tokens), the only ones computed;
    None: every one (a log-probability's softmax reads them all)."""
    which = torch.tensor(list(edges), dtype=torch.long)
    layer = graph.reader_layer()[which]
    out = torch.empty(len(which), dtype=torch.float64)
    held = lock if lock is not None else nullcontext
    with torch.no_grad():
        with held():
            parts = _clean_parts(model, clean, corrupt)
        step = exact_chunk(len(clean.ids), len(clean.ids) - parts.s0)
        unembed = _Unembed(model, columns)
        done = 0
        for rows in _batches(layer, step):
            if cancel is not None and cancel():
                raise Cancelled()
            with held(), model.hooks([]):  # explain mode's arithmetic, no hook
                out[rows] = reduce(unembed(_one_edge_rows(model, graph, clean, corrupt, parts, which[rows]))).double()
            done += len(rows)
            if on_chunk is not None:
                on_chunk(done, len(which))
    return out - float(reduce(clean.logits[None])[0])


def _leaves(cfg: GPTConfig, B: int, T: int, like: torch.Tensor) -> dict:
    """The gradient pass's zero deltas, one (B, n, T, d) per group of readers that share their writers
    (in `like`'s dtype and device)."""

    def zeros(n: int) -> torch.Tensor:
        return torch.zeros(B, n, T, cfg.d_model, dtype=like.dtype, device=like.device, requires_grad=True)

    deltas: dict = {li: zeros(cfg.n_head + 2 * cfg.n_kv_head) for li in range(cfg.n_layer)}
    deltas.update({("mlp", li): zeros(1) for li in range(cfg.n_layer)})
    deltas["logits"] = zeros(1)
    return deltas


def reader_gradients(
    model: GPT, graph: Graph, clean: Run, corrupt: Run, reduce: Callable[[torch.Tensor], torch.Tensor], steps: int
) -> torch.Tensor:
    """(n_readers, T, d): dM/d(reader's input), averaged over `steps` runs whose token embeddings
    go from the corrupted prompt's (0) to the clean one's (1) at the midpoints (k + 1/2) / steps;
    steps=0: at the clean run alone (AtP)."""
    cfg, device = model.cfg, model.wte.weight.device
    T = len(clean.ids)
    with torch.inference_mode(False), torch.enable_grad():
        ids = torch.tensor([clean.ids, corrupt.ids], device=device)
        tok = model.wte(ids).detach() * cfg.embed_scale  # (2, T, d) as the stream takes them in (Gemma: scaled)
        pos = model.wpe(torch.arange(T, device=device))[None].detach() if model.wpe is not None else 0.0
        alphas = torch.tensor([1.0]) if steps == 0 else (torch.arange(steps) + 0.5) / steps
        a = alphas.to(device, tok.dtype)[:, None, None]
        embed = tok[1] + a * (tok[0] - tok[1]) + pos  # (B, T, d)
        deltas = _leaves(cfg, len(alphas), T, tok)
        logits = run_graph(model, graph, clean, None, None, embed=embed, deltas=deltas)
        reduce(logits).sum().backward()
        per_block = [
            g
            for li in range(cfg.n_layer)
            for g in (deltas[li].grad.mean(0), deltas[("mlp", li)].grad.mean(0))  # type: ignore[union-attr]
        ]
        per_block.append(deltas["logits"].grad.mean(0))  # type: ignore[union-attr]
    return torch.cat(per_block).detach()  # (n_readers, T, d), in the graph's reader order


def attribution(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    reduce: Callable[[torch.Tensor], torch.Tensor],
    steps: int = 0,
) -> torch.Tensor:
    """(n_edges,) every edge's estimated score: (u's corrupted output - u's clean output) . g_v, g_v
    the reader's gradient (AtP with steps=0; EAP-IG with steps >= 1)."""
    g = reader_gradients(model, graph, clean, corrupt, reduce, steps)  # (n_readers, T, d)
    diff = corrupt.writers - clean.writers  # (n_up, T, d)
    scores = torch.einsum("vtd,utd->vu", g.double(), diff.double())  # (n_readers, n_up)
    up, down = graph.ends()
    return scores[down, up]  # float64


# ---- circuits ------------------------------------------------------------------------------------


def curve_sizes(n_edges: int, points: int = 24) -> list[int]:
    """Circuit sizes for a faithfulness curve: 0, then about evenly spaced in log scale up to n_edges."""
    sizes = {0, n_edges}
    for i in range(points):
        sizes.add(max(1, round(math.exp(math.log(n_edges) * i / (points - 1)))))
    return sorted(s for s in sizes if s <= n_edges)


def faithfulness(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    order: torch.Tensor,
    reduce: Callable[[torch.Tensor], torch.Tensor],
    sizes: Sequence[int],
    **kw,
) -> torch.Tensor:
    """(len(sizes),) the metric of the circuit made of the first `size` edges of `order` (every other
    edge patched to the corrupted run)."""
    rank = torch.empty(graph.n_edges, dtype=torch.long)
    rank[order] = torch.arange(graph.n_edges)
    kept = torch.tensor(list(sizes), dtype=torch.long)

    def circuits(rows: torch.Tensor) -> torch.Tensor:  # row i keeps the first kept[i] edges of `order`
        return (rank[None, :] < kept[rows][:, None]).float()

    return run_weights(model, graph, clean, corrupt, len(kept), circuits, reduce, **kw)


def smallest_circuit(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    order: torch.Tensor,
    reduce: Callable[[torch.Tensor], torch.Tensor],
    sizes: Sequence[int],
    values: torch.Tensor,
    target: float,
    **kw,
) -> tuple[int, float]:
    """(size, metric) of the smallest circuit along `order` whose recovered share
    (M - M_corrupt) / (M_clean - M_corrupt) reaches `target`: the first point of the curve (sizes,
    values) that does, narrowed by bisection between it and the point before."""
    m_clean, m_corr = (float(reduce(r.logits[None])[0]) for r in (clean, corrupt))

    def share(m: float) -> float:
        return (m - m_corr) / (m_clean - m_corr)

    hit = next((i for i, v in enumerate(values.tolist()) if share(v) >= target), len(sizes) - 1)
    hi, m_hi = sizes[hit], float(values[hit])
    lo = sizes[hit - 1] if hit else hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        m = float(faithfulness(model, graph, clean, corrupt, order, reduce, [mid], **kw)[0])
        if share(m) >= target:
            hi, m_hi = mid, m
        else:
            lo = mid
    return hi, m_hi


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else float("nan")


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson's r of the ranks (ties broken by order)."""
    return pearson(torch.argsort(torch.argsort(a)).double(), torch.argsort(torch.argsort(b)).double())
