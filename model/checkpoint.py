"""Checkpoints: safetensors weights + one JSON file that describes them.

A checkpoint is a folder:

    checkpoint.json                 config, tokenizer, corpus, step, loss and LR history, the
                                    command that made it, and the name + sha256 of the weights
    weights-<sha12>.safetensors     the model's parameters (a tied matrix stored once)
    optimizer-<sha12>.safetensors   AdamW moments, only when saved for resuming

Saving is atomic: the weights go to a new file named by their hash, are flushed to disk, and only
then is checkpoint.json replaced (temp file + fsync + os.replace). The JSON is the commit point:
a crash at any moment leaves either the old or the new checkpoint complete, never a mixture.
Loading never unpickles anything: safetensors holds plain tensors, and the JSON is JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .gpt import GPT, GPTConfig
from .tokenizers import encoding_from_spec

META_NAME = "checkpoint.json"
FORMAT = "gptscope-checkpoint"
MAX_WEIGHTS_BYTES = 2 * 1024**3


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


@dataclass
class Checkpoint:
    model: GPT
    meta: dict
    path: Path | None = None
    optimizer_state: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def config(self) -> GPTConfig:
        return self.model.cfg

    def encoding(self):
        return encoding_from_spec(self.meta["tokenizer"], name=self.meta.get("name", "model"))


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def weights_dict(model: GPT, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    if model.cfg.tie_weights:
        sd.pop("lm_head.weight", None)  # the same tensor as wte.weight
    return {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().cpu().contiguous()
            for k, v in sd.items()}


def save(path: str | Path, model: GPT, meta: dict, optimizer_state: dict[str, torch.Tensor] | None = None,
         dtype: torch.dtype | None = None) -> Path:
    """Write a checkpoint folder atomically; returns the folder."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    blob = st_save(weights_dict(model, dtype), metadata={"format": FORMAT})
    sha = hashlib.sha256(blob).hexdigest()
    weights_name = f"weights-{sha[:12]}.safetensors"
    _fsync_write(folder / weights_name, blob)
    meta = {**meta, "format": FORMAT, "version": 1, "config": model.cfg.to_dict(),
            "weights": weights_name, "weights_sha256": sha}
    if optimizer_state:
        oblob = st_save({k: v.detach().cpu().contiguous() for k, v in optimizer_state.items()})
        osha = hashlib.sha256(oblob).hexdigest()
        meta["optimizer"] = f"optimizer-{osha[:12]}.safetensors"
        meta["optimizer_sha256"] = osha
        _fsync_write(folder / meta["optimizer"], oblob)
    else:
        meta.pop("optimizer", None)
        meta.pop("optimizer_sha256", None)
    _fsync_dir(folder)
    _fsync_write(folder / META_NAME, json.dumps(meta, indent=1).encode("utf-8"))
    _fsync_dir(folder)
    keep = {weights_name, meta.get("optimizer")}
    for old in list(folder.glob("weights-*.safetensors")) + list(folder.glob("optimizer-*.safetensors")):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    for tmp in folder.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    return folder


def _read_tensors(folder: Path, name: str, sha: str, label: str) -> dict[str, torch.Tensor]:
    if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
        raise CheckpointError(f"{label} file name {name!r} is not a plain file name")
    p = folder / name
    if not p.is_file():
        raise CheckpointError(f"{label} file {name} is missing from {folder}")
    if p.stat().st_size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(f"{label} file {name} is larger than {MAX_WEIGHTS_BYTES:,} bytes")
    blob = p.read_bytes()
    if hashlib.sha256(blob).hexdigest() != sha:
        raise CheckpointError(f"{label} file {name} does not match the sha256 in {META_NAME} (truncated or altered)")
    try:
        return st_load(blob)
    except Exception as e:  # noqa: BLE001 - any parse failure means a bad file
        raise CheckpointError(f"{label} file {name} is not a valid safetensors file: {e}") from None


def read_meta(path: str | Path) -> dict:
    folder = Path(path)
    meta_path = folder / META_NAME
    if not meta_path.is_file():
        raise CheckpointError(f"{folder} has no {META_NAME}; it is not a gptscope checkpoint")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{meta_path} is not valid JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path} is not a {FORMAT} file")
    return meta


def load(path: str | Path, device: str | torch.device = "cpu", with_optimizer: bool = False) -> Checkpoint:
    folder = Path(path)
    meta = read_meta(folder)
    try:
        cfg = GPTConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"bad model config in {folder / META_NAME}: {e}") from None
    tensors = _read_tensors(folder, meta.get("weights"), meta.get("weights_sha256"), "weights")
    model = GPT(cfg)
    expected = weights_dict(model)
    missing, extra = set(expected) - set(tensors), set(tensors) - set(expected)
    if missing or extra:
        raise CheckpointError(f"weights do not fit the config: missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}")
    for k, v in tensors.items():
        if v.shape != expected[k].shape:
            raise CheckpointError(f"weight {k} has shape {tuple(v.shape)}, the config needs {tuple(expected[k].shape)}")
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
    model.to(device).eval()
    opt = {}
    if with_optimizer and meta.get("optimizer"):
        opt = _read_tensors(folder, meta["optimizer"], meta.get("optimizer_sha256"), "optimizer")
    return Checkpoint(model, meta, folder, opt)
