"""What every importer shares: the error it raises, what a conversion gives, reading Hugging Face
folders (config.json, safetensors, shards), copying tensors in by a name map, and the check of a
converted model on a sample text."""

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from .. import checkpoint as ckpt
from ..gpt import GPT, GPTConfig
from ..tokenizers import encoding_from_spec

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
GPT2_VOCAB = 50257
SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog. To be, or not to be, that is the question:\n"


class ImportFailed(ValueError):
    """The source cannot be imported; the message names the file, field or tensor."""


@dataclass
class Converted:
    model: GPT
    meta: ckpt.CheckpointMeta  # tokenizer, source, ... (checkpoint.save adds the config)
    dtype: torch.dtype = torch.float32  # how the weights are stored (they are computed in float32)


def read_json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ImportFailed(f"{path.name} is not readable JSON: {e}") from None
    if not isinstance(d, dict):
        raise ImportFailed(f"{path.name} is not a JSON object")
    return d


def config_from(label: str, values: Callable[[], dict]) -> GPTConfig:
    """The one checked path from a family's config map to a GPTConfig: every key must be a GPTConfig
    field (GPTConfig.from_dict), and a value the map or GPTConfig refuses becomes ImportFailed
    prefixed with `label` (the map is built inside the check, so its own refusals read the same)."""
    try:
        return GPTConfig.from_dict(values())
    except ValueError as e:
        raise ImportFailed(f"{label}: {e}") from None


def hf_int(cfg: dict, *names: str) -> int:
    for n in names:
        if n in cfg and cfg[n] is not None:
            v = cfg[n]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ImportFailed(f"config.json field {n} is {v!r}; it must be a positive integer")
            return v
    raise ImportFailed(f"config.json has no field {names[0]}")


def fill(model: GPT, tensors: dict[str, torch.Tensor], names: dict[str, tuple[str, bool]], source: str) -> None:
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


def plain_file(folder: Path, name: object, label: str) -> Path:
    if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
        raise ImportFailed(f"{label} names {name!r}, not a plain file name in {folder}")
    p = folder / name
    if not p.is_file():
        raise ImportFailed(f"{label} names {name}, which is missing from {folder}")
    return p


def load_safetensors(p: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(p))
    except (SafetensorError, OSError) as e:
        raise ImportFailed(f"{p.name} is not a readable safetensors file: {e}") from None


def read_hf_tensors(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of a Hugging Face folder: model.safetensors, or the shards its
    model.safetensors.index.json lists (each tensor exactly where the index says)."""
    if (folder / "model.safetensors").is_file():
        return load_safetensors(folder / "model.safetensors"), "model.safetensors"
    label = "model.safetensors.index.json"
    wmap = read_json(folder / label).get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise ImportFailed(f"{label} has no weight_map (tensor name -> shard file)")
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted({str(v) for v in wmap.values()}):
        for k, v in load_safetensors(plain_file(folder, shard, f"{label} field weight_map")).items():
            if wmap.get(k) != shard:
                raise ImportFailed(f"tensor {k} is in {shard}, but {label} does not list it there")
            tensors[k] = v
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        raise ImportFailed(f"tensor {missing[0]} is listed in {label} but missing from {wmap[missing[0]]}")
    return tensors, "the shards of " + label


def sample_check(conv: Converted) -> dict:
    """Run the converted model once on a sample text: finite logits, and its loss there against the
    uniform guess (a trained model scores far below it)."""
    tok = conv.meta.tokenizer or {}
    enc = encoding_from_spec(tok)
    if tok["kind"] == "chars":
        text = "".join(c for c in SAMPLE_TEXT if c in set(tok["chars"])) or tok["chars"][0] * 8
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
