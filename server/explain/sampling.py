"""Next-token filtering (temperature, top-k, top-p) and one step of KV-cached generation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from gptscope.model.gpt import GPT, KVCache, hook_name
from gptscope.model.sae import LoadedSAE
from gptscope.model.sae import steering as sae_steering
from gptscope.model.sampling import filter_logits, sample_next

from .. import memory
from ..digits import COARSE, FINE, VALUE
from ..errors import InputError
from ..schemas.sampling import (
    CacheSize,
    FilteredToken,
    GenerateStepRequest,
    GenerateStepResponse,
    NextTokenRequest,
    NextTokenResponse,
    SamplingSettings,
)
from ..schemas.stages import NextToken
from ..service import ModelService
from .common import check_index, given_ids, request_prompt, rounded, token_text
from .forward import FLOAT, pass_bytes
from .sae import steering_sae
from .stages import final_stream, logits_at
from .tokens import token_pieces


def _check_top_k(service: ModelService, s: SamplingSettings) -> None:
    V = service.model.cfg.vocab_size
    if s.top_k is not None and s.top_k > V:
        raise InputError("top_k", f"{s.top_k} is above the vocabulary size {V}; valid values are 1..{V}")


def _entropy(p: torch.Tensor) -> float:
    p = p[p > 0]
    return round(float(-(p * p.log()).sum()), VALUE)


def need(service: ModelService, T: int, field: str, cache: bool = False) -> memory.Need:
    """One pass of T tokens (the last position's logits), and with `cache` a KV cache of the whole
    context (every layer's keys and values, n_ctx positions)."""
    cfg = service.model.cfg
    kv = 2 * cfg.n_layer * cfg.n_kv_head * cfg.d_head * cfg.n_ctx * FLOAT if cache else 0
    return memory.Need(pass_bytes(cfg, T, every=False) + kv, field, f"a pass of {T:,} tokens", "a shorter prompt")


def position_logits(service: ModelService, ids: list[int], position: int | None) -> torch.Tensor:
    """The logits (V,) after `position` of the prompt (None: the last). Only that position's row is unembedded
    (the widest matmul), and an earlier one's as the forward trace's `at_position` makes it, so /next-token
    and the trace's next_token part give the same digits."""
    pos = len(ids) - 1 if position is None else check_index(position, len(ids), "position")
    x = torch.tensor([ids], device=service.device)
    with service.run() as m:
        if pos == len(ids) - 1:
            return m(x, last_only=True)[0][0, -1]
        name = final_stream(m.cfg)
        with m.capture([name]) as cache:
            m.hidden(x)
        return logits_at(m, cache[name], pos)


def next_token(service: ModelService, req: NextTokenRequest) -> NextTokenResponse:
    _check_top_k(service, req)
    ids, _, _ = request_prompt(service, req.text, req.messages, req.add_generation_prompt, req.bos, req.truncate)
    with memory.hold(need(service, len(ids), "messages" if req.messages is not None else "text")):
        last = position_logits(service, ids, req.position).float()
    f = filter_logits(last, req.temperature, req.top_k, req.top_p)
    order = torch.argsort(f.probs_raw, descending=True, stable=True)[: req.show]
    cands = [
        FilteredToken(
            id=int(i),
            text=token_text(service, int(i)),
            logit=round(float(last[i]), COARSE),
            p_raw=round(float(f.probs_raw[i]), FINE),
            p_temperature=round(float(f.probs_temperature[i]), FINE),
            in_top_k=bool(f.kept_top_k[i]),
            kept=bool(f.kept[i]),
            p_final=round(float(f.probs_final[i]), FINE),
        )
        for i in order
    ]
    return NextTokenResponse(
        tokens=token_pieces(service.encoding, ids),
        settings=SamplingSettings(**req.model_dump(include={"temperature", "top_k", "top_p"})),
        candidates=cands,
        n_kept=int(f.kept.sum()),
        kept_mass=round(float(f.probs_temperature[f.kept].sum()), FINE),
        entropy_raw=_entropy(f.probs_raw),
        entropy_temperature=_entropy(f.probs_temperature),
        entropy_final=_entropy(f.probs_final),
        vocab_size=last.numel(),
    )


@contextmanager
def steered(model: GPT, steer: LoadedSAE | None, req: GenerateStepRequest) -> Iterator[GPT]:
    """The model with the request's SAE feature added to its stream (model/sae.py), or as it is."""
    if steer is None or req.steer is None:
        yield model
        return
    with sae_steering(model, steer.sae, req.steer.feature, req.steer.scale) as m:
        yield m


def generate_step(service: ModelService, req: GenerateStepRequest) -> GenerateStepResponse:
    """Prefill every id but the last into a KV cache, then decode the last one with the cache and
    sample the next token from the stream (seed, step), exactly as GPT.generate does."""
    _check_top_k(service, req)
    cfg = service.model.cfg
    given_ids(service, req.ids)  # every id in the vocabulary, no more than n_ctx of them
    ids = torch.tensor([req.ids], device=service.device)
    steer = steering_sae(service, req.steer.sae, req.steer.feature) if req.steer else None
    with (
        memory.hold(need(service, len(req.ids), "ids", cache=True)),
        service.run() as model,
        steered(model, steer, req) as m,
    ):
        # a stepper's request repeats the last one's ids plus the token it drew: those keys and
        # values are reused, as GPT.generate keeps its cache from one token to the next (a steered
        # step computes its own: the cached keys and values were made without the feature)
        cache = KVCache(cfg, 1, service.device) if steer else service.kv_prefix(req.ids[:-1])
        reused = cache.length
        if ids.size(1) - 1 > reused:
            m(ids[:, reused:-1], kv_cache=cache, last_only=True)
        with m.capture(lambda n: n.endswith("attn.hook_pattern")) as cap:
            logits, _ = m(ids[:, -1:], kv_cache=cache)
        if not steer:
            service.keep_kv(req.ids, cache)
    s = sample_next(logits[0, -1], req.temperature, req.top_k, req.top_p, req.seed, req.step)
    fin = s.filtered.probs_final
    top = torch.topk(fin, min(req.top, int(s.filtered.kept.sum())))
    new_ids = [*req.ids, s.token]
    piece = token_pieces(service.encoding, [s.token])[0]
    piece.index = len(req.ids)
    numbers = cache.numel_used()
    return GenerateStepResponse(
        token=piece,
        prob=round(s.prob, FINE),
        ids=new_ids,
        step=req.step,
        seed=req.seed,
        candidates=[
            NextToken(
                id=int(i),
                text=token_text(service, int(i)),
                prob=round(float(p), FINE),
                logit=round(float(logits[0, -1, int(i)]), COARSE),
            )
            for p, i in zip(top.values, top.indices)
        ],
        prefill_tokens=len(req.ids) - 1,
        reused_tokens=reused,
        attention=rounded(torch.stack([cap[hook_name("attn.hook_pattern", li)][0, :, 0] for li in range(cfg.n_layer)])),
        cache=CacheSize(
            layers=cfg.n_layer,
            positions=cache.length,
            kv_heads=cfg.n_kv_head,
            d_head=cfg.d_head,
            n_head=cfg.n_head,
            d_model=cfg.d_model,
            numbers=numbers,
            bytes_float32=numbers * 4,
        ),
        text=service.encoding.decode(new_ids),
    )
