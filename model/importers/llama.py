"""Hugging Face models of the LLaMA family: a folder of LlamaForCausalLM (Llama 2 and 3.x, SmolLM2,
TinyLlama), Qwen2ForCausalLM (Qwen2.5), Qwen3ForCausalLM or MistralForCausalLM: config.json +
model.safetensors (or the shards of model.safetensors.index.json) + tokenizer.json. RoPE in
transformers' rotate-half convention (pair i is (x_i, x_{i+hs/2}), as gpt.py turns it, so q and k
need no permutation), RMSNorm, SwiGLU, grouped-query attention, and the options each family adds
(GPTConfig's head_dim, qkv_bias, attn_out_bias, mlp_bias, qk_norm, rope_scaling, window). Every
config.json field is either computed exactly or changes nothing computed (HF_INERT_FIELDS); any
other is refused by name. The weights are stored in the file's own half precision and computed in
float32."""

import math
import re
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import CheckpointMeta, empty_gpt
from ..gpt import GPTConfig, count_params
from ..tokenizers import HFEncoding
from .common import Converted, ImportFailed, config_from, hf_int, read_hf_tensors, read_json

# model_type -> the one architecture of it gptscope reads (its causal language model)
LLAMA_FAMILY = {
    "llama": "LlamaForCausalLM",  # Llama 2 and 3.x, SmolLM2, TinyLlama
    "qwen2": "Qwen2ForCausalLM",  # Qwen2.5: biases on W_Q, W_K, W_V
    "qwen3": "Qwen3ForCausalLM",  # Qwen3: an RMSNorm on each head's q and k, its own head_dim
    "mistral": "MistralForCausalLM",  # Mistral: a sliding window
}
MODEL_TYPES = tuple(LLAMA_FAMILY)  # the config.json model_type values it reads
# config.json fields that say how a file was made, trained, stored or served, never what it computes
HF_INERT_FIELDS = frozenset(
    {
        "architectures",  # checked: the family's causal LM
        "model_type",
        "transformers_version",
        "torch_dtype",  # the stored dtype (gptscope computes in float32 whatever it is)
        "dtype",
        "_name_or_path",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "use_cache",
        "initializer_range",
        "attention_dropout",  # training only
        "pretraining_tp",  # Llama's tensor-parallel slicing: the same sums, split
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "chunk_size_feed_forward",
        "tokenizer_class",
        "is_llama_config",  # SmolLM2
        "transformers.js_config",  # SmolLM2
        "max_window_layers",  # Qwen: which layers a sliding window would use (only with use_sliding_window)
    }
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
ROPE_KEYS = (
    "rope_type",
    "type",  # the older spelling of rope_type
    "rope_theta",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
)
# buffers some older Llama files carry: RoPE's frequencies, recomputed by the model, not parameters
_LLAMA_BUFFER = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def _number(raw: dict, where: str, key: str, default: float | None = None, low: float = 0.0) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= low:
        raise ImportFailed(f"config.json field {where}{key} is {v!r}; it must be a number above {low:g}")
    return float(v)


def _flag(raw: dict, key: str, default: bool = False) -> bool:
    v = raw.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ImportFailed(f"config.json field {key} is {v!r}; it must be true or false")
    return v


def hf_rope(raw: dict) -> dict:
    """GPTConfig's RoPE fields from config.json: rope_parameters (transformers 5) or rope_theta and
    rope_scaling (older files), whichever the file writes. Scalings other than none, linear and
    llama3 are refused, naming the field."""
    if raw.get("rope_parameters") is not None and raw.get("rope_scaling") is not None:
        raise ImportFailed("config.json has both rope_parameters and rope_scaling; a model has one RoPE")
    where = "rope_parameters" if raw.get("rope_parameters") is not None else "rope_scaling"
    params = raw.get(where) or {}
    if not isinstance(params, dict):
        raise ImportFailed(f"config.json field {where} is {params!r}; it must be an object or null")
    unknown = sorted(set(params) - set(ROPE_KEYS))
    if unknown:
        raise ImportFailed(f"config.json field {where}.{unknown[0]} is not a RoPE setting gptscope computes")
    if "rope_theta" in params and "rope_theta" in raw and params["rope_theta"] != raw["rope_theta"]:
        raise ImportFailed(f"config.json fields rope_theta and {where}.rope_theta differ")
    for holder, label in ((params, f"{where}."), (raw, "")):
        if holder.get("partial_rotary_factor", 1.0) != 1.0:
            raise ImportFailed(
                f"config.json field {label}partial_rotary_factor is {holder['partial_rotary_factor']!r}; "
                f"gptscope turns every pair of a head (1.0)"
            )
    theta = _number({**raw, **params}, f"{where}." if "rope_theta" in params else "", "rope_theta", 10000.0)
    kind = params.get("rope_type", params.get("type")) or "default"
    out: dict[str, Any] = {"pos": "rope", "rope_base": theta}
    if kind == "default":
        return out
    if kind not in ("linear", "llama3"):
        raise ImportFailed(
            f"config.json field {where}.rope_type is {kind!r}; gptscope computes RoPE unscaled ('default'), "
            f"'linear' and 'llama3'"
        )
    out.update(rope_scaling=kind, rope_factor=_number(params, f"{where}.", "factor", None, low=1.0 - 1e-12))
    if kind == "llama3":
        lo = _number(params, f"{where}.", "low_freq_factor")
        hi = _number(params, f"{where}.", "high_freq_factor", low=lo)
        ctx = params.get("original_max_position_embeddings")
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
            raise ImportFailed(
                f"config.json field {where}.original_max_position_embeddings is {ctx!r}; it must be a positive integer"
            )
        out.update(rope_low_freq_factor=lo, rope_high_freq_factor=hi, rope_original_ctx=ctx)
    return out


def _llama_window(raw: dict, model_type: str, n_layer: int) -> int:
    """Mistral's sliding window (each query sees its last `sliding_window` keys, itself included,
    as transformers' mask does: key j > query i - window); 0 for Qwen's and Llama's full attention."""
    if _flag(raw, "use_sliding_window"):
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
    unknown = sorted(set(raw) - HF_INERT_FIELDS - LLAMA_FIELDS[mt])
    if unknown:
        raise ImportFailed(
            f"config.json field {unknown[0]} is not one gptscope reads for a {mt} model; it may change what "
            f"the model computes, so the import stops rather than guess"
        )
    arch = raw.get("architectures")
    if arch is not None and arch != [LLAMA_FAMILY[mt]]:
        raise ImportFailed(f"config.json field architectures is {arch!r}; gptscope reads {[LLAMA_FAMILY[mt]]}")
    for key, want in (("hidden_act", "silu"), ("rope_interleaved", False), ("is_encoder_decoder", False)):
        if raw.get(key, want) != want:
            raise ImportFailed(f"config.json field {key} is {raw.get(key)!r}; gptscope computes {want!r}")
    n_head, n_layer = hf_int(raw, "num_attention_heads"), hf_int(raw, "num_hidden_layers")
    attention_bias = _flag(raw, "attention_bias")
    return config_from(
        "config.json",
        lambda: dict(
            vocab_size=hf_int(raw, "vocab_size"),
            n_ctx=hf_int(raw, "max_position_embeddings"),
            n_layer=n_layer,
            n_head=n_head,
            d_model=hf_int(raw, "hidden_size"),
            d_mlp=hf_int(raw, "intermediate_size"),
            n_kv_head=hf_int(raw, "num_key_value_heads") if raw.get("num_key_value_heads") is not None else n_head,
            head_dim=hf_int(raw, "head_dim") if raw.get("head_dim") is not None else 0,
            dropout=0.0,
            bias=False,
            qkv_bias=mt == "qwen2" or attention_bias,  # Qwen2 always has them
            attn_out_bias=attention_bias,
            mlp_bias=_flag(raw, "mlp_bias"),
            qk_norm=mt == "qwen3",
            norm="pre",
            norm_type="rmsnorm",
            mlp="swiglu",
            ln_eps=_number(raw, "", "rms_norm_eps", 1e-6),
            tie_weights=_flag(raw, "tie_word_embeddings", False),
            window=_llama_window(raw, mt, n_layer),
            causal=True,
            **hf_rope(raw),
        ),
    )


def llama_names(cfg: GPTConfig) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """gptscope parameter -> the Hugging Face tensors it is made of, with the shape each must have
    (several are stacked along the first axis: W_Q, W_K, W_V into c_attn). Both use nn.Linear."""
    d, dm, hs, V = cfg.d_model, cfg.d_mlp, cfg.d_head, cfg.vocab_size
    q, kv = cfg.n_head * hs, cfg.n_kv_head * hs
    m: dict[str, list[tuple[str, tuple[int, ...]]]] = {
        "wte.weight": [("model.embed_tokens.weight", (V, d))],
        "ln_final.weight": [("model.norm.weight", (d,))],
    }
    for i in range(cfg.n_layer):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attn = hf + "self_attn."
        m[ours + "ln1.weight"] = [(hf + "input_layernorm.weight", (d,))]
        m[ours + "ln2.weight"] = [(hf + "post_attention_layernorm.weight", (d,))]
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
        if cfg.qk_norm:
            m[ours + "attn.q_norm.weight"] = [(attn + "q_norm.weight", (hs,))]
            m[ours + "attn.k_norm.weight"] = [(attn + "k_norm.weight", (hs,))]
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


def llama_state(cfg: GPTConfig, tensors: dict[str, torch.Tensor], source: str) -> tuple[dict[str, torch.Tensor], int]:
    """The model's state dict (float32) from the Hugging Face tensors, and how many numbers the file
    holds for it; a missing, misshapen, extra or untied tensor is refused by name."""
    state, used = {}, set()
    for ours, parts in llama_names(cfg).items():
        got = []
        for name, shape in parts:
            t = tensors.get(name)
            if t is None:
                raise ImportFailed(f"tensor {name} is missing from {source}")
            if tuple(t.shape) != shape:
                raise ImportFailed(f"tensor {name} in {source} has shape {tuple(t.shape)}; config.json needs {shape}")
            if not t.is_floating_point():
                raise ImportFailed(f"tensor {name} in {source} has dtype {t.dtype}; weights must be floating point")
            got.append(t)
            used.add(name)
        state[ours] = (torch.cat(got) if len(got) > 1 else got[0]).float().contiguous()
    lm = tensors.get("lm_head.weight")
    if cfg.tie_weights and lm is not None:
        if not torch.equal(lm.float(), state["wte.weight"]):
            raise ImportFailed(
                "tensor lm_head.weight differs from model.embed_tokens.weight, but config.json says "
                "tie_word_embeddings; is config.json the one for these weights?"
            )
        used.add("lm_head.weight")
    extra = sorted(k for k in tensors if k not in used and not _LLAMA_BUFFER.match(k))
    if extra:
        raise ImportFailed(
            f"{source} has tensors this config.json does not describe: {extra[:5]} (n_layer={cfg.n_layer}); "
            f"is config.json the one for these weights?"
        )
    n = sum(t.numel() for k, t in tensors.items() if k in used and not (cfg.tie_weights and k == "lm_head.weight"))
    return state, n


def hf_tokenizer(folder: Path, vocab_size: int) -> dict:
    """The checkpoint's tokenizer spec: the folder's tokenizer.json, whole, read by `tokenizers`."""
    p = folder / "tokenizer.json"
    if not p.is_file():
        raise ImportFailed(
            f"{folder} has no tokenizer.json; gptscope reads a Llama-family model's tokenizer from its "
            f"tokenizer.json (a SentencePiece tokenizer.model alone is not read)"
        )
    try:
        text = p.read_text(encoding="utf-8")
        enc = HFEncoding(text, name=folder.name)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ImportFailed(f"tokenizer.json is not readable: {e}") from None
    if enc.model_type not in ("BPE", "Unigram"):
        raise ImportFailed(f"tokenizer.json field model.type is {enc.model_type!r}; gptscope reads 'BPE' and 'Unigram'")
    if enc.n_vocab > vocab_size:
        raise ImportFailed(
            f"tokenizer.json has token ids up to {enc.n_vocab - 1:,} but config.json field vocab_size is "
            f"{vocab_size:,}: the tokenizer does not fit the model"
        )
    return {"kind": "huggingface", "name": folder.name, "json": text}


def convert_hf_llama(folder: Path) -> Converted:
    raw = read_json(folder / "config.json")
    cfg = llama_config(raw)
    tokenizer = hf_tokenizer(folder, cfg.vocab_size)
    tensors, source = read_hf_tensors(folder)
    state, n_params = llama_state(cfg, tensors, source)
    if n_params != count_params(cfg)["total"]:  # the two counts are written independently: a bug if they differ
        raise ImportFailed(
            f"{source} holds {n_params:,} parameters, but the config counts {count_params(cfg)['total']:,}"
        )
    stored = {t.dtype for t in tensors.values() if t.is_floating_point()}
    del tensors
    model = empty_gpt(cfg)
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_weights:  # assign=True replaced wte.weight's Parameter: tie the output layer to the new one
        model.lm_head.weight = model.wte.weight
    source_meta = {
        "kind": "huggingface-llama",
        "path": str(folder),
        "model_type": raw["model_type"],
        "architectures": raw.get("architectures"),
        "name_or_path": raw.get("_name_or_path"),
        "params": n_params,
    }
    # kept on disk in the file's own half precision when it has one (computed in float32 when loaded)
    dtype = next((dt for dt in (torch.bfloat16, torch.float16) if stored == {dt}), torch.float32)
    meta = CheckpointMeta.from_dict({"tokenizer": tokenizer, "source": source_meta, "step": 0})
    return Converted(model.eval(), meta, dtype)
