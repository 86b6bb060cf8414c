"""Hugging Face models of Microsoft's Phi-3: a folder of Phi3ForCausalLM (Phi-3-mini-4k, Phi-3-medium-4k):
config.json + model.safetensors (or shards) + tokenizer.json.

The LLaMA family's block (RoPE, RMSNorm, SwiGLU, grouped-query attention, one block after the other,
not in parallel) stored fused: qkv_proj holds W_Q, W_K and W_V stacked, as gptscope's c_attn does,
and gate_up_proj the MLP's gate above its up-projection (split into c_gate and c_fc). RoPE may turn
only part of each head (partial_rotary_factor: GPTConfig.rotary_dim, Phi-4-mini's 0.75) and a
sliding window may cover every layer (Phi-3-mini-4k: 2,047 keys). LongRoPE (rope_scaling "longrope",
or its older name "su": per-pair short and long factors, the long ones for a forward call that reaches
past original_max_position_embeddings, and cos and sin times an attention factor), which the 128k
models, Phi-3.5-mini and Phi-4-mini ship, is computed as transformers computes it (common.hf_rope)."""

import re
from pathlib import Path

from ..gpt import GPTConfig
from .common import (
    Converted,
    HFLayout,
    ImportFailed,
    Piece,
    check_fields,
    check_values,
    config_from,
    convert_hf,
    hf_flag,
    hf_number,
    hf_rope,
    hf_sizes,
)

MODEL_TYPES = ("phi3",)
ARCHITECTURE = "Phi3ForCausalLM"
PHI3_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "max_position_embeddings",
    "original_max_position_embeddings",  # read by LongRoPE only (its original context)
    "rms_norm_eps",
    "tie_word_embeddings",
    "rope_parameters",
    "rope_theta",
    "rope_scaling",
    "partial_rotary_factor",
    "sliding_window",
    "attention_bias",
    "resid_pdrop",  # training only
    "embd_pdrop",  # training only
    "auto_map",  # where Microsoft's own modelling code lives (trust_remote_code): gptscope runs none
)
_PHI3_BUFFER = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def phi3_config(raw: dict) -> GPTConfig:
    """GPTConfig from a Phi3ForCausalLM's config.json; any field gptscope does not compute is refused."""
    check_fields(raw, "phi3", "Phi-3", ARCHITECTURE, PHI3_FIELDS)
    check_values(raw, {"hidden_act": "silu", "attention_bias": False})
    window = raw.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ImportFailed(f"config.json field sliding_window is {window!r}; it must be a positive integer or null")
    return config_from(
        "config.json",
        lambda: dict(
            **hf_sizes(raw),
            bias=False,
            norm="pre",
            norm_type="rmsnorm",
            mlp="swiglu",
            ln_eps=hf_number(raw, "", "rms_norm_eps", 1e-5),
            tie_weights=hf_flag(raw, "tie_word_embeddings", False),
            window=window or 0,
            **hf_rope(raw, partial=True, longrope=True),
        ),
    )


def phi3_names(cfg: GPTConfig) -> dict[str, list[Piece]]:
    d, dm, hs, V = cfg.d_model, cfg.d_mlp, cfg.d_head, cfg.vocab_size
    q, kv = cfg.n_head * hs, cfg.n_kv_head * hs
    m: dict[str, list[Piece]] = {
        "wte.weight": [("model.embed_tokens.weight", (V, d))],
        "ln_final.weight": [("model.norm.weight", (d,))],
    }
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        m[ours + "ln1.weight"] = [(hf + "input_layernorm.weight", (d,))]
        m[ours + "ln2.weight"] = [(hf + "post_attention_layernorm.weight", (d,))]
        m[ours + "attn.c_attn.weight"] = [(hf + "self_attn.qkv_proj.weight", (q + 2 * kv, d))]  # already stacked
        m[ours + "attn.c_proj.weight"] = [(hf + "self_attn.o_proj.weight", (d, q))]
        gate_up = hf + "mlp.gate_up_proj.weight"  # the gate's dm rows, then the up-projection's
        m[ours + "mlp.c_gate.weight"] = [(gate_up, (2 * dm, d), lambda t: t[:dm])]
        m[ours + "mlp.c_fc.weight"] = [(gate_up, (2 * dm, d), lambda t: t[dm:])]
        m[ours + "mlp.c_proj.weight"] = [(hf + "mlp.down_proj.weight", (d, dm))]
    if not cfg.tie_weights:
        m["lm_head.weight"] = [("lm_head.weight", (V, d))]
    return m


PHI3_LAYOUT = HFLayout(
    "huggingface-phi3",
    "Phi-3",
    first=(  # W_Q, W_K and W_V stacked; the gate above the up-projection
        (
            "self_attn.qkv_proj.weight",
            lambda c: ((c.n_head + 2 * c.n_kv_head) * c.d_head, c.d_model),
            ("(num_attention_heads + 2 * num_key_value_heads) * head size", "hidden_size"),
        ),
        ("mlp.gate_up_proj.weight", lambda c: (2 * c.d_mlp, c.d_model), ("2 * intermediate_size", "hidden_size")),
    ),
    buffers=_PHI3_BUFFER,
)


def convert_hf_phi3(folder: Path) -> Converted:
    return convert_hf(folder, phi3_config, phi3_names, PHI3_LAYOUT)
