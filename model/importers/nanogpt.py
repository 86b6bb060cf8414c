"""nanoGPT: `ckpt.pt` = {"model": state_dict, "model_args": {...}, ...}, read only with
torch.load(weights_only=True): tensors and plain values, never an arbitrary unpickle. nanoGPT uses
nn.Linear (no transpose), exact GELU, optional biases (`bias`), and GPT-2's tokenizer unless a
`meta.pkl` gives a character vocabulary (read with an unpickler that refuses every class)."""

import io
import math
import pickle
import re
from pathlib import Path
from typing import Any, cast

import torch

from ..checkpoint import CheckpointMeta
from ..gpt import GPT, GPTConfig
from .common import GPT2_VOCAB, Converted, ImportFailed, config_from, fill

# nanoGPT pads GPT-2's vocabulary to a multiple of 64 for speed; the extra rows are never a target
NANOGPT_PADDED_VOCAB = 50304


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


def unpickler_reason(e: Exception) -> str:
    """The one line that matters in torch's long weights-only error."""
    m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", str(e), re.S)
    return " ".join((m.group(1) if m else str(e)).split())[:300]


def _torch_load_safely(path: Path) -> dict:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        reason = unpickler_reason(e)
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
    return config_from(
        "ckpt.pt model_args",
        lambda: dict(
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
        ),
    )


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


def check_sizes(cfg: GPTConfig, sd: dict, source: str) -> None:
    """model_args' sizes against the tensors, before a model of that size is built: a 1.4 KB ckpt.pt
    naming n_embd 4096 (or a million layers) cost gigabytes before its tensors were looked at."""
    for name, want in (
        ("transformer.wte.weight", (cfg.vocab_size, cfg.d_model)),
        ("transformer.wpe.weight", (cfg.n_ctx, cfg.d_model)),
    ):
        t = sd.get(name)
        if t is None:
            raise ImportFailed(f"tensor {name} is missing from {source}")
        if tuple(t.shape) != want:
            raise ImportFailed(f"tensor {name} in {source} has shape {tuple(t.shape)}; model_args need {want}")
    blocks = {int(m.group(1)) for k in sd if (m := re.match(r"transformer\.h\.(\d+)\.", k))}
    if blocks != set(range(cfg.n_layer)):
        raise ImportFailed(
            f"ckpt.pt model_args field n_layer is {cfg.n_layer:,}, but {source} holds blocks "
            f"{min(blocks, default=0)} to {max(blocks, default=-1)} ({len(blocks):,} of them)"
        )


def convert_nanogpt(path: Path, meta_pkl: Path | None = None) -> Converted:
    obj = _torch_load_safely(path)
    cfg = nanogpt_config(obj["model_args"])
    # torch.compile'd runs save names with an "_orig_mod." prefix (nanoGPT's sample.py strips it too)
    sd = {k.removeprefix("_orig_mod."): v for k, v in obj["model"].items() if isinstance(v, torch.Tensor)}
    check_sizes(cfg, sd, path.name)
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
    fill(model, sd, names, path.name)
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
    return Converted(model, CheckpointMeta.from_dict(meta))
