"""The forward trace of a prompt: tokens, attention patterns, next-token candidates."""

from __future__ import annotations

import torch

from ..errors import InputError
from ..schemas.forward import AttentionBlock, ForwardRequest, ForwardResponse, NextToken
from ..service import ModelService
from .tokens import check_text, token_pieces


def rounded(t: torch.Tensor, digits: int = 5) -> list:
    """A tensor as nested lists of floats rounded for compact JSON (NaN/inf never appear)."""
    t = torch.nan_to_num(t.detach().float(), nan=0.0, posinf=0.0, neginf=0.0)
    return torch.round(t, decimals=digits).tolist()


def prompt_ids(service: ModelService, text: str, truncate: bool, field: str = "text") -> tuple[list[int], int]:
    """Token ids of a prompt for the loaded model; refuses (or, if asked, truncates) a prompt that
    does not fit the context window."""
    check_text(text, field)
    ids = service.encoding.encode_ordinary(text)
    n_ctx = service.model.cfg.n_ctx
    if not ids:
        raise InputError(field, "the prompt has no tokens")
    if len(ids) > n_ctx:
        if not truncate:
            raise InputError(field, f"the prompt is {len(ids)} tokens; the model's context window is n_ctx={n_ctx} tokens "
                                    f"(send truncate=true to keep the last {n_ctx})")
        return ids[-n_ctx:], len(ids) - n_ctx
    return ids, 0


def _indices(requested: list[int] | None, n: int, field: str) -> list[int]:
    if requested is None:
        return list(range(n))
    bad = [i for i in requested if not 0 <= i < n]
    if bad:
        raise InputError(field, f"index {bad[0]} is out of range; valid indices are 0..{n - 1}")
    return sorted(set(requested))


def next_tokens(service: ModelService, logits: torch.Tensor, k: int) -> list[NextToken]:
    """Top-k candidates from one position's logits (V,)."""
    probs = torch.softmax(logits.float(), -1)
    k = min(k, probs.numel())
    top = torch.topk(probs, k)
    enc = service.encoding
    return [NextToken(id=int(i), text=enc.decode_single_token_bytes(int(i)).decode("utf-8", errors="replace"),
                      prob=round(float(p), 6), logit=round(float(logits[int(i)]), 4))
            for p, i in zip(top.values, top.indices)]


def forward(service: ModelService, req: ForwardRequest) -> ForwardResponse:
    cfg = service.model.cfg
    layers = _indices(req.layers, cfg.n_layer, "layers")
    heads = _indices(req.heads, cfg.n_head, "heads")
    ids, dropped = prompt_ids(service, req.text, req.truncate)
    want_attn = "attention" in req.include
    names = {f"blocks.{l}.attn.hook_pattern" for l in layers} if want_attn else set()
    with service.run() as model, model.capture(names) as cache:
        logits, _ = model(torch.tensor([ids], device=service.device))
    attention = None
    if want_attn:
        pats = [cache[f"blocks.{l}.attn.hook_pattern"][0, heads] for l in layers]  # (h, T, T) each
        attention = AttentionBlock(layers=layers, heads=heads, pattern=[rounded(p) for p in pats])
    return ForwardResponse(
        model=service.name,
        tokens=token_pieces(service.encoding, ids),
        truncated=dropped,
        attention=attention,
        next_token=next_tokens(service, logits[0, -1], req.top_k) if "next_token" in req.include else None,
    )
