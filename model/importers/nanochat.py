"""nanochat (karpathy/nanochat): a checkpoint folder of `model_<step>.pt` (the state dict), `meta_<step>.json`
(its `model_config`) and the tokenizer nanochat saves (`tokenizer.pkl`, a pickled tiktoken Encoding).

The state dict is read with torch.load(weights_only=True) (the `_orig_mod.` prefix of a compiled
model dropped), bfloat16 tensors are computed in float32, and the tokenizer goes through an unpickler
that accepts one class, tiktoken's Encoding, and only as the data that rebuilds it: its name, split
pattern, mergeable ranks and special tokens, each checked (nothing in the file is run or imported).

nanochat's block changes between commits, and a checkpoint does not say which commit wrote it. This
module reads the architecture of the commits in SUPPORTED, whose forward passes are the same (nanochat's
gpt.py changed between them only in comments, initialisation and the optimizer): a config field or a
tensor these commits do not write is refused by name, never guessed at. Each of nanochat's pieces is a
switch of gptscope's GPT (model/gpt.py: the nanochat-tiny preset turns them all on); RoPE's turn by
-angle, the QK-norm with its fixed 1.2, the 4x ReLU^2 MLP, the smear over 24 channels, the value
embeddings' gates over 12, the backout at n_layer // 2 and the softcap of 15 are nanochat's constants in
those commits, written in its code, not in the checkpoint.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from ..bpe import BPEMerges
from ..checkpoint import CheckpointMeta
from ..gpt import GPT, NANOCHAT_EPS, GPTConfig, has_value_embed
from ..tokenizers import PACKAGED, encoding_from_spec
from .common import (
    MAX_CTX,
    Converted,
    ImportFailed,
    check_layers,
    check_shapes,
    config_from,
    contained,
    read_json,
)
from .nanogpt import unpickler_reason

# The nanochat commits whose checkpoints this module reads (karpathy/nanochat, short hashes, oldest first):
# a825e63 (2026-03-14) brought the smear and the backout; every commit after it up to 92d63d4 (2026-07-03)
# computes the same forward pass. tests/test_import_nanochat.py checks both ends against nanochat's own GPT.
SUPPORTED = ("a825e63", "92d63d4")
SUPPORTED_TEXT = "nanochat commits a825e63 (2026-03-14) to 92d63d4 (2026-07-03)"
MODEL_CONFIG = ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "window_pattern")
# nanochat's constants in those commits
ROPE_BASE, QK_SCALE, SMEAR_CHANNELS, VE_CHANNELS, SOFTCAP, PAD_TO = 100000.0, 1.2, 24, 12, 15.0, 64
STEP_RE = re.compile(r"model_(\d+)\.pt")


def find_step(folder: Path) -> int:
    """The last step saved in a checkpoint folder (nanochat's find_last_step)."""
    steps = [int(m.group(1)) for p in folder.iterdir() if (m := STEP_RE.fullmatch(p.name))]
    if not steps:
        raise ImportFailed(f"{folder} holds no model_<step>.pt")
    return max(steps)


def is_nanochat(path: Path) -> bool:
    folder = path if path.is_dir() else path.parent
    if path.is_file() and not STEP_RE.fullmatch(path.name):
        return False
    return any(STEP_RE.fullmatch(p.name) for p in folder.iterdir()) and any(folder.glob("meta_*.json"))


def find_tokenizer(folder: Path) -> Path:
    """tokenizer.pkl: beside the checkpoint, in its tokenizer/ folder, or where nanochat keeps it
    (<base dir>/tokenizer/, two levels above <base dir>/base_checkpoints/<tag>/)."""
    for p in (
        folder / "tokenizer.pkl",
        folder / "tokenizer" / "tokenizer.pkl",
        folder.parent.parent / "tokenizer" / "tokenizer.pkl",
    ):
        if p.is_file():
            return p
    raise ImportFailed(
        f"no tokenizer.pkl beside {folder}, in its tokenizer/ folder or in {folder.parent.parent / 'tokenizer'}; "
        "pass --tokenizer with the tokenizer.pkl nanochat saved"
    )


# ---- the tokenizer ---------------------------------------------------------------------------------


class _EncodingState:
    """Stands in for tiktoken.core.Encoding while unpickling: it keeps the state handed to it and runs nothing."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _TiktokenUnpickler(pickle.Unpickler):
    """Refuses every class but tiktoken's Encoding, which it replaces by _EncodingState: a pickle that
    names anything else (a function, os.system) is refused before any of it is run."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("tiktoken.core", "Encoding"):
            return _EncodingState
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a tokenizer.pkl holds only a tiktoken Encoding")


def read_tokenizer(path: Path, vocab_size: int) -> dict:
    """tokenizer.pkl -> a tokenizer spec (model/tokenizers.py's encoding_from_spec): a registered
    encoding by name, or nanochat's own BPE as its merges (each token of rank r is two tokens of lower
    rank) and special tokens."""
    try:
        obj = _TiktokenUnpickler(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise ImportFailed(f"{path.name} was refused (nothing in it was run): {e}") from None
    if not isinstance(obj, _EncodingState):
        raise ImportFailed(f"{path.name} does not hold a tiktoken Encoding")
    state = obj.state
    if isinstance(state, str):  # a registered encoding, pickled by its name (nanochat's from_pretrained)
        if state not in PACKAGED:
            raise ImportFailed(f"{path.name} names the encoding {state!r}; gptscope has {sorted(PACKAGED)}")
        spec: dict = {"kind": "tiktoken", "name": state}
    elif isinstance(state, dict):
        spec = _bpe_spec(path.name, state)
    else:
        raise ImportFailed(f"{path.name}: the Encoding's state is a {type(state).__name__}, not its fields")
    n = encoding_from_spec(spec).n_vocab
    if n != vocab_size:
        raise ImportFailed(f"{path.name} has {n:,} tokens but meta's model_config vocab_size is {vocab_size:,}")
    return spec


def _bpe_spec(label: str, state: dict) -> dict:
    unknown = sorted(set(state) - {"name", "pat_str", "mergeable_ranks", "special_tokens", "explicit_n_vocab"})
    if unknown:
        raise ImportFailed(f"{label}: the Encoding has field {unknown[0]!r}, which a tiktoken Encoding does not")
    pat, ranks, specials = state.get("pat_str"), state.get("mergeable_ranks"), state.get("special_tokens")
    if not isinstance(pat, str) or not isinstance(ranks, dict) or not isinstance(specials, dict):
        raise ImportFailed(f"{label}: the Encoding needs pat_str (text), mergeable_ranks and special_tokens (dicts)")
    if not all(isinstance(k, bytes) and isinstance(v, int) and not isinstance(v, bool) for k, v in ranks.items()):
        raise ImportFailed(f"{label}: mergeable_ranks must map bytes to integer ranks")
    by_rank = sorted(ranks, key=ranks.__getitem__)
    if [ranks[b] for b in by_rank] != list(range(len(ranks))) or by_rank[:256] != [bytes([i]) for i in range(256)]:
        raise ImportFailed(
            f"{label}: mergeable_ranks must be the 256 bytes in order (ranks 0-255), then merges 256, 257, ..."
        )
    merges = [(*_split(label, tok, ranks), 0) for tok in by_rank[256:]]  # (pair counts: not in the file)
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in specials.items()) or sorted(
        specials.values()
    ) != list(range(len(ranks), len(ranks) + len(specials))):
        raise ImportFailed(f"{label}: special_tokens must take the ids right after the mergeable ranks, one each")
    return BPEMerges(pat, merges, dict(specials)).to_dict()


def _split(label: str, token: bytes, ranks: dict[bytes, int]) -> tuple[int, int]:
    """The two tokens whose merge made `token`: byte-pair encoding of its bytes with only the merges
    ranked before it leaves exactly two parts (tiktoken's own rule)."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], limit))
        if ranks.get(parts[best] + parts[best + 1], limit) >= limit:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    if len(parts) != 2:
        raise ImportFailed(
            f"{label}: the token {token!r} (rank {limit}) is not the merge of two tokens ranked before it"
        )
    return ranks[parts[0]], ranks[parts[1]]


# ---- the model -------------------------------------------------------------------------------------


def nanochat_config(mc: dict, label: str) -> GPTConfig:
    """meta's model_config -> a GPTConfig with nanochat's switches and constants."""
    unknown = sorted(set(mc) - set(MODEL_CONFIG))
    if unknown:
        raise ImportFailed(
            f"{label} field model_config.{unknown[0]} is not one gptscope knows: {SUPPORTED_TEXT} write "
            f"only {', '.join(MODEL_CONFIG)}; a newer nanochat's checkpoint is refused rather than guessed at"
        )
    for k in MODEL_CONFIG:
        if k not in mc:
            raise ImportFailed(f"{label} lacks model_config.{k} ({SUPPORTED_TEXT} write it)")
        v = mc[k]
        if k == "window_pattern":
            if not isinstance(v, str) or not v or set(v.upper()) - set("SL"):
                raise ImportFailed(
                    f"{label} field model_config.window_pattern is {v!r}; nanochat's are made of S and L"
                )
        elif not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ImportFailed(f"{label} field model_config.{k} is {v!r}; it must be a positive integer")
    d, seq = mc["n_embd"], mc["sequence_len"]
    if seq > MAX_CTX:  # no tensor holds it (RoPE): capped, as the KV cache is sized by it
        raise ImportFailed(f"{label} field model_config.sequence_len is {seq:,}; gptscope reads at most {MAX_CTX:,}")
    if d % mc["n_head"] or d < SMEAR_CHANNELS:
        raise ImportFailed(
            f"{label} field model_config.n_embd is {d}: nanochat needs a multiple of n_head, at least {SMEAR_CHANNELS}"
        )
    short = -(-seq // 4 // 128) * 128  # nanochat: a quarter of the context, up to FA3's tile of 128
    return config_from(
        f"{label} model_config",
        lambda: dict(
            vocab_size=mc["vocab_size"], n_ctx=seq, n_layer=mc["n_layer"], n_head=mc["n_head"], n_kv_head=mc["n_kv_head"],
            d_model=d, d_mlp=4 * d, dropout=0.0, bias=False, tie_weights=False, ln_eps=NANOCHAT_EPS, pos="rope",
            rope_base=ROPE_BASE, rope_sign=-1, norm_type="rmsnorm", norm_gain=False, mlp="relu2", qk_norm=True,
            qk_norm_scale=QK_SCALE, embed_norm=True, smear=SMEAR_CHANNELS, x0_mix=True, backout=True,
            value_embed=VE_CHANNELS, softcap=SOFTCAP, window_pattern=mc["window_pattern"].upper(),
            # nanochat's window (left, 0) sees the `left` keys before the query and the query's own
            window=short + 1 if "S" in mc["window_pattern"].upper() else 0,
        ),
    )  # fmt: skip


def expected_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a nanochat checkpoint of this config holds, with its shape (the vocabulary padded to 64)."""
    V = -(-cfg.vocab_size // PAD_TO) * PAD_TO
    d, L, hs = cfg.d_model, cfg.n_layer, cfg.d_head
    q, kv = cfg.n_head * hs, cfg.n_kv_head * hs
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (V, d),
        "lm_head.weight": (V, d),
        "resid_lambdas": (L,),
        "x0_lambdas": (L,),
        "smear_gate.weight": (1, SMEAR_CHANNELS),
        "smear_lambda": (1,),
        "backout_lambda": (1,),
    }
    for i in range(L):
        h = f"transformer.h.{i}"
        shapes.update(
            {f"{h}.attn.c_q.weight": (q, d), f"{h}.attn.c_k.weight": (kv, d), f"{h}.attn.c_v.weight": (kv, d)}
        )
        shapes.update(
            {
                f"{h}.attn.c_proj.weight": (d, q),
                f"{h}.mlp.c_fc.weight": (4 * d, d),
                f"{h}.mlp.c_proj.weight": (d, 4 * d),
            }
        )
        if has_value_embed(cfg, i):
            shapes.update(
                {f"value_embeds.{i}.weight": (V, kv), f"{h}.attn.ve_gate.weight": (cfg.n_kv_head, VE_CHANNELS)}
            )
    return shapes


def check_sizes(sd: dict[str, torch.Tensor], cfg: GPTConfig, meta_label: str, label: str) -> None:
    """model_config's sizes against the tensors (its layers, the embedding's shape), naming the field,
    before anything per layer is made (check_tensors then checks every tensor): a meta_<step>.json
    naming a million layers cost a gigabyte and seconds before the tensors were looked at."""
    shapes = {k: tuple(t.shape) for k, t in sd.items()}
    check_layers(meta_label, "model_config.n_layer", cfg.n_layer, shapes, "transformer.h.", label)
    V = -(-cfg.vocab_size // PAD_TO) * PAD_TO
    embed = ("transformer.wte.weight", (V, cfg.d_model), (f"vocab_size padded to a multiple of {PAD_TO}", "n_embd"))
    check_shapes(f"{meta_label} model_config", [embed], shapes, label)


def check_tensors(sd: dict[str, torch.Tensor], cfg: GPTConfig, label: str) -> None:
    want = expected_shapes(cfg)
    extra = sorted(set(sd) - set(want))
    if extra:
        raise ImportFailed(f"tensor {extra[0]} in {label} is not one {SUPPORTED_TEXT} write; nothing is guessed for it")
    for name, shape in want.items():
        if name not in sd:
            raise ImportFailed(f"tensor {name} is missing from {label} ({SUPPORTED_TEXT} write it)")
        t = sd[name]
        if tuple(t.shape) != shape:
            raise ImportFailed(f"tensor {name} in {label} has shape {tuple(t.shape)}; model_config needs {shape}")
        if not t.is_floating_point():
            raise ImportFailed(f"tensor {name} in {label} has dtype {t.dtype}; weights must be floating point")
        if not torch.isfinite(t.float()).all():
            raise ImportFailed(f"tensor {name} in {label} holds NaN or inf")


def state_dict(sd: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """nanochat's tensors -> gptscope's names, in float32; the padded vocabulary rows cut off (nanochat
    slices the logits to vocab_size, and no token id reaches the other rows)."""
    V = cfg.vocab_size
    f = {k: v.float() for k, v in sd.items()}
    out = {
        "wte.weight": f["transformer.wte.weight"][:V],
        "lm_head.weight": f["lm_head.weight"][:V],
        "smear.gate.weight": f["smear_gate.weight"],
        "smear.lam": f["smear_lambda"],
        "backout_lambda": f["backout_lambda"],
    }
    for i in range(cfg.n_layer):
        h, b = f"transformer.h.{i}", f"blocks.{i}"
        out[f"{b}.resid_lambda"] = f["resid_lambdas"][i : i + 1]
        out[f"{b}.x0_lambda"] = f["x0_lambdas"][i : i + 1]
        # W_Q, W_K, W_V side by side, as gptscope's one c_attn holds them
        out[f"{b}.attn.c_attn.weight"] = torch.cat([f[f"{h}.attn.c_{w}.weight"] for w in "qkv"])
        out[f"{b}.attn.c_proj.weight"] = f[f"{h}.attn.c_proj.weight"]
        out[f"{b}.mlp.c_fc.weight"] = f[f"{h}.mlp.c_fc.weight"]
        out[f"{b}.mlp.c_proj.weight"] = f[f"{h}.mlp.c_proj.weight"]
        if has_value_embed(cfg, i):
            out[f"{b}.attn.value_embed.weight"] = f[f"value_embeds.{i}.weight"][:V]
            out[f"{b}.attn.ve_gate.weight"] = f[f"{h}.attn.ve_gate.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ImportFailed(
            f"{path.name} was refused without running any of it (torch.load weights_only=True): {unpickler_reason(e)}"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise ImportFailed(f"{path.name} is not a readable PyTorch checkpoint: {str(e).splitlines()[0]}") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise ImportFailed(f"{path.name} is not a nanochat model file: it must be a state dict (names -> tensors)")
    # torch.compile'd models save names with an "_orig_mod." prefix (nanochat's build_model drops it too)
    return {k.removeprefix("_orig_mod."): v for k, v in obj.items()}


def convert_nanochat(path: Path, tokenizer: Path | None = None) -> Converted:
    """A nanochat checkpoint folder (or one of its model_<step>.pt files) -> a gptscope GPT."""
    named = STEP_RE.fullmatch(path.name)
    folder, step = (path, find_step(path)) if path.is_dir() or named is None else (path.parent, int(named.group(1)))
    model_file = folder / f"model_{step:06d}.pt"
    meta_file = next((p for p in (folder / f"meta_{step:06d}.json", folder / f"meta_{step}.json") if p.is_file()), None)
    if not model_file.is_file() or meta_file is None:
        raise ImportFailed(
            f"{folder} needs model_{step:06d}.pt and meta_{step:06d}.json, as nanochat's save_checkpoint writes them"
        )
    meta = read_json(meta_file)
    mc = meta.get("model_config")
    if not isinstance(mc, dict):
        raise ImportFailed(f"{meta_file.name} has no model_config (nanochat's GPTConfig as a dict)")
    cfg = nanochat_config(mc, meta_file.name)
    sd = _load_state(contained(model_file))
    check_sizes(sd, cfg, meta_file.name, model_file.name)
    check_tensors(sd, cfg, model_file.name)
    tok_path = tokenizer or find_tokenizer(folder)
    spec = read_tokenizer(tok_path, cfg.vocab_size)
    model = GPT(cfg)
    model.load_state_dict(state_dict(sd, cfg), strict=True)
    source = {
        "kind": "nanochat",
        "path": str(model_file),
        "step": step,
        "model_config": dict(mc),
        "tokenizer_file": str(tok_path),
        "architecture": SUPPORTED_TEXT,
        "dtypes": sorted({str(t.dtype).removeprefix("torch.") for t in sd.values()}),
    }
    info: dict[str, Any] = {"tokenizer": spec, "source": source, "step": step}
    if isinstance(meta.get("step"), int):
        info["step"] = meta["step"]
    return Converted(model, CheckpointMeta.from_dict(info))
