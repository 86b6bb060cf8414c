"""What every importer shares: the error it raises, what a conversion gives, reading Hugging Face
folders (config.json and its checked fields, RoPE's settings, safetensors, shards, tokenizer.json with
tokenizer_config.json's BOS and chat template), a config's sizes checked against the tensors' shapes
before anything of those sizes is made (`check_layers`, `check_shapes`: a hostile config's million
layers cost nothing), copying tensors in by a name map (`fill` for GPT-2's, `hf_state` and `convert_hf`
for the families whose config.json is checked field by field: the LLaMA family, GPT-NeoX, Gemma,
Phi-3, OLMo 2, each with its `HFLayout`), and the check of a converted model on a sample text."""

import json
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from .. import checkpoint as ckpt
from ..gpt import GPT, GPTConfig, count_params
from ..tokenizers import HFEncoding, encoding_from_spec

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
GPT2_VOCAB = 50257
# the longest context a config may name: no tensor holds it where positions are turned (RoPE), so it is
# capped instead (the longest published, Qwen2.5-1M's, is 1,010,000); the KV cache is sized by it
MAX_CTX = 1 << 24
SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog. To be, or not to be, that is the question:\n"


class ImportFailed(ValueError):
    """The source cannot be imported; the message names the file, field or tensor (and is cut short
    where it quotes a hostile file's value at length: a config.json field of a million entries)."""

    MAX_CHARS = 2000

    def __init__(self, message: str) -> None:
        if len(message) > self.MAX_CHARS:
            message = message[: self.MAX_CHARS] + f"... ({len(message) - self.MAX_CHARS:,} more characters)"
        super().__init__(message)


@dataclass
class Converted:
    model: GPT
    meta: ckpt.CheckpointMeta  # tokenizer, source, ... (checkpoint.save adds the config)
    # how the weights are stored, one dtype or one per tensor (checkpoint.StoreDtype); computed in float32
    dtype: ckpt.StoreDtype = torch.float32


def contained(path: Path, root: Path | None = None) -> Path:
    """A file of a model folder (`root`, by default the file's own folder), as it may be read: where it
    is a link, it must lead to a file inside that folder, or (a Hugging Face cache's snapshot,
    snapshots/<rev>/<file> -> ../../blobs/<hash>) to the cache's blobs. A hostile folder's
    chat_template.jinja linked to a file elsewhere would otherwise be read at import and shown in
    every chat's text; so would a config, a tokenizer or weights."""
    root = path.parent if root is None else root
    try:
        real, home = path.resolve(), root.resolve()
    except (OSError, RuntimeError) as e:  # a loop of links
        raise ImportFailed(f"{path.name} in {root} cannot be followed: {e}") from None
    allowed = [home]
    if root.parent.name == "snapshots":
        allowed.append((root.parent.parent / "blobs").resolve())
    if not any(real.is_relative_to(a) for a in allowed):
        raise ImportFailed(
            f"{path.relative_to(root) if path.is_relative_to(root) else path.name} in {root} is a link to {real}, "
            f"outside the model folder; gptscope reads only the folder's own files"
        )
    return path


def read_json(path: Path) -> dict:
    try:
        d = json.loads(contained(path).read_text(encoding="utf-8"))
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
    except ImportFailed:
        raise  # it names its field already
    except ValueError as e:
        raise ImportFailed(f"{label}: {e}") from None


def hf_int(cfg: dict, *names: str, most: int | None = None) -> int:
    """config.json's first field of `names` that is set: a positive integer (at most `most`)."""
    for n in names:
        if n in cfg and cfg[n] is not None:
            v = cfg[n]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ImportFailed(f"config.json field {n} is {v!r}; it must be a positive integer")
            if most is not None and v > most:
                raise ImportFailed(f"config.json field {n} is {v:,}; gptscope reads at most {most:,}")
            return v
    raise ImportFailed(f"config.json has no field {names[0]}")


def check_fill(
    own: dict[str, tuple[int, ...]], shapes: dict[str, tuple[int, ...]], names: dict[str, tuple[str, bool]], source: str
) -> None:
    """fill's name map against shapes alone (`own`: the model's, `shapes`: the source's), naming any
    missing or misshapen tensor: with a model on the meta device and a file's header, nothing allocated."""
    for ours, (theirs, transposed) in names.items():
        if theirs not in shapes:
            raise ImportFailed(f"tensor {theirs} is missing from {source}")
        have, want = tuple(shapes[theirs]), own[ours]
        if (have[::-1] if transposed and len(have) == 2 else have) != want or (transposed and len(have) != 2):
            need = want[::-1] if transposed else want
            raise ImportFailed(f"tensor {theirs} in {source} has shape {have}; the config needs {need}")


def fill(model: GPT, tensors: dict[str, torch.Tensor], names: dict[str, tuple[str, bool]], source: str) -> None:
    """Copy the source tensors into the model by the name map, naming any missing or misshapen tensor."""
    own = {k: tuple(v.shape) for k, v in ckpt.weights_dict(model).items()}
    check_fill(own, {k: tuple(t.shape) for k, t in tensors.items()}, names, source)
    state = {}
    for ours, (theirs, transposed) in names.items():
        t = tensors[theirs]
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
        return load_file(str(contained(p)))
    except (SafetensorError, OSError) as e:
        raise ImportFailed(f"{p.name} is not a readable safetensors file: {e}") from None


INDEX = "model.safetensors.index.json"


def _weight_map(folder: Path) -> dict:
    wmap = read_json(folder / INDEX).get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise ImportFailed(f"{INDEX} has no weight_map (tensor name -> shard file)")
    return wmap


def read_hf_tensors(folder: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Every tensor of a Hugging Face folder: model.safetensors, or the shards its
    model.safetensors.index.json lists (each tensor exactly where the index says)."""
    if (folder / "model.safetensors").is_file():
        return load_safetensors(folder / "model.safetensors"), "model.safetensors"
    label, wmap = INDEX, _weight_map(folder)
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


# ---- sizes checked against the tensors before anything of those sizes is made ----------------------
# A config names sizes; the weights hold them. A 1 KB config.json naming a million layers (or a width of
# 10^6) cost gigabytes and minutes before a tensor was looked at: each size is checked against the
# tensors' shapes, read from the safetensors headers (nothing loaded), before a name map or a model is made.

Shapes = dict[str, tuple[int, ...]]


def safetensors_shapes(p: Path) -> Shapes:
    """Each tensor's shape in a safetensors file, read from its header: no tensor is loaded."""
    try:
        with safe_open(str(contained(p)), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (a safe_open has no __iter__)
    except (SafetensorError, OSError) as e:
        raise ImportFailed(f"{p.name} is not a readable safetensors file: {e}") from None


def hf_shapes(folder: Path) -> tuple[Shapes, str]:
    """Every tensor's shape in a Hugging Face folder (model.safetensors, or the shards of its index),
    and what to call where they are."""
    if (folder / "model.safetensors").is_file():
        return safetensors_shapes(folder / "model.safetensors"), "model.safetensors"
    shapes: Shapes = {}
    for shard in sorted({str(v) for v in _weight_map(folder).values()}):
        shapes.update(safetensors_shapes(plain_file(folder, shard, f"{INDEX} field weight_map")))
    return shapes, "the shards of " + INDEX


def check_layers(label: str, field: str, n_layer: int, shapes: Shapes, prefix: str, source: str) -> None:
    """The config's number of layers (`field` of `label`) against the layers the weights hold (tensors
    named <prefix><i>.*): a layer the config names must be there. (Layers beyond it are refused later,
    as tensors the config does not describe.) Nothing per layer is made before this passes."""
    layer = re.compile(re.escape(prefix) + r"(\d{1,9})\.")  # (a longer number is no layer: an extra tensor)
    have = {int(m.group(1)) for k in shapes if (m := layer.match(k))}
    if n_layer <= len(have) and all(i in have for i in range(n_layer)):
        return
    if not have:
        held = "no layers"
    elif have == set(range(len(have))):
        held = f"layers 0..{len(have) - 1}"
    else:
        held = f"no layer {next(i for i in range(n_layer) if i not in have)}"
    raise ImportFailed(f"{label} field {field} is {n_layer:,}, but {source} holds {held} ({prefix}N.*)")


# a tensor's shape as the config says it: its name, the shape, and the field (or fields) that give each axis
Want = tuple[str, tuple[int, ...], tuple[str, ...]]


def check_shapes(label: str, wants: list[Want], shapes: Shapes, source: str) -> None:
    """Tensors against the shapes the config gives them, naming the tensor and the config field of the
    axis that disagrees; a missing tensor is refused by name."""
    for name, want, fields in wants:
        have = shapes.get(name)
        if have is None:
            raise ImportFailed(f"tensor {name} is missing from {source}")
        if tuple(have) != want:
            axis = next((i for i, (h, w) in enumerate(zip(have, want, strict=False)) if h != w), None)
            why = f": its {fields[axis]} is {want[axis]:,}" if axis is not None else ""
            raise ImportFailed(f"tensor {name} in {source} has shape {tuple(have)}; {label} needs {want}{why}")


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


def new_model_folder(name: str, data_dir: str | Path) -> Path:
    """<data_dir>/models/<name> for an import, refused if the name is not valid or already taken."""
    if not NAME_RE.fullmatch(name or ""):
        raise ImportFailed(
            f"name {name!r} is not valid: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit"
        )
    dest = models_dir(data_dir) / name
    if dest.exists():
        raise ImportFailed(f"name: a model named {name!r} already exists at {dest}; choose another --name or delete it")
    return dest


# ---- Hugging Face families read field by field ------------------------------------------------------

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
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "chunk_size_feed_forward",
        "tokenizer_class",
    }
)
ROPE_KEYS = (
    "rope_type",
    "type",  # the older spelling of rope_type
    "rope_theta",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
    "short_factor",  # LongRoPE's (the next three)
    "long_factor",
    "attention_factor",
)
LONGROPE_KEYS = ("short_factor", "long_factor", "attention_factor")
PHI3_ORIGINAL_CTX = 4096  # Phi3Config's default original_max_position_embeddings, which transformers reads
# RoPE scalings, in words for a refusal (LongRoPE is computed for the families that pass longrope=True)
ROPE_NAMES = {
    "longrope": "LongRoPE (per-pair short and long factors past the original context: Phi-3-mini-128k, "
    "Phi-3.5-mini, Phi-4-mini)",
    "su": "LongRoPE under its older name 'su' (Phi-3's 128k models)",
    "yarn": "YaRN (frequencies stretched by band, attention scaled: Qwen's and DeepSeek's long-context models)",
    "dynamic": "dynamic NTK scaling (the base grown with the prompt's length)",
}


def hf_number(raw: dict, where: str, key: str, default: float | None = None, low: float = 0.0) -> float:
    """config.json's number `key` (in `where`, a prefix such as "rope_parameters."), above `low`."""
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= low:
        raise ImportFailed(f"config.json field {where}{key} is {v!r}; it must be a number above {low:g}")
    return float(v)


def hf_flag(raw: dict, key: str, default: bool = False) -> bool:
    v = raw.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ImportFailed(f"config.json field {key} is {v!r}; it must be true or false")
    return v


def hf_sizes(raw: dict, kv_heads: bool = True) -> dict[str, Any]:
    """The sizes every decoder's config.json gives under the same names (vocabulary, context, layers,
    heads, width, MLP width; with `kv_heads`, the key/value heads: the query heads' number when it
    names none), and no dropout at inference."""
    n_head = hf_int(raw, "num_attention_heads")
    sizes: dict[str, Any] = dict(
        vocab_size=hf_int(raw, "vocab_size"),
        n_ctx=hf_int(raw, "max_position_embeddings", most=MAX_CTX),
        n_layer=hf_int(raw, "num_hidden_layers"),
        n_head=n_head,
        d_model=hf_int(raw, "hidden_size"),
        d_mlp=hf_int(raw, "intermediate_size"),
        dropout=0.0,
    )
    if kv_heads:
        sizes["n_kv_head"] = (
            hf_int(raw, "num_key_value_heads") if raw.get("num_key_value_heads") is not None else n_head
        )
    return sizes


def check_fields(raw: dict, model_type: str, family: str, architecture: str, allowed: Collection[str]) -> None:
    """Every field of config.json is inert or one the family's reader reads (`allowed`), and the
    architecture is the family's causal LM; anything else is refused by name, so nothing is guessed."""
    unknown = sorted(set(raw) - HF_INERT_FIELDS - set(allowed))
    if unknown:
        raise ImportFailed(
            f"config.json field {unknown[0]} is not one gptscope reads for a {model_type} model; it may change "
            f"what the {family} model computes, so the import stops rather than guess"
        )
    arch = raw.get("architectures")
    if arch is not None and arch != [architecture]:
        raise ImportFailed(f"config.json field architectures is {arch!r}; gptscope reads {[architecture]}")


def check_values(raw: dict, wanted: dict[str, Any]) -> None:
    """Fields that must hold the one value gptscope computes (when present)."""
    for key, want in wanted.items():
        if raw.get(key, want) != want:
            raise ImportFailed(f"config.json field {key} is {raw.get(key)!r}; gptscope computes {want!r}")


def hf_rope(
    raw: dict, params: dict | None = None, where: str | None = None, partial: bool = False, longrope: bool = False
) -> dict:
    """GPTConfig's RoPE fields from config.json: rope_parameters (transformers 5) or rope_theta and
    rope_scaling (older files), whichever the file writes (or the `params` given, found at `where`).
    Scalings other than none, linear, llama3 and (where the family computes it: `longrope`, Phi-3)
    LongRoPE are refused, naming the field; so is a partial rotary factor unless the family turns part
    of each head (`partial`: GPT-NeoX, Phi-3)."""
    if params is None:
        if raw.get("rope_parameters") is not None and raw.get("rope_scaling") is not None:
            raise ImportFailed("config.json has both rope_parameters and rope_scaling; a model has one RoPE")
        where = "rope_parameters" if raw.get("rope_parameters") is not None else "rope_scaling"
        params = raw.get(where) or {}
    where = where or "rope_parameters"
    if not isinstance(params, dict):
        raise ImportFailed(f"config.json field {where} is {params!r}; it must be an object or null")
    kind = params.get("rope_type", params.get("type")) or "default"
    if longrope and kind == "su":  # transformers' Phi3Config renames the older 'su' to 'longrope'
        kind = "longrope"
    computed = ("default", "linear", "llama3") + (("longrope",) if longrope else ())
    if kind not in computed:
        raise ImportFailed(
            f"config.json field {where}.rope_type is {kind!r}: {ROPE_NAMES.get(kind, 'a RoPE scaling')}, which "
            f"gptscope does not compute {'for this family' if kind in ('longrope', 'su') else 'yet'} (it computes "
            f"RoPE unscaled ('default'), {', '.join(repr(k) for k in computed[1:])})"
        )
    unknown = sorted(set(params) - set(ROPE_KEYS))
    unknown += sorted(set(params) & set(LONGROPE_KEYS)) if kind != "longrope" else []
    if unknown:
        raise ImportFailed(f"config.json field {where}.{unknown[0]} is not a RoPE setting gptscope computes")
    if "rope_theta" in params and "rope_theta" in raw and params["rope_theta"] != raw["rope_theta"]:
        raise ImportFailed(f"config.json fields rope_theta and {where}.rope_theta differ")
    theta = hf_number({**raw, **params}, f"{where}." if "rope_theta" in params else "", "rope_theta", 10000.0)
    out: dict[str, Any] = {"pos": "rope", "rope_base": theta, **_partial_rotary(raw, params, where, partial)}
    if kind == "default":
        return out
    if kind == "longrope":
        return {**out, **_longrope(raw, params, where, out.get("rotary_dim"))}
    out.update(rope_scaling=kind, rope_factor=hf_number(params, f"{where}.", "factor", None, low=1.0 - 1e-12))
    if kind == "llama3":
        lo = hf_number(params, f"{where}.", "low_freq_factor")
        hi = hf_number(params, f"{where}.", "high_freq_factor", low=lo)
        ctx = params.get("original_max_position_embeddings")
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
            raise ImportFailed(
                f"config.json field {where}.original_max_position_embeddings is {ctx!r}; it must be a positive integer"
            )
        out.update(rope_low_freq_factor=lo, rope_high_freq_factor=hi, rope_original_ctx=ctx)
    return out


def _longrope(raw: dict, params: dict, where: str, rotary_dim: int | None) -> dict:
    """GPTConfig's LongRoPE fields, as transformers 5 reads a Phi-3 config.json: the short and long
    factors (one per rotary pair), the original context (the top-level original_max_position_embeddings,
    which Phi3Config always has, 4,096 by default, wins over the rope parameters' own copy: refused where
    they differ) and the attention factor, given or the paper's sqrt(1 + ln f / ln original) with f the
    given factor or max_position_embeddings / original (1 where f <= 1)."""
    label = f"config.json field {where}.rope_type is 'longrope': {ROPE_NAMES['longrope']}, which needs"
    hs = hf_int(raw, "head_dim") if raw.get("head_dim") is not None else None
    pairs = (rotary_dim or hs or hf_int(raw, "hidden_size") // hf_int(raw, "num_attention_heads")) // 2
    out: dict[str, Any] = {"rope_scaling": "longrope"}
    for key, field in (("short_factor", "rope_short_factor"), ("long_factor", "rope_long_factor")):
        v = params.get(key)
        numbers = v if isinstance(v, list) and len(v) == pairs else []
        if not numbers or not all(
            not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in numbers
        ):
            raise ImportFailed(
                f"{label} {where}.{key}: a list of {pairs} numbers above 0, one per rotary pair; "
                f"it is {'missing' if v is None else repr(v)}"
            )
        out[field] = tuple(float(x) for x in numbers)
    top, inner = raw.get("original_max_position_embeddings"), params.get("original_max_position_embeddings")
    ctx = PHI3_ORIGINAL_CTX if top is None else top
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 2:
        raise ImportFailed(f"config.json field original_max_position_embeddings is {ctx!r}; it must be an integer >= 2")
    if inner is not None and inner != ctx:
        raise ImportFailed(
            f"config.json fields original_max_position_embeddings ({top!r}, transformers' Phi-3 reads it, "
            f"{PHI3_ORIGINAL_CTX} when absent) and {where}.original_max_position_embeddings ({inner!r}) differ"
        )
    factor = hf_number(params, f"{where}.", "factor") if params.get("factor") is not None else None
    if factor is None:
        factor = hf_int(raw, "max_position_embeddings", most=MAX_CTX) / ctx
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(ctx))
    else:
        attention = hf_number(params, f"{where}.", "attention_factor")
    return {**out, "rope_original_ctx": ctx, "rope_factor": max(factor, 1.0), "rope_attention_factor": attention}


def _partial_rotary(raw: dict, params: dict, where: str, partial: bool) -> dict:
    """{"rotary_dim": r} for a partial rotary factor (r = the head size times it, as transformers
    rounds it down), {} for 1.0; refused where the family turns whole heads."""
    found = [(h, label) for h, label in ((params, f"{where}."), (raw, "")) if "partial_rotary_factor" in h]
    factors = {float(h["partial_rotary_factor"]) for h, _ in found if h["partial_rotary_factor"] is not None}
    if not factors or factors == {1.0}:
        return {}
    holder, label = found[0]
    if not partial:
        raise ImportFailed(
            f"config.json field {label}partial_rotary_factor is {holder['partial_rotary_factor']!r}; "
            f"gptscope turns every pair of a head (1.0)"
        )
    if len(factors) > 1:
        raise ImportFailed("config.json fields partial_rotary_factor and rope_parameters.partial_rotary_factor differ")
    factor = hf_number(holder, label, "partial_rotary_factor")
    hs = hf_int(raw, "head_dim") if raw.get("head_dim") is not None else None
    hs = hs or hf_int(raw, "hidden_size") // hf_int(raw, "num_attention_heads")
    rd = int(hs * factor)
    if factor > 1 or rd < 2 or rd % 2:
        raise ImportFailed(
            f"config.json field {label}partial_rotary_factor is {factor!r}: {rd} of a head's {hs} channels, "
            f"not an even number RoPE can turn"
        )
    return {"rotary_dim": rd} if rd != hs else {}


# a name map: gptscope parameter -> the Hugging Face tensors it is made of, each with the shape it must
# have and, where the family lays it out otherwise, a function that makes gptscope's tensor of it
Piece = tuple[str, tuple[int, ...]] | tuple[str, tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]


def hf_state(
    cfg: GPTConfig,
    names: dict[str, list[Piece]],
    tensors: dict[str, torch.Tensor],
    source: str,
    embed: str,
    buffers: re.Pattern | None = None,
    head: str = "lm_head.weight",
) -> tuple[dict[str, torch.Tensor], int]:
    """The model's state dict (float32) from the Hugging Face tensors by the name map (several pieces
    are stacked along the first axis), and how many numbers the file holds for it; a missing,
    misshapen, extra or untied tensor is refused by name. `embed`: the file's token embedding, which
    the unembedding (`head`) of a tied model must equal; `buffers`: tensors that are no parameters."""
    state, used = {}, set()
    for ours, parts in names.items():
        got = []
        for name, shape, *how in parts:
            t = tensors.get(name)
            if t is None:
                raise ImportFailed(f"tensor {name} is missing from {source}")
            if tuple(t.shape) != shape:
                raise ImportFailed(f"tensor {name} in {source} has shape {tuple(t.shape)}; config.json needs {shape}")
            if not t.is_floating_point():
                raise ImportFailed(f"tensor {name} in {source} has dtype {t.dtype}; weights must be floating point")
            got.append(how[0](t.float()) if how else t)
            used.add(name)
        state[ours] = (torch.cat(got) if len(got) > 1 else got[0]).float().contiguous()
    lm = tensors.get(head)
    if cfg.tie_weights and lm is not None:
        if not torch.equal(lm.float(), state["wte.weight"]):
            raise ImportFailed(
                f"tensor {head} differs from {embed}, but config.json says "
                "tie_word_embeddings; is config.json the one for these weights?"
            )
        used.add(head)
    extra = sorted(k for k in tensors if k not in used and not (buffers and buffers.match(k)))
    if extra:
        raise ImportFailed(
            f"{source} has tensors this config.json does not describe: {extra[:5]} (n_layer={cfg.n_layer}); "
            f"is config.json the one for these weights?"
        )
    n = sum(t.numel() for k, t in tensors.items() if k in used and not (cfg.tie_weights and k == head))
    return state, n


def read_chat_template(folder: Path, tok_cfg: dict) -> str | None:
    """The chat template: tokenizer_config.json's chat_template (a string, or the one named "default"
    of a list of named ones), or chat_template.jinja beside it (where transformers 5 writes it)."""
    t = tok_cfg.get("chat_template")
    if isinstance(t, list):  # [{"name": ..., "template": ...}, ...]
        named = {str(x.get("name")): x.get("template") for x in t if isinstance(x, dict)}
        t = named.get("default")
    if t is None and (folder / "chat_template.jinja").is_file():
        try:
            t = contained(folder / "chat_template.jinja").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ImportFailed(f"chat_template.jinja is not readable: {e}") from None
    if t is not None and not isinstance(t, str):
        raise ImportFailed(f"tokenizer_config.json field chat_template is {type(t).__name__}; it must be a string")
    return t


def _token_text(tok_cfg: dict, key: str) -> str | None:
    """tokenizer_config.json's bos_token / eos_token: a string, or an AddedToken's {"content": ...}."""
    v = tok_cfg.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    if v is not None and not isinstance(v, str):
        raise ImportFailed(f"tokenizer_config.json field {key} is {v!r}; it must be a token's text")
    return v


def _runs_with(folder: Path, tok_cfg: dict) -> dict:
    """What picks the class transformers 5 runs the tokenizer with, and that class's options
    (model/transformers5.py): config.json's model_type, tokenizer_config.json's tokenizer_class,
    legacy, add_prefix_space and unk_token."""
    raw = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    out = {"model_type": raw.get("model_type"), "unk_token": _token_text(tok_cfg, "unk_token")}
    for key, kind in (("tokenizer_class", str), ("legacy", bool), ("add_prefix_space", bool)):
        v = tok_cfg.get(key)
        if v is not None and not isinstance(v, kind):
            want = "a class name" if kind is str else "true or false"
            raise ImportFailed(f"tokenizer_config.json field {key} is {v!r}; it must be {want}")
        out[key] = v
    if out["model_type"] is not None and not isinstance(out["model_type"], str):
        raise ImportFailed(f"config.json field model_type is {out['model_type']!r}; it must be a string")
    return out


def hf_tokenizer(folder: Path, vocab_size: int, family: str = "Llama-family") -> dict:
    """The checkpoint's tokenizer spec: the folder's tokenizer.json, whole, read by `tokenizers`, and
    what tokenizer_config.json says about running it (add_bos_token, the BOS and EOS tokens' text, the
    chat template) when the folder has one."""
    p = folder / "tokenizer.json"
    if not p.is_file():
        raise ImportFailed(
            f"{folder} has no tokenizer.json; gptscope reads a {family} model's tokenizer from its "
            f"tokenizer.json (a SentencePiece tokenizer.model alone is not read)"
        )
    tok_cfg = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    add_bos = tok_cfg.get("add_bos_token")
    if add_bos is not None and not isinstance(add_bos, bool):
        raise ImportFailed(f"tokenizer_config.json field add_bos_token is {add_bos!r}; it must be true or false")
    config = {
        "add_bos_token": add_bos,
        "bos_token": _token_text(tok_cfg, "bos_token"),
        "eos_token": _token_text(tok_cfg, "eos_token"),
        "chat_template": read_chat_template(folder, tok_cfg),
        **_runs_with(folder, tok_cfg),
    }
    config = {k: v for k, v in config.items() if v is not None}
    try:
        text = contained(p).read_text(encoding="utf-8")
        enc = HFEncoding(text, name=folder.name, config=config)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ImportFailed(f"tokenizer.json is not readable: {e}") from None
    if enc.model_type not in ("BPE", "Unigram"):
        raise ImportFailed(f"tokenizer.json field model.type is {enc.model_type!r}; gptscope reads 'BPE' and 'Unigram'")
    if enc.n_vocab > vocab_size:
        raise ImportFailed(
            f"tokenizer.json has token ids up to {enc.n_vocab - 1:,} but config.json field vocab_size is "
            f"{vocab_size:,}: the tokenizer does not fit the model"
        )
    spec = {"kind": "huggingface", "name": folder.name, "json": text}
    return {**spec, "config": config} if config else spec


@dataclass(frozen=True)
class HFLayout:
    """Where a Hugging Face family keeps what convert_hf reads, and what it is called."""

    kind: str  # the source's kind in the checkpoint's meta ("huggingface-llama")
    family: str = "Llama-family"  # the family's name in messages
    embed: str = "model.embed_tokens.weight"  # the token embedding, (vocab_size, hidden_size)
    head: str = "lm_head.weight"  # the unembedding (equal to `embed` in a tied model)
    layers: str = "model.layers."  # layer i's tensors are <layers><i>.*
    # layer 0's tensors whose shapes tell the config's sizes: (name within the layer, the shape for a
    # config, the fields that give each axis); with the embedding, checked before anything is built
    first: tuple[tuple[str, Callable[[GPTConfig], tuple[int, ...]], tuple[str, ...]], ...] = ()
    buffers: re.Pattern | None = None  # tensors that are no parameters


# the LLaMA layout's layer 0 (Llama, Qwen, Mistral, Gemma, OLMo 2): W_Q, W_K and the MLP's up-projection
LLAMA_FIRST = (
    (
        "self_attn.q_proj.weight",
        lambda c: (c.n_head * c.d_head, c.d_model),
        ("num_attention_heads * head_dim", "hidden_size"),
    ),
    (
        "self_attn.k_proj.weight",
        lambda c: (c.n_kv_head * c.d_head, c.d_model),
        ("num_key_value_heads * head_dim", "hidden_size"),
    ),
    ("mlp.up_proj.weight", lambda c: (c.d_mlp, c.d_model), ("intermediate_size", "hidden_size")),
)


def check_hf_sizes(cfg: GPTConfig, layout: HFLayout, shapes: Shapes, source: str) -> None:
    """config.json's sizes against the tensors' shapes (the embedding's and layer 0's), naming the field
    that disagrees: before a name map or a model is made."""
    wants: list[Want] = [(layout.embed, (cfg.vocab_size, cfg.d_model), ("vocab_size", "hidden_size"))]
    wants += [(f"{layout.layers}0.{name}", shape(cfg), fields) for name, shape, fields in layout.first]
    check_shapes("config.json", wants, shapes, source)


def check_pieces(names: dict[str, list[Piece]], shapes: Shapes, source: str) -> None:
    """Every tensor of the name map is in the file's header with its shape, before any is loaded."""
    for parts in names.values():
        for name, shape, *_ in parts:
            have = shapes.get(name)
            if have is None:
                raise ImportFailed(f"tensor {name} is missing from {source}")
            if tuple(have) != shape:
                raise ImportFailed(f"tensor {name} in {source} has shape {tuple(have)}; config.json needs {shape}")


def convert_hf(
    folder: Path,
    config: Callable[[dict], GPTConfig],
    names: Callable[[GPTConfig], dict[str, list[Piece]]],
    layout: HFLayout,
) -> Converted:
    """A Hugging Face folder converted by its family's reader of config.json (`config`) and name map
    (`names`): the sizes checked against the tensors' shapes in the files' headers first (the number of
    layers before the config is read, the widths before the name map is made, every tensor of the map
    before one is loaded), then the tokenizer, the tensors (checked and counted), the model (weights in
    float32, stored in the file's own half precision when it has one: store_dtype)."""
    raw = read_json(folder / "config.json")
    shapes, source = hf_shapes(folder)
    check_layers("config.json", "num_hidden_layers", hf_int(raw, "num_hidden_layers"), shapes, layout.layers, source)
    cfg = config(raw)
    tokenizer = hf_tokenizer(folder, cfg.vocab_size, layout.family)
    check_hf_sizes(cfg, layout, shapes, source)
    name_map = names(cfg)  # as many entries as layers, and the layers are the file's
    check_pieces(name_map, shapes, source)
    tensors, source = read_hf_tensors(folder)
    state, n_params = hf_state(cfg, name_map, tensors, source, layout.embed, layout.buffers, layout.head)
    if n_params != count_params(cfg)["total"]:  # the two counts are written independently: a bug if they differ
        raise ImportFailed(
            f"{source} holds {n_params:,} parameters, but the config counts {count_params(cfg)['total']:,}"
        )
    stored = {t.dtype for t in tensors.values() if t.is_floating_point()}
    del tensors
    model = ckpt.empty_gpt(cfg)
    own = model.state_dict()
    for k, t in state.items():  # (assign=True below would take a tensor of any shape)
        if k not in own or own[k].shape != t.shape:
            raise ImportFailed(f"the name map gives {k} the shape {tuple(t.shape)}; the model has another (a bug)")
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_weights:  # assign=True replaced wte.weight's Parameter: tie the output layer to the new one
        model.lm_head.weight = model.wte.weight
    source_meta = {
        "kind": layout.kind,
        "path": str(folder),
        "model_type": raw["model_type"],
        "architectures": raw.get("architectures"),
        "name_or_path": raw.get("_name_or_path"),
        "params": n_params,
    }
    meta = ckpt.CheckpointMeta.from_dict({"tokenizer": tokenizer, "source": source_meta, "step": 0})
    return Converted(model.eval(), meta, store_dtype(state, name_map, stored))


def store_dtype(
    state: dict[str, torch.Tensor], names: dict[str, list[Piece]], stored: set[torch.dtype]
) -> ckpt.StoreDtype:
    """How a converted model is kept on disk: in the file's own half precision when it has one, except
    a tensor the import computed (a piece with a function: Gemma's gain 1 + w) that the half precision
    would round, kept in float32 (bfloat16 rounds a gain near 1 by up to 2^-8: 0.03-0.07 in Gemma's
    logits). Every tensor is computed in float32 when loaded."""
    half = next((dt for dt in (torch.bfloat16, torch.float16) if stored == {dt}), None)
    if half is None:
        return torch.float32
    made = [k for k, parts in names.items() if any(len(piece) > 2 for piece in parts)]
    exact = {k for k in made if not torch.equal(state[k].to(half).float(), state[k])}
    return {k: torch.float32 if k in exact else half for k in state} if exact else half
