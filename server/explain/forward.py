"""The forward trace of a prompt (POST /api/v1/forward): one captured forward pass, turned into the
requested parts by the builders the registry (parts.py) names."""

from __future__ import annotations

import torch

from ..errors import InputError
from ..schemas.forward import ForwardRequest, ForwardResponse, PartInfo, PartsResponse
from ..service import ModelService
from . import parts as registry
from .common import check_index, check_indices, given_ids, request_prompt
from .stages import Selection, Trace
from .tokens import token_pieces


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


def forward(service: ModelService, req: ForwardRequest) -> ForwardResponse:
    cfg = service.model.cfg
    ids, dropped, chat_text = request_ids(service, req)
    sel = selection(service, req, len(ids))
    parts = registry.wanted(service, req.include)
    with service.run() as m:
        trace = run_trace(service, ids, parts, sel, m)
        blocks = {p.name: p.build(trace) for p in parts}
    return ForwardResponse(
        model=service.name,
        tokens=token_pieces(service.encoding, ids),
        truncated=dropped,
        chat_text=chat_text,
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
