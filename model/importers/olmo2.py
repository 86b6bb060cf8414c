"""Hugging Face models of AI2's OLMo 2: a folder of Olmo2ForCausalLM (OLMo-2-0425-1B, OLMo 2 7B and
13B and their instruct models): config.json + model.safetensors (or shards) + tokenizer.json.

The LLaMA family's parts (RoPE, RMSNorm, SwiGLU, grouped-query attention) in OLMo 2's order: no norm
before a sublayer, an RMSNorm on its output before the residual add, x + LN(f(x)) (norm="out": the
block's ln1 is post_attention_layernorm, its ln2 post_feedforward_layernorm), and an RMSNorm over the
whole of q and the whole of k, every head at once, before RoPE (qk_norm_all). Every config.json field
is read or refused by name."""

from pathlib import Path

from ..gpt import GPTConfig
from .common import (
    Converted,
    Piece,
    check_fields,
    check_values,
    config_from,
    convert_hf,
    hf_flag,
    hf_int,
    hf_number,
    hf_rope,
    read_json,
)

MODEL_TYPES = ("olmo2",)
ARCHITECTURE = "Olmo2ForCausalLM"
OLMO2_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "tie_word_embeddings",
    "rope_parameters",
    "rope_theta",
    "rope_scaling",
    "attention_bias",
)


def olmo2_config(raw: dict) -> GPTConfig:
    """GPTConfig from an Olmo2ForCausalLM's config.json; any field gptscope does not compute is refused."""
    check_fields(raw, "olmo2", "OLMo 2", ARCHITECTURE, OLMO2_FIELDS)
    check_values(raw, {"hidden_act": "silu"})
    n_head = hf_int(raw, "num_attention_heads")
    bias = hf_flag(raw, "attention_bias")
    return config_from(
        "config.json",
        lambda: dict(
            vocab_size=hf_int(raw, "vocab_size"),
            n_ctx=hf_int(raw, "max_position_embeddings"),
            n_layer=hf_int(raw, "num_hidden_layers"),
            n_head=n_head,
            d_model=hf_int(raw, "hidden_size"),
            d_mlp=hf_int(raw, "intermediate_size"),
            n_kv_head=hf_int(raw, "num_key_value_heads") if raw.get("num_key_value_heads") is not None else n_head,
            dropout=0.0,
            bias=False,
            qkv_bias=bias,
            attn_out_bias=bias,
            norm="out",
            norm_type="rmsnorm",
            mlp="swiglu",
            qk_norm=True,
            qk_norm_all=True,
            ln_eps=hf_number(raw, "", "rms_norm_eps", 1e-5),
            tie_weights=hf_flag(raw, "tie_word_embeddings", False),
            **hf_rope(raw),
        ),
    )


def olmo2_names(cfg: GPTConfig) -> dict[str, list[Piece]]:
    d, dm, hs, V = cfg.d_model, cfg.d_mlp, cfg.d_head, cfg.vocab_size
    q, kv = cfg.n_head * hs, cfg.n_kv_head * hs
    m: dict[str, list[Piece]] = {
        "wte.weight": [("model.embed_tokens.weight", (V, d))],
        "ln_final.weight": [("model.norm.weight", (d,))],
    }
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attn = hf + "self_attn."
        m[ours + "ln1.weight"] = [(hf + "post_attention_layernorm.weight", (d,))]  # on attention's output
        m[ours + "ln2.weight"] = [(hf + "post_feedforward_layernorm.weight", (d,))]  # on the MLP's output
        m[ours + "attn.c_attn.weight"] = [
            (attn + f"{x}_proj.weight", (w, d)) for x, w in (("q", q), ("k", kv), ("v", kv))
        ]
        if cfg.qkv_bias:
            m[ours + "attn.c_attn.bias"] = [
                (attn + f"{x}_proj.bias", (w,)) for x, w in (("q", q), ("k", kv), ("v", kv))
            ]
        m[ours + "attn.c_proj.weight"] = [(attn + "o_proj.weight", (d, q))]
        if cfg.attn_out_bias:
            m[ours + "attn.c_proj.bias"] = [(attn + "o_proj.bias", (d,))]
        m[ours + "attn.q_norm.weight"] = [(attn + "q_norm.weight", (q,))]
        m[ours + "attn.k_norm.weight"] = [(attn + "k_norm.weight", (kv,))]
        for mine, theirs, shape in (
            ("c_gate", "gate_proj", (dm, d)),
            ("c_fc", "up_proj", (dm, d)),
            ("c_proj", "down_proj", (d, dm)),
        ):
            m[ours + f"mlp.{mine}.weight"] = [(hf + f"mlp.{theirs}.weight", shape)]
    if not cfg.tie_weights:
        m["lm_head.weight"] = [("lm_head.weight", (V, d))]
    return m


def convert_hf_olmo2(folder: Path) -> Converted:
    raw = read_json(folder / "config.json")
    cfg = olmo2_config(raw)
    return convert_hf(
        folder, raw, cfg, olmo2_names(cfg), "huggingface-olmo2", "model.embed_tokens.weight", None, "OLMo 2"
    )
