"""Interventions: zero heads or MLPs, or edit prompt tokens, and compare with the clean run."""

from __future__ import annotations

import torch

from gptscope.model.gpt import HookFn, hook_name

from .. import memory
from ..digits import FINE, VALUE
from ..errors import InputError
from ..schemas.intervene import Compared, InterveneRequest, InterveneResponse, RunSummary
from ..service import ModelService
from .common import next_tokens, request_prompt, token_text
from .forward import FLOAT, pass_bytes
from .tokens import token_pieces


def _mean_loss(logits: torch.Tensor, ids: list[int]) -> float | None:
    if len(ids) < 2:
        return None
    return round(float(torch.nn.functional.cross_entropy(logits[:-1].float(), torch.tensor(ids[1:]))), VALUE)


def need(service: ModelService, req: InterveneRequest, T: int) -> memory.Need:
    """Two passes of T tokens, one after the other, each keeping every position's logits (T x V) for its
    loss, and the loss's float32 copy of them."""
    cfg = service.model.cfg
    return memory.Need(
        pass_bytes(cfg, T, every=True) + 3 * T * cfg.vocab_size * FLOAT,
        "messages" if req.messages is not None else "text",
        f"this intervention on {T:,} tokens",
        "a shorter prompt",
    )


def intervene(service: ModelService, req: InterveneRequest) -> InterveneResponse:
    cfg = service.model.cfg
    ids, _, _ = request_prompt(service, req.text, req.messages, req.add_generation_prompt, req.bos, False)
    for n, h in enumerate(req.ablate_heads):
        if h.layer >= cfg.n_layer:
            raise InputError(
                f"ablate_heads.{n}.layer", f"{h.layer} is out of range; valid layers are 0..{cfg.n_layer - 1}"
            )
        if h.head >= cfg.n_head:
            raise InputError(f"ablate_heads.{n}.head", f"{h.head} is out of range; valid heads are 0..{cfg.n_head - 1}")
    for n, li in enumerate(req.ablate_mlps):
        if not 0 <= li < cfg.n_layer:
            raise InputError(f"ablate_mlps.{n}", f"{li} is out of range; valid layers are 0..{cfg.n_layer - 1}")
    altered_ids = list(ids)
    for n, e in enumerate(req.edits):
        if e.position >= len(ids):
            raise InputError(f"edits.{n}.position", f"{e.position} is out of range; the prompt has {len(ids)} tokens")
        if e.id >= cfg.vocab_size:
            raise InputError(f"edits.{n}.id", f"{e.id} is outside the vocabulary 0..{cfg.vocab_size - 1}")
        altered_ids[e.position] = e.id

    by_layer: dict[int, list[int]] = {}
    for h in req.ablate_heads:
        by_layer.setdefault(h.layer, []).append(h.head)

    def zero_heads(z: torch.Tensor, name: str):  # z (B, T, nh, hs)
        z = z.clone()
        z[:, :, by_layer[int(name.split(".")[1])]] = 0.0
        return z

    def zero(t: torch.Tensor, _name: str):
        return torch.zeros_like(t)

    hooks: list[tuple[str, HookFn]] = [(hook_name("attn.hook_z", li), zero_heads) for li in by_layer]
    hooks += [(hook_name("hook_mlp_out", li), zero) for li in sorted(set(req.ablate_mlps))]
    with memory.hold(need(service, req, len(ids))):
        return _compared(service, req, ids, altered_ids, hooks)


def _compared(
    service: ModelService, req: InterveneRequest, ids: list[int], altered_ids: list[int], hooks: list
) -> InterveneResponse:
    with service.run() as m:
        clean, _ = m(torch.tensor([ids], device=service.device))
        with m.hooks(hooks):
            alt, _ = m(torch.tensor([altered_ids], device=service.device))
    clean, alt = clean[0], alt[0]
    p_clean = torch.softmax(clean[-1].float(), -1)
    p_alt = torch.softmax(alt[-1].float(), -1)
    kl = float((p_clean * (p_clean.clamp_min(1e-30).log() - p_alt.clamp_min(1e-30).log())).sum())
    union = list(
        dict.fromkeys(
            [*torch.topk(p_clean, req.top_k).indices.tolist(), *torch.topk(p_alt, req.top_k).indices.tolist()]
        )
    )
    compared = sorted(
        (
            Compared(
                id=i,
                text=token_text(service, i),
                clean=round(float(p_clean[i]), FINE),
                altered=round(float(p_alt[i]), FINE),
            )
            for i in union
        ),
        key=lambda c: -c.clean,
    )
    return InterveneResponse(
        clean=RunSummary(
            tokens=token_pieces(service.encoding, ids),
            loss=_mean_loss(clean, ids),
            top=next_tokens(service, clean[-1], req.top_k),
        ),
        altered=RunSummary(
            tokens=token_pieces(service.encoding, altered_ids),
            loss=_mean_loss(alt, altered_ids),
            top=next_tokens(service, alt[-1], req.top_k),
        ),
        kl_divergence=round(max(0.0, kl), FINE),
        compared=compared,
    )
