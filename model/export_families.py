"""The families an imported model goes back out as (model/export_hf.py): for each, the config.json its
switches are written as (the importer's reader run backwards), its importer's name map, and that
reader, which reads the written file back so that nothing is kept that computes something else.

GPT-2 and the LLaMA family (Llama, Qwen2, Qwen3, Mistral) are in export_hf.py; here are the families
issue #45 brought in: GPT-NeoX (Pythia), Phi-3 (LongRoPE included), OLMo 2, Gemma 2 and Gemma 3 (text).
Each writer spells the fields the way the family's published files do (rope_theta and rope_scaling,
Pythia's rotary_pct and rotary_emb_base, Gemma 3's rope_local_base_freq), which transformers 4 and 5
both read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import GPTConfig
from .positions import layer_window


class CannotWrite(ValueError):
    """This family cannot say one of the model's switches (the field that stops it is `field`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Writer:
    model_type: str
    architecture: str
    config: Callable[[GPTConfig], dict[str, Any]]  # the body of config.json
    reader: Callable[[], Callable[[dict], GPTConfig]]  # the importer's reader (imported when used)
    names: Callable[[], Callable[[GPTConfig], dict]]  # the importer's name map


def _sizes(cfg: GPTConfig, kv: bool = True) -> dict[str, Any]:
    out = {
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_mlp,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "max_position_embeddings": cfg.n_ctx,
    }
    return {**out, "num_key_value_heads": cfg.n_kv_head} if kv else out


def rope_fields(cfg: GPTConfig) -> dict[str, Any]:
    """rope_theta and rope_scaling as published files write them (none, linear, llama3, longrope)."""
    kind, scaling = cfg.rope_scaling, None
    if kind == "linear":
        scaling = {"rope_type": "linear", "factor": cfg.rope_factor}
    elif kind == "llama3":
        scaling = {
            "rope_type": "llama3",
            "factor": cfg.rope_factor,
            "low_freq_factor": cfg.rope_low_freq_factor,
            "high_freq_factor": cfg.rope_high_freq_factor,
            "original_max_position_embeddings": cfg.rope_original_ctx,
        }
    elif kind == "longrope":
        scaling = {
            "type": "longrope",
            "short_factor": list(cfg.rope_short_factor),
            "long_factor": list(cfg.rope_long_factor),
        }
        if cfg.rope_attention_factor:
            scaling["attention_factor"] = cfg.rope_attention_factor
    return {"rope_theta": cfg.rope_base, "rope_scaling": scaling}


def _neox(cfg: GPTConfig) -> dict[str, Any]:
    return {
        **_sizes(cfg, kv=False),
        "hidden_act": "gelu" if cfg.gelu == "exact" else "gelu_new",
        "layer_norm_eps": cfg.ln_eps,
        "use_parallel_residual": cfg.parallel,
        "rotary_pct": cfg.rotary / cfg.d_head,
        "rotary_emb_base": cfg.rope_base,
        "attention_bias": True,
    }


def _phi3(cfg: GPTConfig) -> dict[str, Any]:
    out = {
        **_sizes(cfg),
        "hidden_act": "silu",
        "rms_norm_eps": cfg.ln_eps,
        "sliding_window": cfg.window or None,
        "partial_rotary_factor": cfg.rotary / cfg.d_head,
        **rope_fields(cfg),
    }
    if cfg.rope_scaling == "longrope":
        out["original_max_position_embeddings"] = cfg.rope_original_ctx
    return out


def _olmo2(cfg: GPTConfig) -> dict[str, Any]:
    return {
        **_sizes(cfg),
        "hidden_act": "silu",
        "rms_norm_eps": cfg.ln_eps,
        "attention_bias": cfg.qkv_bias,
        **rope_fields(cfg),
    }


def _scalar(cfg: GPTConfig) -> float:
    """query_pre_attn_scalar: the head size where the scores are scaled as usual, else attn_scale^-2
    (a whole number where it is one: Gemma 2 9B's 224)."""
    if not cfg.attn_scale:
        return cfg.d_head
    s = cfg.attn_scale**-2
    return round(s) if abs(s - round(s)) < 1e-6 else s


def _gemma(mt: str) -> Callable[[GPTConfig], dict[str, Any]]:
    def body(cfg: GPTConfig) -> dict[str, Any]:
        kinds = ["sliding_attention" if layer_window(cfg, i) else "full_attention" for i in range(cfg.n_layer)]
        out: dict[str, Any] = {
            **_sizes(cfg),
            "head_dim": cfg.d_head,
            "hidden_activation": "gelu_pytorch_tanh" if cfg.gelu == "tanh" else "gelu",
            "rms_norm_eps": cfg.ln_eps,
            "query_pre_attn_scalar": _scalar(cfg),
            "sliding_window": cfg.window or None,
            "layer_types": kinds,
            "final_logit_softcapping": cfg.softcap or None,
            "attention_bias": cfg.qkv_bias,
            **rope_fields(cfg),
        }
        if mt == "gemma2":
            out["attn_logit_softcapping"] = cfg.attn_softcap or None
        else:
            out["rope_local_base_freq"] = cfg.rope_local_base or cfg.rope_base
        return out

    return body


def _reader(module: str, name: str) -> Callable[[], Any]:
    def get() -> Any:
        from importlib import import_module

        return getattr(import_module(f"gptscope.model.importers.{module}"), name)

    return get


FAMILY_WRITERS = [
    Writer("phi3", "Phi3ForCausalLM", _phi3, _reader("phi3", "phi3_config"), _reader("phi3", "phi3_names")),
    Writer("olmo2", "Olmo2ForCausalLM", _olmo2, _reader("olmo2", "olmo2_config"), _reader("olmo2", "olmo2_names")),
    Writer("gpt_neox", "GPTNeoXForCausalLM", _neox, _reader("neox", "neox_config"), _reader("neox", "neox_names")),
    Writer(
        "gemma2",
        "Gemma2ForCausalLM",
        _gemma("gemma2"),
        _reader("gemma", "gemma_config"),
        _reader("gemma", "gemma_names"),
    ),
    Writer(
        "gemma3_text",
        "Gemma3ForCausalLM",
        _gemma("gemma3_text"),
        _reader("gemma", "gemma_config"),
        _reader("gemma", "gemma_names"),
    ),
]
