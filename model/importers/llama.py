"""Hugging Face models of the LLaMA family: a folder of LlamaForCausalLM (Llama 2 and 3.x, SmolLM2,
TinyLlama), Qwen2ForCausalLM (Qwen2.5), Qwen3ForCausalLM or MistralForCausalLM: config.json +
model.safetensors (or the shards of model.safetensors.index.json) + tokenizer.json. RoPE in
transformers' rotate-half convention (pair i is (x_i, x_{i+hs/2}), as gpt.py turns it, so q and k
need no permutation), RMSNorm, SwiGLU, grouped-query attention, and the options each family adds
(GPTConfig's head_dim, qkv_bias, attn_out_bias, mlp_bias, qk_norm, rope_scaling, window). Every
config.json field is either computed exactly or changes nothing computed (HF_INERT_FIELDS); any
other is refused by name. The weights are stored in the file's own half precision and computed in
float32."""

import re
from collections.abc import Callable
from pathlib import Path

import torch

from ..gpt import GPTConfig
from .common import (
    LLAMA_FIRST,
    Converted,
    HFLayout,
    ImportFailed,
    Piece,
    check_fields,
    check_values,
    config_from,
    convert_hf,
    hf_flag,
    hf_int,
    hf_number,
    hf_rope,
    hf_sizes,
)

# model_type -> the one architecture of it gptscope reads (its causal language model)
LLAMA_FAMILY = {
    "llama": "LlamaForCausalLM",  # Llama 2 and 3.x, SmolLM2, TinyLlama
    "qwen2": "Qwen2ForCausalLM",  # Qwen2.5: biases on W_Q, W_K, W_V
    "qwen3": "Qwen3ForCausalLM",  # Qwen3: an RMSNorm on each head's q and k, its own head_dim
    "mistral": "MistralForCausalLM",  # Mistral: a sliding window
}
MODEL_TYPES = tuple(LLAMA_FAMILY)  # the config.json model_type values it reads
# config.json fields of these families that change nothing computed (besides common.HF_INERT_FIELDS)
LLAMA_INERT = (
    "pretraining_tp",  # Llama's tensor-parallel slicing: the same sums, split
    "is_llama_config",  # SmolLM2
    "transformers.js_config",  # SmolLM2
    "max_window_layers",  # Qwen: which layers a sliding window would use (only with use_sliding_window)
)
_LLAMA_COMMON = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "rms_norm_eps",
    "tie_word_embeddings",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_interleaved",
    "partial_rotary_factor",
    "is_encoder_decoder",
)
# the fields each family's config.json may hold besides the inert ones; each is read or checked below
LLAMA_FIELDS = {
    "llama": {*_LLAMA_COMMON, "attention_bias", "mlp_bias"},
    "qwen2": {*_LLAMA_COMMON, "use_sliding_window", "sliding_window", "layer_types"},
    "qwen3": {*_LLAMA_COMMON, "attention_bias", "use_sliding_window", "sliding_window", "layer_types"},
    "mistral": {*_LLAMA_COMMON, "sliding_window", "layer_types"},
}
# buffers some older Llama files carry: RoPE's frequencies, recomputed by the model, not parameters
_LLAMA_BUFFER = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def _llama_window(raw: dict, model_type: str, n_layer: int) -> int:
    """Mistral's sliding window (each query sees its last `sliding_window` keys, itself included,
    as transformers' mask does: key j > query i - window); 0 for Qwen's and Llama's full attention."""
    if hf_flag(raw, "use_sliding_window"):
        raise ImportFailed(
            "config.json field use_sliding_window is true; gptscope computes one attention for every layer, "
            "and Qwen's window covers only some (max_window_layers)"
        )
    window = raw.get("sliding_window") if model_type == "mistral" else None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ImportFailed(f"config.json field sliding_window is {window!r}; it must be a positive integer or null")
    kind = "sliding_attention" if window else "full_attention"
    types = raw.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != n_layer or set(types) != {kind}):
        raise ImportFailed(
            f"config.json field layer_types is {types!r}; gptscope computes {n_layer} layers of {kind!r}, all alike"
        )
    return window or 0


def llama_config(raw: dict) -> GPTConfig:
    """GPTConfig from the config.json of a Llama, Qwen2, Qwen3 or Mistral causal LM. Every field must
    be one gptscope computes exactly (or one that changes nothing computed); any other is refused by
    name, so nothing is silently approximated."""
    mt = raw.get("model_type")
    if mt not in LLAMA_FAMILY:
        raise ImportFailed(f"config.json field model_type is {mt!r}; not a model of the LLaMA family")
    check_fields(raw, mt, "LLaMA-family", LLAMA_FAMILY[mt], {*LLAMA_FIELDS[mt], *LLAMA_INERT})
    check_values(raw, {"hidden_act": "silu", "rope_interleaved": False, "is_encoder_decoder": False})
    attention_bias = hf_flag(raw, "attention_bias")
    return config_from(
        "config.json",
        lambda: dict(
            **hf_sizes(raw),
            head_dim=hf_int(raw, "head_dim") if raw.get("head_dim") is not None else 0,
            bias=False,
            qkv_bias=mt == "qwen2" or attention_bias,  # Qwen2 always has them
            attn_out_bias=attention_bias,
            mlp_bias=hf_flag(raw, "mlp_bias"),
            qk_norm=mt == "qwen3",
            norm="pre",
            norm_type="rmsnorm",
            mlp="swiglu",
            ln_eps=hf_number(raw, "", "rms_norm_eps", 1e-6),
            tie_weights=hf_flag(raw, "tie_word_embeddings", False),
            window=_llama_window(raw, mt, hf_int(raw, "num_hidden_layers")),
            causal=True,
            **hf_rope(raw),
        ),
    )


# a block's norms: gptscope's name -> the Hugging Face layer's (Llama's, before each sublayer)
LLAMA_NORMS = {"ln1": "input_layernorm", "ln2": "post_attention_layernorm"}


def llama_names(
    cfg: GPTConfig, norms: dict[str, str] = LLAMA_NORMS, gain: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> dict[str, list[Piece]]:
    """gptscope parameter -> the Hugging Face tensors it is made of, with the shape each must have
    (several are stacked along the first axis: W_Q, W_K, W_V into c_attn). Both use nn.Linear. The
    LLaMA layout, which OLMo 2 and Gemma share with other `norms` in a block (and Gemma's `gain`,
    read from every stored norm weight)."""
    d, dm, hs, V = cfg.d_model, cfg.d_mlp, cfg.d_head, cfg.vocab_size
    q, kv = cfg.n_head * hs, cfg.n_kv_head * hs

    def norm(name: str, shape: tuple[int, ...]) -> list[Piece]:
        return [(name, shape, gain) if gain else (name, shape)]

    m: dict[str, list[Piece]] = {
        "wte.weight": [("model.embed_tokens.weight", (V, d))],
        "ln_final.weight": norm("model.norm.weight", (d,)),
    }
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attn = hf + "self_attn."
        for mine, theirs in norms.items():
            m[ours + f"{mine}.weight"] = norm(hf + f"{theirs}.weight", (d,))
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
        if cfg.qk_norm:  # over each head's q and k, or (qk_norm_all) over all of q and all of k
            m[ours + "attn.q_norm.weight"] = norm(attn + "q_norm.weight", (q,) if cfg.qk_norm_all else (hs,))
            m[ours + "attn.k_norm.weight"] = norm(attn + "k_norm.weight", (kv,) if cfg.qk_norm_all else (hs,))
        for mine, theirs, shape in (
            ("c_gate", "gate_proj", (dm, d)),
            ("c_fc", "up_proj", (dm, d)),
            ("c_proj", "down_proj", (d, dm)),
        ):
            m[ours + f"mlp.{mine}.weight"] = [(hf + f"mlp.{theirs}.weight", shape)]
            if cfg.mlp_bias:
                m[ours + f"mlp.{mine}.bias"] = [(hf + f"mlp.{theirs}.bias", shape[:1])]
    if not cfg.tie_weights:
        m["lm_head.weight"] = [("lm_head.weight", (V, d))]
    return m


LLAMA_LAYOUT = HFLayout("huggingface-llama", first=LLAMA_FIRST, buffers=_LLAMA_BUFFER)


def convert_hf_llama(folder: Path) -> Converted:
    return convert_hf(folder, llama_config, llama_names, LLAMA_LAYOUT)
