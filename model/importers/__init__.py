"""Bring your own GPT: convert a Hugging Face folder (GPT-2, the LLaMA family, GPT-NeoX/Pythia, Gemma 2
and 3, Phi-3, OLMo 2), a nanoGPT `ckpt.pt` or a nanochat checkpoint folder into a gptscope checkpoint,
so every page explains it like the built-in model.

One module per family (gpt2.py, llama.py, neox.py, gemma.py, phi3.py, olmo2.py, nanogpt.py,
nanochat.py), each with what it reads (a Hugging Face
family's MODEL_TYPES, the config.json model_type values) and `convert(path)`; HF_FAMILIES and
`detect` here find the family of what is on disk; common.py holds what they share.

`import_model` detects the kind, converts, checks (every tensor present with the right shape, the
vocabulary matching the tokenizer, finite logits on a sample), and stores the result atomically
under <data_dir>/models/<name>/: built in a hidden temporary folder, renamed into place only when
complete, removed on any failure. Nothing is downloaded.
"""

import os
import shutil
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from .. import checkpoint as ckpt
from ..gpt import count_params
from . import gemma, gpt2, llama, nanochat, nanogpt, neox, olmo2, phi3
from .common import Converted, ImportFailed, models_dir, new_model_folder, read_json, sample_check
from .gpt2 import hf_config

__all__ = [
    "HF_FAMILIES",
    "Converted",
    "ImportFailed",
    "convert",
    "detect",
    "hf_config",
    "import_model",
    "import_series",
    "models_dir",
    "sample_check",
]

# The Hugging Face families: config.json's model_type -> the converter of that family's folders.
# A new family is a module with its MODEL_TYPES and its converter, and a line here.
HF_FAMILIES: dict[str, Callable[[Path], Converted]] = {
    **dict.fromkeys(gpt2.MODEL_TYPES, gpt2.convert_hf_gpt2),
    **dict.fromkeys(llama.MODEL_TYPES, llama.convert_hf_llama),
    **dict.fromkeys(neox.MODEL_TYPES, neox.convert_hf_neox),
    **dict.fromkeys(gemma.MODEL_TYPES, gemma.convert_hf_gemma),
    **dict.fromkeys(phi3.MODEL_TYPES, phi3.convert_hf_phi3),
    **dict.fromkeys(olmo2.MODEL_TYPES, olmo2.convert_hf_olmo2),
}


def detect(path: Path) -> str:
    """The family of what is on disk: a Hugging Face model_type (HF_FAMILIES' keys), 'nanogpt' or 'nanochat'."""
    if path.exists() and nanochat.is_nanochat(path):
        return "nanochat"
    if path.is_dir():
        if (path / "config.json").is_file():
            if not any((path / n).is_file() for n in ("model.safetensors", "model.safetensors.index.json")):
                found = [p.name for p in path.iterdir() if p.suffix in (".bin", ".safetensors", ".h5", ".msgpack")]
                raise ImportFailed(
                    f"{path} has config.json but no model.safetensors (found {found or 'no weights'}); "
                    f"gptscope reads Hugging Face weights only as safetensors, which cannot run code"
                )
            mt = read_json(path / "config.json").get("model_type")
            if mt not in HF_FAMILIES:
                raise ImportFailed(
                    f"config.json field model_type is {mt!r}; gptscope imports "
                    f"{', '.join(repr(k) for k in HF_FAMILIES)}"
                )
            return mt
        if (path / "ckpt.pt").is_file():
            return "nanogpt"
        raise ImportFailed(
            f"{path} holds neither a Hugging Face model (config.json + model.safetensors), a nanoGPT ckpt.pt "
            f"nor a nanochat checkpoint (model_<step>.pt + meta_<step>.json)"
        )
    if path.is_file():
        if path.suffix in (".pt", ".pth", ".ckpt"):
            return "nanogpt"
        raise ImportFailed(
            f"{path} is a file but not a nanoGPT checkpoint (.pt); for GPT-2 give the folder with "
            f"config.json and model.safetensors"
        )
    raise ImportFailed(f"{path} does not exist")


def convert(path: str | Path, meta_pkl: str | Path | None = None, tokenizer: str | Path | None = None) -> Converted:
    p = Path(path).expanduser()
    kind = detect(p)
    if tokenizer and kind != "nanochat":
        raise ImportFailed("tokenizer: a tokenizer.pkl goes with nanochat checkpoints only")
    if kind == "nanochat":
        if meta_pkl:
            raise ImportFailed("meta: a meta.pkl goes with nanoGPT checkpoints only")
        return nanochat.convert_nanochat(p, Path(tokenizer).expanduser() if tokenizer else None)
    if kind != "nanogpt":
        if meta_pkl:
            raise ImportFailed("meta: a meta.pkl goes with nanoGPT checkpoints only")
        return HF_FAMILIES[kind](p)
    ckpt_path = p / "ckpt.pt" if p.is_dir() else p
    if meta_pkl is None and (ckpt_path.parent / "meta.pkl").is_file():
        meta_pkl = ckpt_path.parent / "meta.pkl"
    return nanogpt.convert_nanogpt(ckpt_path, Path(meta_pkl).expanduser() if meta_pkl else None)


def _os_reason(e: OSError) -> str:
    return f"{e.strerror} ({e.filename})" if e.strerror and e.filename else str(e)


def _converted(path: str | Path, meta_pkl: str | Path | None, tokenizer: str | Path | None) -> tuple[Converted, dict]:
    """convert and sample_check, every failure an ImportFailed naming what failed: a file that cannot be
    read (a folder without permission) or a model too large for this machine's memory is no traceback."""
    try:
        conv = convert(path, meta_pkl, tokenizer)
        return conv, sample_check(conv)
    except OSError as e:
        raise ImportFailed(f"{path} cannot be read: {_os_reason(e)}") from None
    except (MemoryError, RuntimeError) as e:  # torch's allocator fails with a RuntimeError
        if isinstance(e, RuntimeError) and "can't allocate memory" not in str(e):
            raise
        raise ImportFailed(f"{path} is too large to convert in this machine's memory") from None


def import_model(
    path: str | Path,
    name: str,
    data_dir: str | Path,
    meta_pkl: str | Path | None = None,
    command: str = "",
    tokenizer: str | Path | None = None,
) -> tuple[Path, dict]:
    """Convert, check and store; returns (checkpoint folder, summary). Atomic: the folder appears
    complete or not at all."""
    dest = new_model_folder(name, data_dir)
    t0 = time.time()
    conv, check = _converted(path, meta_pkl, tokenizer)
    tmp = dest.parent / f".{name}.importing-{os.getpid()}"
    meta = {
        "name": name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "final": True,
        "evals": [],
        "corpus": {"name": "unknown (imported)"},
        "command": command,
        **conv.meta.to_dict(),
        "import_check": check,
    }
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        ckpt.save(tmp, conv.model, meta, dtype=conv.dtype)
        ckpt.load(tmp)  # what the app will read: hashes, names and shapes
        os.replace(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):  # a data folder that cannot be written, a full disk
            raise ImportFailed(f"the checkpoint cannot be written under {dest.parent}: {_os_reason(e)}") from None
        if isinstance(e, ckpt.CheckpointError):
            raise ImportFailed(f"the checkpoint written does not read back: {e}") from None
        raise
    tok = conv.meta.tokenizer or {}
    summary = {
        "name": name,
        "checkpoint": str(dest),
        "source": (conv.meta.source or {})["kind"],
        "params": count_params(conv.model.cfg)["total"],
        "config": conv.model.cfg.to_dict(),
        "tokenizer": tok.get("name", tok["kind"]),
        **check,
        "seconds": round(time.time() - t0, 1),
    }
    return dest, summary


def import_series(path: str | Path, name: str, data_dir: str | Path, command: str = "") -> tuple[Path, dict]:
    """A run's step checkpoints stored as one series for /timeline (series.py), each step converted and
    checked as import_model does."""
    from .series import import_series as store

    def convert_one(step: Path) -> tuple[object, dict]:
        conv, check = _converted(step, None, None)
        return conv.model, {**conv.meta.to_dict(), "import_check": check}

    return store(path, name, data_dir, command, convert_one)
