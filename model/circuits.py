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
from dataclasses import dataclass
from typing import Literal, cast

import torch

from .gpt import GPT, Block, GPTConfig, HookFn, LayerNorm, RMSNorm, hook_name
from .patching import TOKENS_PER_CHUNK, Cancelled

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
    model: GPT, clean: Run, readers: _Readers | _OneEdge, starts: list[int], embed: torch.Tensor | None = None
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


class _OneEdge:
    """The hooks of exact edge scores, one edge per row: row r's reader v_r reads the stream minus
    (u_r's clean output - its corrupted output), every other reader the stream as it is. The row is
    the clean run up to v_r's block (it joins the batch there), so u_r's output in it is the clean
    one, and only v_r's own input is computed apart: the block's own q, k, v, MLP input and final
    norm are kept for every other row and head."""

    def __init__(self, model: GPT, graph: Graph, clean: Run, corrupt: Run, edges: torch.Tensor) -> None:
        self.model, self.cfg = model, model.cfg
        up, down = graph.ends()
        self.delta = (clean.writers - corrupt.writers)[up[edges]]  # (B, T, d): what each row takes away
        node = [graph.downstream[int(v)] for v in down[edges]]
        self.kind = torch.tensor([KINDS.index(n.kind) for n in node])
        self.layer = torch.tensor([n.layer for n in node])
        self.head = torch.tensor([n.head or 0 for n in node])
        self.resid: torch.Tensor | None = None  # the stream the current block's readers read

    def rows(self, n: int, layer: int, kind: str) -> torch.Tensor:
        """The rows (of the first n) whose reader is of `kind` in `layer`."""
        return torch.nonzero((self.kind[:n] == KINDS.index(kind)) & (self.layer[:n] == layer)).flatten()

    def hooks(self) -> list[tuple[str, HookFn]]:
        out: list[tuple[str, HookFn]] = []
        for li in range(self.cfg.n_layer):
            out += [
                (hook_name("hook_resid_pre", li), _at(self.keep, li)),
                (hook_name("attn.hook_q", li), _at(self.project_q, li)),
                (hook_name("attn.hook_k", li), _at(self.project_k, li)),
                (hook_name("attn.hook_v", li), _at(self.project_v, li)),
                (hook_name("hook_resid_mid", li), _at(self.keep, li)),
                (hook_name("ln2.hook_normalized", li), _at(self.mlp_input, li)),
            ]
        return out

    def keep(self, _li: int, resid: torch.Tensor) -> None:
        self.resid = resid

    def project_q(self, li: int, q: torch.Tensor) -> torch.Tensor:
        return self.project(li, "q", q)

    def project_k(self, li: int, k: torch.Tensor) -> torch.Tensor:
        return self.project(li, "k", k)

    def project_v(self, li: int, v: torch.Tensor) -> torch.Tensor:
        return self.project(li, "v", v)

    def project(self, li: int, which: str, t: torch.Tensor) -> torch.Tensor:
        """t (B, T, heads, hs) with, for each row whose reader is one of these heads, that head's
        projection of its own input."""
        rows = self.rows(t.size(0), li, which)
        if not len(rows):
            return t
        cfg, block = self.cfg, cast(Block, self.model.blocks[li])
        attn, hs, nh, nkv = block.attn, cfg.d_head, cfg.n_head, cfg.n_kv_head
        lo = {"q": 0, "k": nh, "v": nh + nkv}[which]
        heads = self.head[rows]
        assert self.resid is not None
        x = _norm(block.ln1, self.resid[rows] - self.delta[rows])  # (R, T, d)
        w = attn.c_attn.weight[lo * hs : (lo + t.size(2)) * hs].view(t.size(2), hs, -1)[heads]  # (R, hs, d)
        y = torch.einsum("rtd,rsd->rts", x, w)  # (R, T, hs)
        if attn.c_attn.bias is not None:
            y = y + attn.c_attn.bias[lo * hs : (lo + t.size(2)) * hs].view(t.size(2), hs)[heads][:, None]
        if cfg.qk_norm and which != "v":
            y = _norm(attn.q_norm if which == "q" else attn.k_norm, y)
        t = t.clone()
        t[rows, :, heads] = y
        return t

    def mlp_input(self, li: int, normalized: torch.Tensor) -> torch.Tensor:
        rows = self.rows(normalized.size(0), li, "mlp")
        if not len(rows):
            return normalized
        assert self.resid is not None
        normalized = normalized.clone()
        normalized[rows] = _norm(cast(Block, self.model.blocks[li]).ln2, self.resid[rows] - self.delta[rows])
        return normalized

    def logits(self, resid: torch.Tensor) -> torch.Tensor:
        """(B, V): the last position's logits; a row whose reader is the logits reads its own input."""
        x = resid[:, -1:].clone()
        rows = self.rows(resid.size(0), self.cfg.n_layer, "logits")
        if len(rows):
            x[rows] = x[rows] - self.delta[rows][:, -1:]
        return self.model.unembed(_norm(self.model.ln_final, x))[:, -1]


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
    """The peak working memory of one batched pass of exact edge scores (`exact`), an upper bound: the
    writers' clean - corrupted difference (n_up x T x d) and each row's part of it, one block's scores
    and pattern, its widest activations, a reader's own input, and the logits; times HEAP."""
    B = max(1, TOKENS_PER_CHUNK // T)
    n_up = 1 + cfg.n_layer * (cfg.n_head + 1)
    per_row = 4 * T * cfg.d_model + PASS_MAPS * cfg.n_head * T * T + 8 * T * _width(cfg) + 3 * cfg.vocab_size
    return int(HEAP * (n_up * T * cfg.d_model + B * per_row) * element)


def run_rows(
    model: GPT,
    clean: Run,
    n_rows: int,
    readers_of: Callable[[torch.Tensor], _Readers | _OneEdge],
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


def exact(
    model: GPT,
    graph: Graph,
    clean: Run,
    corrupt: Run,
    edges: Sequence[int],
    reduce: Callable[[torch.Tensor], torch.Tensor],
    **kw,
) -> torch.Tensor:
    """(len(edges),) M(clean run with that one edge patched) - M(clean run): each edge's exact score,
    one graph run each, batched (each row joins at its reader's block)."""
    which = torch.tensor(list(edges), dtype=torch.long)
    layer = graph.reader_layer()[which].tolist()
    chunk = row_chunks(model.cfg, len(clean.ids), len(which), writers=False)

    def readers(rows: torch.Tensor) -> _OneEdge:
        return _OneEdge(model, graph, clean, corrupt, which[rows])

    values = run_rows(model, clean, len(which), readers, reduce, starts=layer, chunk=chunk, **kw)
    return values - float(reduce(clean.logits[None])[0])


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
