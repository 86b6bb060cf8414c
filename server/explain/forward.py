"""The forward trace of a prompt (POST /api/v1/forward): one captured forward pass, turned into the
requested parts by the builders the registry (parts.py) names.

Memory (server/memory.py): a trace's peak grows with its tokens T (the attention maps as T^2 x heads,
every position's logits as T x V), so `prepare` checks a request and `need` estimates its peak before
anything runs: the pass itself (`pass_bytes`), the hooks its parts read (`captured_bytes`) and what
each part's builder adds (parts.py's Size), its answer's numbers counted as the Python objects and
text they become (ARRAY_JSON a number of an array as JSON, ARRAY_BINARY as MessagePack, VALUE_BYTES a
Python value). The endpoint holds that need while it builds and encodes the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gptscope.model.gpt import GPTConfig

from .. import memory
from ..errors import InputError
from ..schemas.forward import ForwardRequest, ForwardResponse, PartInfo, PartsResponse
from ..service import ModelService
from . import parts as registry
from .common import check_index, check_indices, given_ids, request_prompt
from .stages import Selection, Trace
from .tokens import token_pieces

# An explain-mode pass keeps up to PASS_MAPS (n_head, T, T) float32 tensors of one block at once (q k^T
# and its scaled copy, the masked scores, the pattern; measured: about 3) with the causal mask; a map
# under glibc's largest mmap threshold (MMAP_MAX) is carved from the C heap, whose freed blocks stay
# resident for reuse: HEAP_MAPS more (measured: about 5 maps in all at 1,446 tokens and 4 heads). Its
# other activations are a few T x max(d_mlp, 3 d) at a time. An answer's number, at the peak of its
# encoding: as JSON, the float64 copies rounding makes (16 bytes), a Python float in its list (32) and
# its text with gzip's copy (about 10), measured at about 49 bytes; as MessagePack the int64 copies and
# varint tables, measured at about 17. A Python value built one at a time (a float in a list, a small
# model's field), with its JSON text: VALUE_BYTES.
FLOAT = 4
PASS_MAPS = 4
HEAP_MAPS = 2
MMAP_MAX = 32 * 2**20
ARRAY_JSON = 64
ARRAY_BINARY = 24
VALUE_BYTES = 100
TOKEN_VALUES = 12  # a token piece of the answer: a small model of 6 fields


def maps_bytes(cfg: GPTConfig, T: int, rows: int = 1) -> int:
    """The attention maps one block of an explain-mode pass holds at once for `rows` prompts of T tokens."""
    one = rows * cfg.n_head * T * T * FLOAT
    return one * (PASS_MAPS + (HEAP_MAPS if one < MMAP_MAX else 0))


def pass_bytes(cfg: GPTConfig, T: int, every: bool) -> int:
    """The transient memory of one explain-mode forward pass of T tokens (model/gpt.py: `explained`
    makes each block's T x T scores and pattern): one block's maps and mask, its widest activations,
    and the logits (every position's when `every`, else the last's; a softcap's uncapped ones too)."""
    maps = maps_bytes(cfg, T) + 2 * T * T
    width = max(cfg.d_mlp * max(1, cfg.top_k_experts), 3 * cfg.d_model, (cfg.n_head + 2 * cfg.n_kv_head) * cfg.d_head)
    acts = 6 * T * width * FLOAT
    logits = (T if every else 1) * cfg.vocab_size * FLOAT * (2 if cfg.softcap else 1)
    return maps + acts + logits


def hook_width(cfg: GPTConfig, name: str, T: int) -> int:
    """Numbers per position of a hook's tensor, an upper bound (q, k and v are views of one fused
    projection, whose storage a capture keeps whole)."""
    hs = cfg.d_head
    qkv = (cfg.n_head + 2 * cfg.n_kv_head) * hs
    widths = {
        "hook_pattern": cfg.n_head * T,
        "hook_attn_scores": cfg.n_head * T,
        "hook_attn_scores_uncapped": cfg.n_head * T,
        "hook_result": cfg.n_head * cfg.d_model,
        "hook_q": qkv,
        "hook_k": qkv,
        "hook_v": qkv,
        "hook_q_rot": cfg.n_head * hs,
        "hook_k_rot": cfg.n_kv_head * hs,
        "hook_pre": 2 * cfg.d_mlp,
        "hook_post": 2 * cfg.d_mlp,
        "hook_router_probs": cfg.n_expert,
        "hook_router_choice": 2 * cfg.top_k_experts,
        "hook_logits_uncapped": cfg.vocab_size,
        "hook_scale": 1,
    }
    return widths.get(name.rsplit(".", 1)[-1], max(cfg.d_model, cfg.n_head * hs))


def captured_bytes(cfg: GPTConfig, names: set[str] | list[str], T: int) -> int:
    """The bytes a capture of these hooks keeps for a T-token prompt."""
    return sum(hook_width(cfg, n, T) for n in set(names)) * T * FLOAT


@dataclass
class Plan:
    """A checked trace request: its ids, the selection, the parts it builds, and the request field its
    prompt came in (text, messages or ids)."""

    ids: list[int]
    dropped: int
    chat_text: str | None
    sel: Selection
    parts: list[registry.Part]
    prompt_field: str = "text"
    every_position: bool = False  # every position's logits whatever the parts read (run_trace's `every`)

    @property
    def every(self) -> bool:
        """Whether the pass makes every position's logits (run_trace's rule)."""
        parts = any(p.every_position for p in self.parts)
        return self.every_position or parts or self.sel.position != len(self.ids) - 1


def request_ids(service: ModelService, req: ForwardRequest) -> tuple[list[int], int, str | None]:
    """The request's token ids (given, a chat's or the prompt's), how many were dropped from the front,
    and a chat's text as its template wrote it."""
    if req.ids is not None:
        return given_ids(service, req.ids), 0, None
    if req.messages is None and not req.text:
        raise InputError("text", "give a prompt (text), a chat (messages) or token ids (ids)")
    return request_prompt(service, req.text, req.messages, req.add_generation_prompt, req.bos, req.truncate)


def selection(service: ModelService, req: ForwardRequest, n_tokens: int) -> Selection:
    cfg = service.model.cfg
    if req.target is not None:
        check_index(req.target, cfg.vocab_size, "target")
    return Selection(
        layers=check_indices(req.layers, cfg.n_layer, "layers"),
        heads=check_indices(req.heads, cfg.n_head, "heads"),
        layer=check_index(req.layer, cfg.n_layer, "layer"),
        head=check_index(req.head, cfg.n_head, "head"),
        position=n_tokens - 1 if req.position is None else check_index(req.position, n_tokens, "position"),
        target=req.target,
        top_k=req.top_k,
        sae=req.sae,
        lens=req.lens,
    )


def run_trace(
    service: ModelService, ids: list[int], parts: list[registry.Part], sel: Selection, m, every: bool = False
) -> Trace:
    """One forward pass of `ids` through `m` (the model as service.run() lends it) that captures what
    the parts read; every position's logits when asked (`every`), when a part reads them or when a
    position other than the last is selected, else the last position's only."""
    cfg, T = m.cfg, len(ids)
    with m.capture(registry.hooks_for(parts, cfg, sel)) as cache:
        # the unembedding is the widest matmul (GPT-2: 50,257 x 768 per position): skip the rows unread
        every = every or any(p.every_position for p in parts) or sel.position != T - 1
        logits, _ = m(torch.tensor([ids], device=service.device), last_only=not every)
    return Trace(service, m, ids, {k: v[0] for k, v in cache.items()}, logits[0], sel)


def prepare(service: ModelService, req: ForwardRequest) -> Plan:
    """Check the request against the loaded model (every 422 before anything runs)."""
    ids, dropped, chat_text = request_ids(service, req)
    sel = selection(service, req, len(ids))
    field = "ids" if req.ids is not None else "messages" if req.messages is not None else "text"
    return Plan(ids, dropped, chat_text, sel, registry.wanted(service, req.include), field)


def need(service: ModelService, plan: Plan, binary: bool = False, where: str = "body") -> memory.Need:
    """The trace's peak bytes (see the module's text), named by `include` when a part's own share is
    larger than the pass's (the attention maps, the lenses' T x V per stage), else by the prompt (a
    trace asked for in the URL, `where` "query", has no include to change: its text is named)."""
    cfg, T = service.model.cfg, len(plan.ids)
    per_array = ARRAY_BINARY if binary else ARRAY_JSON
    hooks = registry.hooks_for(plan.parts, cfg, plan.sel)
    base = pass_bytes(cfg, T, plan.every) + T * TOKEN_VALUES * VALUE_BYTES
    built, shares = 0, {}
    for p in plan.parts:
        z = p.size(service, plan.sel, T)
        own = z.work + z.arrays * per_array + z.values * VALUE_BYTES
        built += own
        shares[p.name] = own + captured_bytes(cfg, list(p.hooks(cfg, plan.sel)), T)
    total = base + captured_bytes(cfg, hooks, T) + built
    what = f"this trace of {T:,} tokens"
    top = max(shares, key=lambda k: shares[k], default=None)
    if where == "body" and top is not None and shares[top] >= base:
        return memory.Need(total, "include", what, f"fewer tokens or leave out {top}")
    return memory.Need(total, plan.prompt_field, what, "a shorter prompt", where=where)


def forward(service: ModelService, req: ForwardRequest) -> ForwardResponse:
    """The trace, built with its memory held (its caller encodes it: the endpoint holds that too, `build`)."""
    plan = prepare(service, req)
    with memory.hold(need(service, plan)):
        return build(service, plan)


def build(service: ModelService, plan: Plan) -> ForwardResponse:
    """Run the planned trace and build its answer (the caller holds its memory)."""
    cfg, ids, sel, parts = service.model.cfg, plan.ids, plan.sel, plan.parts
    with service.run() as m:
        trace = run_trace(service, ids, parts, sel, m)
        blocks = {p.name: p.build(trace) for p in parts}
    return ForwardResponse(
        model=service.name,
        tokens=token_pieces(service.encoding, ids),
        truncated=plan.dropped,
        chat_text=plan.chat_text,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        d_model=cfg.d_model,
        causal=cfg.causal,
        window=cfg.window,
        position=sel.position,
        **blocks,
    )


def part_list(service: ModelService) -> PartsResponse:
    """The registry as the page (or a tool) needs it for the loaded model."""
    return PartsResponse(
        parts=[
            PartInfo(name=p.name, description=p.description, applies=p.applies(service), stale_on=list(p.stale_on))
            for p in registry.PARTS
        ]
    )
