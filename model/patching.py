"""Activation patching (causal tracing): which layer, position and head carry the answer.

Two prompts with the same number of tokens, `clean` (the model gets the answer) and `corrupted` (a
few tokens changed, so it does not), are each run once and their activations kept (`record`). A
patched run is the *base* prompt's forward pass with one activation (a site) replaced by the
*source* prompt's: denoising runs the corrupted prompt with a clean activation put in (how much of
the answer does that one activation bring back?), noising the reverse. A metric of the last
position's logits (the logit difference of two answer tokens, or one token's log-probability)
measured on the patched run, against the clean and corrupted runs, says how much that site carries.

The sites (`Site`):

    resid_pre  layer l, position p   the residual stream entering block l at position p; l = n_layer
                                     is the stream after the last block (what the final norm reads)
    attn_out   layer l, position p   what block l's attention adds at position p
    mlp_out    layer l, position p   what block l's MLP (or mixture of experts) adds at position p
    z          layer l, head h       head h's output (its weighted sum of values, before W_O) at
                                     every position, or at one position p

Exact by construction: a patched run is the base run's own forward pass from the first block the
patch touches, with the patch put in through the model's hook points (`GPT.hooks`), so patching
nothing gives the base run, and patching every position of resid_pre at layer 0 gives the source
run. Fast: the blocks before that first block are the base run's (their output is the recorded
resid_pre), many patched runs go through the model at once (one batch row each, every row
patched at its own site), and only the last position is unembedded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F

from .errors import Cancelled
from .gpt import GPT, GPTConfig, HookFn, KVCache, LayerKV, hook_name

SiteKind = Literal["resid_pre", "attn_out", "mlp_out", "z"]
HOOKS: dict[str, str] = {
    "resid_pre": "hook_resid_pre",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "z": "attn.hook_z",
}
TOKENS_PER_CHUNK = 2048  # batch rows x positions of one batched pass (GPT-2 small: ~140 MB of activations)


@dataclass(frozen=True)
class Site:
    """One activation to patch: `kind` at `layer`, at one `position` (None: every position), of one
    `head` (z only)."""

    kind: SiteKind
    layer: int
    position: int | None = None
    head: int | None = None

    def hook(self, n_layer: int) -> str:
        """The hook point that holds it; resid_pre at layer n_layer is the last block's output."""
        if self.kind == "resid_pre" and self.layer == n_layer:
            return hook_name("hook_resid_post", n_layer - 1)
        return hook_name(HOOKS[self.kind], self.layer)

    def start(self, n_layer: int) -> int:
        """The first block a patched run has to compute (the blocks before it are the base run's)."""
        return min(self.layer, n_layer - 1)


@dataclass
class Recorded:
    """One prompt's forward pass: its last position's logits (V,) and every activation a site reads,
    by hook name, without the batch dimension ((T, d), or (T, nh, hs) for z)."""

    ids: tuple[int, ...]
    logits: torch.Tensor
    acts: dict[str, torch.Tensor]

    @property
    def nbytes(self) -> int:
        """The memory it holds: every storage its tensors view, once (k and v are views of the fused
        q, k, v projection, so it holds q's numbers too)."""
        storages = {}
        for t in (self.logits, *self.acts.values()):
            s = t.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
        return sum(storages.values())


def hook_names(n_layer: int) -> list[str]:
    """Every hook point a site can name, in the model's order."""
    kinds = ("hook_resid_pre", "attn.hook_k", "attn.hook_v", "attn.hook_z", "hook_attn_out", "hook_mlp_out")
    return [*(hook_name(k, i) for i in range(n_layer) for k in kinds), hook_name("hook_resid_post", n_layer - 1)]


def check_config(cfg: GPTConfig) -> None:
    """Raise ValueError for a block whose patched runs this module cannot restart from a block's stream."""
    if cfg.nanochat_stream:  # (a softcap on the logits alone is patched through: `unembed`)
        raise ValueError(
            f"patching restarts a run from a block's stream, and nanochat's block ({', '.join(cfg.extras)}) also "
            "reads x0, the tokens and the middle block's stream there; gptscope does not patch it yet"
        )


def record(model: GPT, ids: Sequence[int]) -> Recorded:
    """Run one prompt (ids, on the model's device) and keep what patching reads. Only the last
    position is unembedded, as in a patched run (T x V logits would be kept by a view of their row)."""
    names = hook_names(model.cfg.n_layer)
    if model.cfg.pos == "rope":
        names += [hook_name("attn.hook_k_rot", i) for i in range(model.cfg.n_layer)]
    idx = torch.tensor([list(ids)], device=model.wte.weight.device)
    with model.capture(names) as cache:
        logits, _ = model(idx, last_only=True)
    return Recorded(tuple(ids), logits[0, -1], {n: cache[n][0] for n in names})


def record_bytes(model: GPT, T: int) -> int:
    """Recorded.nbytes of a T-token prompt, before running it: per block the stream entering it,
    what attention and the MLP add (T x d each), the heads' outputs z (T x nh x hs), the fused q, k, v
    projection that k and v are views of (T x (nh + 2 n_kv) x hs), a k of its own after qk_norm and
    after RoPE's turn (T x n_kv x hs each); the final stream (T x d) and the last position's logits (V)."""
    c = model.cfg
    hs, kv = c.d_head, c.n_kv_head * c.d_head
    block = 3 * c.d_model + c.n_head * hs + (c.n_head * hs + 2 * kv) + kv * (c.qk_norm + (c.pos == "rope"))
    return (T * (c.n_layer * block + c.d_model) + c.vocab_size) * model.wte.weight.element_size()


def _first_position(sites: Sequence[Site], T: int) -> int:
    """The first position a run's patches touch (every position before it is the base run's);
    a run that patches nothing computes the last position only."""
    return min((0 if s.position is None else s.position for s in sites), default=T - 1)


def _first_block(sites: Sequence[Site], n_layer: int) -> int:
    return min((s.start(n_layer) for s in sites), default=n_layer - 1)


def _where(model: GPT, sites: Sequence[Site], T: int) -> tuple[int, int]:
    """(first position, first block) a run computes; without a causal mask an earlier position
    reads the patched one too, so every run starts at position 0."""
    return (_first_position(sites, T) if model.cfg.causal else 0, _first_block(sites, model.cfg.n_layer))


def cost(model: GPT, T: int, runs: Sequence[Sequence[Site]]) -> int:
    """The work of `patched` for these runs, in block-positions: each run's blocks times the positions
    it computes in them (multiply by a block's parameters for multiply-adds)."""
    L = model.cfg.n_layer
    return sum((L - block) * (T - pos) for pos, block in (_where(model, r, T) for r in runs))


PASS_MAPS = 4  # (rows, heads, positions, T) tensors of one block at once: q k^T, scaled, masked, the pattern
FRAGMENTED = 2  # batch_bytes' factor for batches of many shapes (see there)


def batch_bytes(model: GPT, T: int, runs: Sequence[Sequence[Site]]) -> int:
    """The peak working memory of `patched` for these runs, before running them (an upper bound): the
    base run's keys and values as a prefix cache; of its largest batched pass (B rows, each of the
    positions from its first one on: at most TOKENS_PER_CHUNK, or one row of T), the rows' keys and
    values joined to the prefix's in a block (B x T each), one block's scores and pattern (rows x
    positions x T per head), its widest activations with the patch hooks' copies, and the last
    position's logits of every row with the metric's float32 log-softmax; and a few Python objects a run."""
    c, size = model.cfg, model.wte.weight.element_size()
    per_position: dict[int, int] = {}
    for r in runs:
        p0 = _where(model, r, T)[0]
        per_position[p0] = per_position.get(p0, 0) + 1
    batches = [(min(n, max(1, TOKENS_PER_CHUNK // (T - p0))), T - p0) for p0, n in per_position.items()]
    B = max((b for b, _ in batches), default=0)
    tokens = max((b * t for b, t in batches), default=0)
    kv = c.n_kv_head * c.d_head
    width = max(c.d_mlp * max(1, c.top_k_experts), 3 * c.d_model, (c.n_head + 2 * c.n_kv_head) * c.d_head)
    prefix = 2 * c.n_layer * T * kv
    joined = 4 * B * T * kv
    maps = PASS_MAPS * c.n_head * tokens * T
    acts = 8 * tokens * width
    logits = 3 * B * c.vocab_size * 4  # (float32: the metric's copy)
    work = (prefix + joined + maps + acts) * size + logits
    # batches of many shapes (each first position's own) fragment the C heap: glibc keeps freed blocks
    # under its mmap threshold (which grows to 32 MiB) for reuse, and the resident memory measured up
    # to about twice the live bytes (a 600-token resid_pre and mlp_out sweep: 167 MiB, 62 MiB with a fixed
    # threshold)
    return work * (FRAGMENTED if len(batches) > 1 else 1) + 512 * len(runs)


class SharedPrefix(LayerKV):
    """The keys and values of positions 0..length-1, one copy (batch 1) shared by every batch row:
    the base run's, which a patch at a later position cannot change."""

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, B = self.cache.length, k.size(0)
        pk = self.cache.k[self.layer, :, :, :n].expand(B, -1, -1, -1)
        pv = self.cache.v[self.layer, :, :, :n].expand(B, -1, -1, -1)
        return torch.cat([pk, k], 2), torch.cat([pv, v], 2)


def _prefix_cache(model: GPT, base: Recorded) -> KVCache:
    """A KV cache of the base run's keys and values (after RoPE's turn), for SharedPrefix."""
    cfg = model.cfg
    T = len(base.ids)
    cache = KVCache(replace(cfg, n_ctx=T), 1, base.logits.device, base.acts[hook_names(cfg.n_layer)[0]].dtype)
    for i in range(cfg.n_layer):
        k_name = hook_name("attn.hook_k_rot" if cfg.pos == "rope" else "attn.hook_k", i)
        cache.k[i, 0] = base.acts[k_name].transpose(0, 1)  # (T, n_kv, hs) -> (n_kv, T, hs)
        cache.v[i, 0] = base.acts[hook_name("attn.hook_v", i)].transpose(0, 1)
    return cache


def _run_rows(
    model: GPT, base: Recorded, prefix: KVCache, p0: int, starts: list[int], hooks: list[tuple[str, HookFn]]
) -> torch.Tensor:
    """Batch rows (sorted by the block each starts at) through the model from position p0: a row
    joins at its first block with the base run's stream there, and every block reads the base
    run's keys and values of positions < p0. -> the last position's logits (B, V)."""
    x: torch.Tensor | None = None
    prefix.length = p0
    with model.hooks(hooks):
        for li, block in enumerate(model.blocks):
            joining = starts.count(li)
            if joining:
                enter = base.acts[hook_name("hook_resid_pre", li)][p0:]
                new = enter.expand(joining, *enter.shape)
                x = new.clone() if x is None else torch.cat([x, new])
            if x is not None:
                x = block(x, SharedPrefix(prefix, li) if p0 else None)
        assert x is not None
        return model.hook_logits(model.unembed(model.ln_final(x[:, -1:])))[:, -1]


def _patcher(entries: list[tuple[int, Site]], source: torch.Tensor, p0: int) -> HookFn:
    """A hook that puts `source` (T, ...) into batch row r at each (r, site) of `entries`, on a
    tensor that holds positions p0.. only."""
    groups: dict[tuple[bool, bool], list[tuple[int, int, int]]] = {}
    for row, s in entries:
        key = (s.position is None, s.head is None)
        groups.setdefault(key, []).append((row, s.position or 0, s.head or 0))
    index = {k: torch.tensor(v, device=source.device).T for k, v in groups.items()}
    source = source[p0:]

    def fn(t: torch.Tensor, _name: str) -> torch.Tensor:
        t = t.clone()
        for (every_pos, no_head), (rows, pos, heads) in index.items():
            if every_pos and no_head:
                t[rows] = source
            elif no_head:
                t[rows, pos - p0] = source[pos - p0]
            elif every_pos:  # one head at every position: index (B, nh, T, hs) by row and head
                t.transpose(1, 2)[rows, heads] = source.transpose(0, 1)[heads]
            else:
                t[rows, pos - p0, heads] = source[pos - p0, heads]
        return t

    return fn


def patched(
    model: GPT,
    base: Recorded,
    source: Recorded,
    runs: Sequence[Sequence[Site]],
    reduce: Callable[[torch.Tensor], torch.Tensor],
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    lock: Callable[[], AbstractContextManager] | None = None,
) -> torch.Tensor:
    """One patched forward pass of `base` per entry of `runs` (the sites patched together in that
    run, all from `source`), batched. reduce(logits (B, V)) -> (B, ...) is kept per run, in order.

    Runs that first touch the same position go through the model together, each joining the batch
    at the first block it patches. on_chunk(done, total) after each batched pass (runs done so
    far); cancel() is asked before each one (True stops with `Cancelled`); lock() (a context
    manager) is held during each pass, so other users of the model can run between them."""
    L, T = model.cfg.n_layer, len(base.ids)
    prefix = _prefix_cache(model, base)
    key = [_where(model, r, T) for r in runs]
    order = sorted(range(len(runs)), key=lambda i: key[i])
    out: list[torch.Tensor | None] = [None] * len(runs)
    done = 0
    while done < len(order):
        p0 = key[order[done]][0]
        chunk = [i for i in order[done : done + max(1, TOKENS_PER_CHUNK // (T - p0))] if key[i][0] == p0]
        if cancel is not None and cancel():
            raise Cancelled()
        by_hook: dict[str, list[tuple[int, Site]]] = {}
        for row, i in enumerate(chunk):
            for s in runs[i]:
                by_hook.setdefault(s.hook(L), []).append((row, s))
        hooks = [(name, _patcher(entries, source.acts[name], p0)) for name, entries in by_hook.items()]
        with lock() if lock is not None else nullcontext():
            values = reduce(_run_rows(model, base, prefix, p0, [key[i][1] for i in chunk], hooks))
        for row, i in enumerate(chunk):
            out[i] = values[row]
        done += len(chunk)
        if on_chunk is not None:
            on_chunk(done, len(runs))
    return torch.stack([v for v in out if v is not None]) if runs else torch.empty(0)


# ---- metrics -----------------------------------------------------------------------------------


def logit_diff(answer: int, wrong: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """logits (B, V) -> logit[answer] - logit[wrong] (B,): how much the model prefers answer to wrong."""
    return lambda logits: logits[:, answer].float() - logits[:, wrong].float()


def logprob(answer: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """logits (B, V) -> log p(answer) (B,), nats."""
    return lambda logits: F.log_softmax(logits.float(), dim=-1)[:, answer]


# ---- sweeps ------------------------------------------------------------------------------------

SweepKind = Literal["resid_pre", "attn_out", "mlp_out", "head", "head_position"]


def sweep(
    kind: SweepKind, n_layer: int, n_head: int, T: int, heads: Sequence[tuple[int, int]] = ()
) -> list[list[Site]]:
    """The cells of one sweep, row by row, one site each:
    resid_pre: (n_layer + 1) x T (layer x position; the last row the final residual);
    attn_out, mlp_out: n_layer x T; head: n_layer x n_head (each head at every position);
    head_position: len(heads) x T (each (layer, head) of `heads` at each position)."""
    if kind == "resid_pre":
        return [[Site("resid_pre", li, p) for p in range(T)] for li in range(n_layer + 1)]
    if kind in ("attn_out", "mlp_out"):
        return [[Site(kind, li, p) for p in range(T)] for li in range(n_layer)]
    if kind == "head":
        return [[Site("z", li, None, h) for h in range(n_head)] for li in range(n_layer)]
    return [[Site("z", li, p, h) for p in range(T)] for li, h in heads]
