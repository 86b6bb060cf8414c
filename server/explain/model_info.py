from __future__ import annotations

import math

from gptscope import __version__
from gptscope.model.gpt import count_params
from gptscope.model.schedules import SCHEDULE_KINDS

from ..digits import VALUE
from ..schemas.health import ClassifierInfo, Health, ModelInfo
from ..service import ModelService


def model_info(service: ModelService) -> ModelInfo:
    cfg, meta = service.model.cfg, service.meta
    evals = meta.evals or []
    tok = meta.tokenizer or {}
    return ModelInfo(
        name=service.name,
        checkpoint=str(service.path),
        tokenizer=str(tok.get("kind"))
        if tok.get("kind") in ("bpe", "chars")
        else "tokenizer.json"
        if tok.get("kind") == "huggingface"
        else str(tok.get("name")),
        vocab_size=cfg.vocab_size,
        n_ctx=cfg.n_ctx,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        d_model=cfg.d_model,
        d_mlp=cfg.d_mlp,
        norm=cfg.norm,
        gelu=cfg.gelu,
        causal=cfg.causal,
        params=count_params(cfg)["total"],
        corpus=str((meta.corpus or {}).get("name", "?")),
        train_steps=int(meta.step or 0),
        final_val_loss=evals[-1]["val_loss"] if evals else None,
        uniform_loss=round(math.log(cfg.vocab_size), VALUE),
        command=str(meta.command or ""),
        source=str((meta.source or {}).get("kind", "trained")),
        schedule=(meta.schedule or {}).get("kind") in SCHEDULE_KINDS,
        pos=cfg.pos,
        norm_type=cfg.norm_type,
        mlp=cfg.mlp,
        n_kv_head=cfg.n_kv_head,
        head_dim=cfg.head_dim,
        window=cfg.window,
        window_pattern=cfg.window_pattern,
        window_last_full=cfg.window_last_full,
        softcap=cfg.softcap,
        qk_norm=cfg.qk_norm,
        qk_norm_all=cfg.qk_norm_all,
        parallel=cfg.parallel,
        rotary_dim=cfg.rotary_dim,
        attn_scale=cfg.attn_scale,
        attn_softcap=cfg.attn_softcap,
        embed_scale=cfg.embed_scale,
        rope_base=cfg.rope_base,
        rope_local_base=cfg.rope_local_base,
        extras=cfg.extras,
        switches=cfg.switches,
        bos=list(getattr(service.encoding, "bos_ids", [])),
        chat_template=bool(getattr(service.encoding, "chat_template", None)),
        n_expert=cfg.n_expert,
        top_k_experts=cfg.top_k_experts,
        classifier=ClassifierInfo(
            **{k: v for k, v in (meta.classifier or {}).items() if k in ClassifierInfo.model_fields}
        )
        if service.classifier is not None
        else None,
    )


def health(service: ModelService) -> Health:
    return Health(version=__version__, model=service.name, device=str(service.device), info=model_info(service))
