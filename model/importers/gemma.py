"""Hugging Face models of Google's Gemma 2 and Gemma 3 (text): a folder of Gemma2ForCausalLM or
Gemma3ForCausalLM (model_type gemma3_text: Gemma 3 270M and 1B, or a larger one's text model):
config.json + model.safetensors (or shards) + tokenizer.json.

The LLaMA family's block (RoPE, RMSNorm, grouped-query attention) with Gemma's differences, each a
switch of gptscope's GPT: the token's embedding times sqrt(d_model) (embed_scale); the sandwich norm,
an RMSNorm before and after each sublayer (norm="both"); GeGLU, SwiGLU with GELU's tanh form for its
gate (mlp="geglu"); scores scaled by query_pre_attn_scalar^-1/2 (attn_scale); local and global layers
(layer_types: a sliding window on the local ones, window_pattern with the last layer as the pattern
says); Gemma 2's softcaps, 50 tanh(scores / 50) on attention's scores (attn_softcap) and 30 tanh(z / 30)
on the logits (softcap); Gemma 3's RMSNorm on each head's q and k (qk_norm) and its local layers' own
RoPE base, 10,000 against the global layers' 1,000,000 (rope_local_base). Gemma's RMSNorm multiplies
by (1 + w): the stored w is read as the gain 1 + w (kept in float32 where the file's bfloat16 would
round it: common.store_dtype). Every config.json field is read or refused by name; sliding_window_size
(Gemma 2 9B's file) is an alias transformers ignores, accepted where it equals sliding_window."""

from pathlib import Path
from typing import Any

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
from .llama import llama_names

GEMMA_FAMILY = {"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}
MODEL_TYPES = tuple(GEMMA_FAMILY)
_GEMMA_COMMON = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_activation",
    "hidden_act",  # older files write it too; transformers' Gemma reads hidden_activation only
    "max_position_embeddings",
    "rms_norm_eps",
    "tie_word_embeddings",
    "rope_parameters",
    "rope_theta",
    "rope_scaling",
    "attention_bias",
    "query_pre_attn_scalar",
    "sliding_window",
    "sliding_window_size",  # Gemma 2 9B's file writes it too; transformers reads sliding_window only
    "layer_types",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "use_bidirectional_attention",
    "cache_implementation",  # how generate() keeps its cache ("hybrid"), not what it computes
)
GEMMA_FIELDS = {
    "gemma2": _GEMMA_COMMON,
    "gemma3_text": (*_GEMMA_COMMON, "rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"),
}
GELUS = {"gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu": "exact"}
LOCAL, GLOBAL = "sliding_attention", "full_attention"


def _layer_types(raw: dict, mt: str, n_layer: int) -> list[str]:
    """Each layer's kind, as config.json lists it or as transformers fills it in: Gemma 2 alternates
    local and global from layer 0; Gemma 3 has sliding_window_pattern - 1 local layers per global one."""
    types = raw.get("layer_types")
    if types is None:
        if mt == "gemma2":
            every = 2
        else:
            every = raw.get("sliding_window_pattern", raw.get("_sliding_window_pattern", 6))
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ImportFailed(
                    f"config.json field sliding_window_pattern is {every!r}; it must be a positive integer"
                )
        types = [LOCAL if (i + 1) % every else GLOBAL for i in range(n_layer)]
    if not isinstance(types, list) or len(types) != n_layer or set(types) - {LOCAL, GLOBAL}:
        raise ImportFailed(
            f"config.json field layer_types is {types!r}; gptscope reads {n_layer} layers of {LOCAL!r} or {GLOBAL!r}"
        )
    return types


def gemma_windows(raw: dict, mt: str, n_layer: int) -> dict[str, Any]:
    """GPTConfig's window, window_pattern and window_last_full for the layer kinds: the shortest
    pattern of S (local) and L (global) that tiles them, each layer as its kind says."""
    kinds = "".join("S" if t == LOCAL else "L" for t in _layer_types(raw, mt, n_layer))
    if "S" not in kinds:
        return {"window": 0}
    window = raw.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ImportFailed(f"config.json field sliding_window is {window!r}; it must be a positive integer")
    if "L" not in kinds:
        return {"window": window}
    return {"window": window, "window_pattern": kinds[: smallest_period(kinds)], "window_last_full": False}


def smallest_period(s: str) -> int:
    """The shortest p with s[i] == s[i - p] for every i >= p (s is a prefix of s[:p] repeated), in one
    pass (Knuth-Morris-Pratt's border: p = len(s) - the longest proper prefix that is also a suffix),
    where trying each p in turn took time and memory quadratic in the number of layers."""
    border = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = border[k - 1]
        if s[i] == s[k]:
            k += 1
        border[i] = k
    return len(s) - (border[-1] if s else 0)


def _optional_number(raw: dict, key: str) -> float:
    return 0.0 if raw.get(key) is None else hf_number(raw, "", key)


def gemma_rope(raw: dict, mt: str, has_local: bool) -> dict[str, Any]:
    """RoPE: Gemma 2's one setting; Gemma 3's two, per layer kind (rope_parameters' full_attention and
    sliding_attention, or the older rope_theta, rope_scaling and rope_local_base_freq; transformers'
    defaults 1,000,000 and 10,000): the global layers' may be stretched, the local layers' must not be."""
    if mt == "gemma2":
        return hf_rope(raw)
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and set(params) & {LOCAL, GLOBAL}:
        unknown = sorted(set(params) - {LOCAL, GLOBAL})
        if unknown:
            raise ImportFailed(f"config.json field rope_parameters.{unknown[0]} is not a layer kind gptscope reads")
        out = hf_rope({}, {"rope_theta": 1e6, **(params.get(GLOBAL) or {})}, f"rope_parameters.{GLOBAL}")
        loc = hf_rope({}, {"rope_theta": 1e4, **(params.get(LOCAL) or {})}, f"rope_parameters.{LOCAL}")
        if set(loc) != {"pos", "rope_base"}:
            raise ImportFailed(
                f"config.json field rope_parameters.{LOCAL} stretches RoPE; gptscope turns Gemma 3's local layers unscaled"
            )
        local = loc["rope_base"]
    else:  # the older spelling: rope_theta and rope_scaling for the global layers, rope_local_base_freq
        out = hf_rope({"rope_theta": 1e6, **{k: v for k, v in raw.items() if k != "rope_local_base_freq"}})
        local = hf_number(raw, "", "rope_local_base_freq", 10000.0)
    return {**out, "rope_local_base": local} if has_local else out


def gemma_config(raw: dict) -> GPTConfig:
    """GPTConfig from a Gemma 2 or Gemma 3 (text) causal LM's config.json; any field gptscope does not
    compute is refused by name."""
    mt = raw.get("model_type")
    if mt not in GEMMA_FAMILY:
        raise ImportFailed(f"config.json field model_type is {mt!r}; not a Gemma 2 or Gemma 3 text model")
    check_fields(raw, mt, "Gemma", GEMMA_FAMILY[mt], GEMMA_FIELDS[mt])
    check_values(raw, {"use_bidirectional_attention": False} if raw.get("use_bidirectional_attention") else {})
    alias, window = raw.get("sliding_window_size"), raw.get("sliding_window")
    if alias is not None and (alias != window or type(alias) is not type(window)):  # (True == 1)
        raise ImportFailed(
            f"config.json fields sliding_window_size ({alias!r}) and sliding_window ({window!r}) "
            "differ; transformers reads sliding_window only, so gptscope does not guess which one the model has"
        )
    if mt == "gemma3_text" and raw.get("attn_logit_softcapping") is not None:
        raise ImportFailed(
            f"config.json field attn_logit_softcapping is {raw['attn_logit_softcapping']!r}; Gemma 3 computes "
            "no attention softcap (transformers' Gemma 3 does not read it), so gptscope does not guess one"
        )
    act = raw.get("hidden_activation") or "gelu_pytorch_tanh"
    if act not in GELUS:
        raise ImportFailed(
            f"config.json field hidden_activation is {act!r}; gptscope computes {', '.join(map(repr, GELUS))}"
        )
    n_head, n_layer, d = (
        hf_int(raw, "num_attention_heads"),
        hf_int(raw, "num_hidden_layers"),
        hf_int(raw, "hidden_size"),
    )
    hs = hf_int(raw, "head_dim") if raw.get("head_dim") is not None else d // n_head
    scalar = hf_number(raw, "", "query_pre_attn_scalar", 256)
    windows = gemma_windows(raw, mt, n_layer)
    bias = hf_flag(raw, "attention_bias")
    return config_from(
        "config.json",
        lambda: dict(
            **hf_sizes(raw),
            head_dim=hs,
            bias=False,
            qkv_bias=bias,
            attn_out_bias=bias,
            norm="both",
            norm_type="rmsnorm",
            mlp="geglu",
            gelu=GELUS[act],
            ln_eps=hf_number(raw, "", "rms_norm_eps", 1e-6),
            tie_weights=hf_flag(raw, "tie_word_embeddings", True),
            embed_scale=d**0.5,
            attn_scale=0.0 if scalar == hs else scalar**-0.5,
            attn_softcap=_optional_number(raw, "attn_logit_softcapping"),
            softcap=_optional_number(raw, "final_logit_softcapping"),
            qk_norm=mt == "gemma3_text",
            **windows,
            **gemma_rope(raw, mt, bool(windows["window"])),
        ),
    )


def _gain(t):
    """Gemma's RMSNorm multiplies by (1 + w): the gain gptscope multiplies by."""
    return t + 1.0


GEMMA_NORMS = {  # the sandwich: a norm before and after each sublayer
    "ln1": "input_layernorm",
    "ln1_post": "post_attention_layernorm",
    "ln2": "pre_feedforward_layernorm",
    "ln2_post": "post_feedforward_layernorm",
}


def gemma_names(cfg: GPTConfig) -> dict[str, list[Piece]]:
    """The LLaMA layout (llama_names) with Gemma's four norms a block, each stored w read as 1 + w."""
    return llama_names(cfg, GEMMA_NORMS, _gain)


GEMMA_LAYOUT = HFLayout("huggingface-gemma", "Gemma", first=LLAMA_FIRST)


def convert_hf_gemma(folder: Path) -> Converted:
    return convert_hf(folder, gemma_config, gemma_names, GEMMA_LAYOUT)
