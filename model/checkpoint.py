"""Checkpoints: safetensors weights + one JSON file that describes them.

A checkpoint is a folder:

    checkpoint.json                 config, tokenizer, corpus, step, evaluations, the command that
                                    made it, and the name + sha256 of every other file (a few
                                    tens of KB: listing checkpoints reads only this; an imported
                                    LLaMA-family model's tokenizer.json, kept whole, adds a few MB)
    weights-<sha12>.safetensors     the model's parameters (a tied matrix stored once)
    history-<sha12>.jsonl           one JSON line per update: loss, learning rate, gradient norms
    optimizer-<sha12>.safetensors   AdamW moments, only when saved for resuming
    head-<sha12>.safetensors        a fine-tuned classifier's W_y (model/finetune.py), only for one

Saving is atomic: each file goes to a new name made from its hash, is flushed to disk, and only
then is checkpoint.json replaced (temp file + fsync + os.replace). The JSON is the commit point:
a crash at any moment leaves either the old or the new checkpoint complete, never a mixture.
Loading never unpickles anything: safetensors holds plain tensors, and the JSON is JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .gpt import GPT, GPTConfig
from .tokenizers import AnyEncoding, encoding_from_spec

META_NAME = "checkpoint.json"
FORMAT = "gptscope-checkpoint"
MAX_WEIGHTS_BYTES = 2 * 1024**3


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


# the JSON kinds a known key may hold (null is always allowed: a key written as null stays null)
_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
_KINDS.update(dict=(dict,), list=(list,), history=(str, list))


@dataclass
class CheckpointMeta:
    """checkpoint.json, one attribute per key it may hold; read and checked in one place
    (`CheckpointMeta.from_dict`, called by `read_meta`) and written back by `to_dict` as the same
    JSON: the keys in the order they were read (or set), keys this class does not know kept in
    `extra`, so nothing on disk is lost and a loaded-then-saved checkpoint.json is byte-identical.
    None means "absent" (a key read as null stays null)."""

    # what `save` adds: the file format, its version, and GPTConfig.to_dict()
    format: str | None = field(default=None, metadata={"kind": "str"})
    version: int | None = field(default=None, metadata={"kind": "int"})
    config: dict | None = field(default=None, metadata={"kind": "dict"})
    name: str | None = field(default=None, metadata={"kind": "str"})  # the model's name ("model" when absent)
    created: str | None = field(default=None, metadata={"kind": "str"})  # ISO time the trainer wrote it
    tokenizer: dict | None = field(default=None, metadata={"kind": "dict"})  # a spec for encoding_from_spec
    corpus: dict | None = field(default=None, metadata={"kind": "dict"})  # name, tokens, split of the text
    train_config: dict | None = field(default=None, metadata={"kind": "dict"})  # model/train.py's TrainConfig
    step: int | None = field(default=None, metadata={"kind": "int"})  # updates taken
    final: bool | None = field(default=None, metadata={"kind": "bool"})  # False: a snapshot mid-run
    schedule: dict | None = field(default=None, metadata={"kind": "dict"})  # the learning-rate schedule used
    evals: list | None = field(default=None, metadata={"kind": "list"})  # {step, val_loss, train_loss} dicts
    uniform_loss: float | None = field(default=None, metadata={"kind": "float"})  # ln(vocab_size)
    reference_losses: dict | None = field(default=None, metadata={"kind": "dict"})  # unigram and bigram loss
    device: str | None = field(default=None, metadata={"kind": "str"})  # where it was trained
    world_size: int | None = field(default=None, metadata={"kind": "int"})  # processes that trained it
    torch: str | None = field(default=None, metadata={"kind": "str"})  # torch.__version__ when trained
    precision: str | None = field(default=None, metadata={"kind": "str"})  # the arithmetic training ran in
    command: str | None = field(default=None, metadata={"kind": "str"})  # the command that made it
    train_seconds: float | None = field(default=None, metadata={"kind": "float"})
    source: dict | None = field(default=None, metadata={"kind": "dict"})  # an imported model's origin ({kind, ...})
    classifier: dict | None = field(default=None, metadata={"kind": "dict"})  # model/finetune.py's labels
    # the other files, by name and sha256 (history: version 1 kept the records themselves, a list)
    weights: str | None = field(default=None, metadata={"kind": "str"})
    weights_sha256: str | None = field(default=None, metadata={"kind": "str"})
    history: str | list | None = field(default=None, metadata={"kind": "history"})
    history_sha256: str | None = field(default=None, metadata={"kind": "str"})
    optimizer: str | None = field(default=None, metadata={"kind": "str"})
    optimizer_sha256: str | None = field(default=None, metadata={"kind": "str"})
    head: str | None = field(default=None, metadata={"kind": "str"})
    head_sha256: str | None = field(default=None, metadata={"kind": "str"})
    extra: dict[str, Any] = field(default_factory=dict, metadata={"kind": ""})  # keys not listed above
    order: list[str] = field(default_factory=list, repr=False, metadata={"kind": ""})  # keys as read

    @classmethod
    def known(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.metadata["kind"])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: object = "checkpoint meta") -> CheckpointMeta:
        """The typed meta of a checkpoint.json object; CheckpointError names a key of the wrong kind."""
        if isinstance(d, CheckpointMeta):
            return d.copy()
        if not isinstance(d, Mapping):
            raise CheckpointError(f"{where} is a {type(d).__name__}, not a JSON object")
        kinds = {f.name: f.metadata["kind"] for f in fields(cls) if f.metadata["kind"]}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in d.items():
            if k not in kinds:
                extra[k] = v
                continue
            kind = kinds[k]
            if v is not None and (not isinstance(v, _KINDS[kind]) or (kind != "bool" and isinstance(v, bool))):
                raise CheckpointError(f"{where}: {k!r} must be {kind}, not {type(v).__name__} ({v!r:.60})")
            values[k] = v
        return cls(**values, extra=extra, order=list(d))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in the order read or set (a None never read is left out)."""
        known, out = set(self.known()), {}
        for k in [*self.order, *self.known(), *self.extra]:
            if k in out:
                continue
            if k in self.extra:
                out[k] = self.extra[k]
            elif k in known and (getattr(self, k) is not None or k in self.order):
                out[k] = getattr(self, k)
        return out

    def copy(self, **changes: Any) -> CheckpointMeta:
        """A copy with some keys changed (new keys go at the end, as dict.update would put them)."""
        return CheckpointMeta.from_dict({**self.to_dict(), **changes})

    def encoding(self) -> AnyEncoding:
        if self.tokenizer is None:
            raise CheckpointError("checkpoint meta has no tokenizer")
        return encoding_from_spec(self.tokenizer, name=self.name or "model")


@dataclass
class Checkpoint:
    model: GPT
    meta: CheckpointMeta
    path: Path | None = None
    optimizer_state: dict[str, torch.Tensor] = field(default_factory=dict)
    history: list[dict] | None = None  # per-update records; read from the folder on first use
    head: dict[str, torch.Tensor] = field(default_factory=dict)  # a classifier's W_y and bias

    def __post_init__(self) -> None:
        if not isinstance(self.meta, CheckpointMeta):
            self.meta = CheckpointMeta.from_dict(self.meta)

    def read_history(self) -> list[dict]:
        if self.history is None:
            self.history = read_history(self.path, self.meta) if self.path else []
        return self.history

    @property
    def config(self) -> GPTConfig:
        return self.model.cfg

    def encoding(self) -> AnyEncoding:
        return self.meta.encoding()


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


# how weights are stored: one dtype for every floating-point tensor, or one per name (an imported
# model's tensors in the file's half precision, those the import computed, such as Gemma's 1 + w gains,
# in float32); None, or a name the mapping lacks: as the model holds it (float32)
StoreDtype = torch.dtype | Mapping[str, torch.dtype] | None


def weights_dict(model: GPT, dtype: StoreDtype = None) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    if model.cfg.tie_weights:
        sd.pop("lm_head.weight", None)  # the same tensor as wte.weight

    def stored(k: str, v: torch.Tensor) -> torch.Tensor:
        dt = dtype.get(k) if isinstance(dtype, Mapping) else dtype
        return v.to(dt) if dt is not None and v.is_floating_point() else v

    return {k: stored(k, v).detach().cpu().contiguous() for k, v in sd.items()}


def _write_hashed(folder: Path, meta: dict, key: str, suffix: str, blob: bytes | None) -> None:
    """Write blob as <key>-<sha12><suffix> and record its name and sha256 under meta[key]; or,
    with no blob, drop the key."""
    meta.pop(key, None)
    meta.pop(f"{key}_sha256", None)
    if blob is None:
        return
    sha = hashlib.sha256(blob).hexdigest()
    meta[key], meta[f"{key}_sha256"] = f"{key}-{sha[:12]}{suffix}", sha
    _fsync_write(folder / meta[key], blob)


def history_lines(history: list[dict]) -> bytes:
    return "".join(json.dumps(h, separators=(",", ":")) + "\n" for h in history).encode("utf-8")


def save(
    path: str | Path,
    model: GPT,
    meta: CheckpointMeta | Mapping[str, Any],
    optimizer_state: dict[str, torch.Tensor] | None = None,
    dtype: StoreDtype = None,
    history: list[dict] | None = None,
    head: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write a checkpoint folder atomically; returns the folder. `dtype`: how the weights are stored
    (StoreDtype; loaded, every one is float32). `head`: a classifier's extra tensors."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    # the JSON is built as a plain dict here: the same keys, in the same order, as before the typed meta
    meta = {
        **(meta.to_dict() if isinstance(meta, CheckpointMeta) else meta),
        "format": FORMAT,
        "version": 2,
        "config": model.cfg.to_dict(),
    }
    _write_hashed(
        folder, meta, "weights", ".safetensors", st_save(weights_dict(model, dtype), metadata={"format": FORMAT})
    )
    _write_hashed(folder, meta, "history", ".jsonl", history_lines(history) if history else None)
    _write_hashed(
        folder,
        meta,
        "optimizer",
        ".safetensors",
        st_save({k: v.detach().cpu().contiguous() for k, v in optimizer_state.items()}) if optimizer_state else None,
    )
    _write_hashed(
        folder,
        meta,
        "head",
        ".safetensors",
        st_save({k: v.detach().cpu().contiguous() for k, v in head.items()}) if head else None,
    )
    _fsync_dir(folder)
    _fsync_write(folder / META_NAME, json.dumps(meta, indent=1).encode("utf-8"))
    _fsync_dir(folder)
    keep = {meta.get(k) for k in ("weights", "history", "optimizer", "head")}
    for old in [
        *folder.glob("weights-*.safetensors"),
        *folder.glob("history-*.jsonl"),
        *folder.glob("optimizer-*.safetensors"),
        *folder.glob("head-*.safetensors"),
    ]:
        if old.name not in keep:
            old.unlink(missing_ok=True)
    for tmp in folder.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    return folder


def read_hashed(folder: Path, name: object, sha: object, label: str, meta_name: str = META_NAME) -> bytes:
    """The bytes of a file named in checkpoint.json (or `meta_name`: model/sae.py's folders use it
    too), checked against its recorded sha256 (name and sha as the JSON has them: anything, or
    missing)."""
    if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
        raise CheckpointError(f"{label} file name {name!r} is not a plain file name")
    p = folder / name
    if not p.is_file():
        raise CheckpointError(f"{label} file {name} is missing from {folder}")
    if p.stat().st_size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(f"{label} file {name} is larger than {MAX_WEIGHTS_BYTES:,} bytes")
    blob = p.read_bytes()
    if hashlib.sha256(blob).hexdigest() != sha:
        raise CheckpointError(f"{label} file {name} does not match the sha256 in {meta_name} (truncated or altered)")
    return blob


def read_history(path: str | Path, meta: CheckpointMeta | Mapping[str, Any]) -> list[dict]:
    """The per-update records of a checkpoint (empty when it has none)."""
    if not isinstance(meta, CheckpointMeta):
        meta = CheckpointMeta.from_dict(meta)
    if isinstance(meta.history, list):  # version 1 kept them inside checkpoint.json
        return meta.history
    if not meta.history:
        return []
    blob = read_hashed(Path(path), meta.history, meta.history_sha256, "history")
    try:
        return [json.loads(line) for line in blob.decode("utf-8").splitlines() if line]
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"history file {meta.history} is not JSON lines: {e}") from None


def read_tensors(
    folder: Path, name: object, sha: object, label: str, meta_name: str = META_NAME
) -> dict[str, torch.Tensor]:
    blob = read_hashed(folder, name, sha, label, meta_name)
    try:
        return st_load(blob)
    except Exception as e:
        raise CheckpointError(f"{label} file {name} is not a valid safetensors file: {e}") from None


def read_format_json(
    folder: str | Path,
    meta_name: str,
    fmt: str,
    noun: str,
    error: type[Exception] = CheckpointError,
    files: bool = False,
) -> dict:
    """A gptscope folder's JSON (a checkpoint's, an SAE's...), checked to be an object of format `fmt`
    (with a files table of sha256s when `files`); `error` says why not."""
    p = Path(folder) / meta_name
    if not p.is_file():
        raise error(f"{folder} has no {meta_name}; it is not a gptscope {noun}")
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{p} is not valid JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt or (files and not isinstance(meta.get("files"), dict)):
        raise error(f"{p} is not a {fmt} file")
    return meta


def read_meta(path: str | Path) -> CheckpointMeta:
    """checkpoint.json, checked: the one place a checkpoint's meta is read from disk."""
    meta = read_format_json(path, META_NAME, FORMAT, "checkpoint")
    return CheckpointMeta.from_dict(meta, where=Path(path) / META_NAME)


class _NoInit(torch.overrides.TorchFunctionMode):
    """Skips every weight initialisation, in this thread only (a mode is per thread)."""

    SKIP = frozenset(
        [
            *(getattr(torch.nn.init, n) for n in ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_")),
            *(getattr(torch.nn.init, n) for n in ("zeros_", "ones_", "constant_")),
            *(getattr(torch.Tensor, n) for n in ("normal_", "uniform_", "zero_", "fill_")),
        ]
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SKIP:  # the tensor to initialise, as nn.init or Tensor passes it
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


def empty_gpt(cfg: GPTConfig) -> GPT:
    """A GPT of cfg on the meta device, with no memory and no initialisation: for weights about to be
    replaced (load_state_dict(..., assign=True)). On the meta device each init would still run
    torch's Python reference of its op, and the first of them imports torch._dynamo: 2.7 s of a
    process's first checkpoint load (the app's start)."""
    with torch.device("meta"), _NoInit():
        return GPT(cfg)


# Weights loaded under inference_mode (a request's thread, a test's fixture) would be inference tensors,
# which no gradient may pass through (the training lessons, edge attribution): a model is always
# loaded with it off.
@torch.inference_mode(False)
def load(path: str | Path, device: str | torch.device = "cpu", with_optimizer: bool = False) -> Checkpoint:
    folder = Path(path)
    meta = read_meta(folder)
    try:
        if meta.config is None:
            raise KeyError("config")
        cfg = GPTConfig.from_dict(meta.config)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"bad model config in {folder / META_NAME}: {e}") from None
    tensors = read_tensors(folder, meta.weights, meta.weights_sha256, "weights")
    model = empty_gpt(cfg)
    expected = {k: v for k, v in model.state_dict().items() if not (cfg.tie_weights and k == "lm_head.weight")}
    missing, extra = set(expected) - set(tensors), set(tensors) - set(expected)
    if missing or extra:
        raise CheckpointError(
            f"weights do not fit the config: missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}"
        )
    for k, v in tensors.items():
        if v.shape != expected[k].shape:
            raise CheckpointError(f"weight {k} has shape {tuple(v.shape)}, the config needs {tuple(expected[k].shape)}")
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False, assign=True)
    del tensors
    if cfg.tie_weights:  # assign=True replaced wte.weight's Parameter: tie the output layer to the new one
        model.lm_head.weight = model.wte.weight
    model.to(device).eval()
    opt = {}
    if with_optimizer and meta.optimizer:
        opt = read_tensors(folder, meta.optimizer, meta.optimizer_sha256, "optimizer")
    head = read_tensors(folder, meta.head, meta.head_sha256, "head") if meta.head else {}
    return Checkpoint(model, meta, folder, opt, head=head)
