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
    LLAMA_FIRST,
    Converted,
    HFLayout,
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
from .llama import llama_names

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
    bias = hf_flag(raw, "attention_bias")
    return config_from(
        "config.json",
        lambda: dict(
            **hf_sizes(raw),
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
    """The LLaMA layout (llama_names) with a block's norms on its sublayers' outputs."""
    return llama_names(cfg, {"ln1": "post_attention_layernorm", "ln2": "post_feedforward_layernorm"})


OLMO2_LAYOUT = HFLayout("huggingface-olmo2", "OLMo 2", first=LLAMA_FIRST)


def convert_hf_olmo2(folder: Path) -> Converted:
    return convert_hf(folder, olmo2_config, olmo2_names, OLMO2_LAYOUT)
