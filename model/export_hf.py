"""A gptscope model written out as a Hugging Face folder that transformers computes exactly: the way back
out of the app, the import (model/importers) run in reverse.

Which class: GPT-2's block (learned positions, LayerNorm before each sublayer, GELU MLP, biases)
becomes GPT2LMHeadModel; the LLaMA-style block (RoPE, RMSNorm, SwiGLU, grouped-query attention)
LlamaForCausalLM, or Qwen2ForCausalLM (biases on W_Q, W_K, W_V only), Qwen3ForCausalLM (q/k norm per
head) or MistralForCausalLM (a sliding window) where the model has that family's switch. The folder:
config.json (the older spelling, rope_theta and rope_scaling, which transformers 4 and 5 both read),
model.safetensors (float32, the names and layouts of that class: GPT-2's Conv1D weights transposed,
W_Q, W_K, W_V and the gate/up projections split), generation_config.json, tokenizer.json (gptscope's
byte-level BPE as a `tokenizers` BPE with its merges in order, special tokens added; an imported
model's own file) and tokenizer_config.json.

Nothing is written that computes something else: before the folder is kept, the family's own importer
reads its config.json back, and every switch of the model must come back equal (training-only
settings aside); a switch no family computes (nanochat's block, Gemma's, a mixture of experts, ...)
is refused by name, the folder removed. Pure torch and JSON; no web code."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import Any

import torch

from .config import GPTConfig
from .export_families import FAMILY_WRITERS, CannotWrite, Writer, rope_fields
from .tokenizers import HFEncoding, NanochatEncoding
from .transformers5 import BACKEND

TRAINING_ONLY = frozenset({"dropout", "aux_loss_weight"})  # change nothing a forward pass computes
FORMAT = "hf"


class ExportRefused(ValueError):
    """The model cannot be written as a folder a transformers class computes exactly; names the switch."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


GPT2_BLOCK = {"pos": "learned", "norm": "pre", "norm_type": "layernorm", "mlp": "gelu", "bias": True}


def _llama_type(cfg: GPTConfig) -> str:
    """Which LLaMA-family class has the model's attention: Qwen3's q/k norm, Qwen2's biases on W_Q, W_K,
    W_V alone, Mistral's window, else Llama."""
    if cfg.qk_norm and not cfg.qk_norm_all:
        return "qwen3"
    if cfg.qkv_bias and not cfg.attn_out_bias:
        return "qwen2"
    return "mistral" if cfg.window else "llama"


def candidates(cfg: GPTConfig, prefer: str | None = None) -> list[Writer]:
    """The classes to try, the likeliest first: the family an imported model came from (`prefer`, its
    model_type), then GPT-2's or the LLaMA family's block, then the others."""
    every = (GPT2, *LLAMAS.values(), *FAMILY_WRITERS)
    first = GPT2 if all(getattr(cfg, k) == v for k, v in GPT2_BLOCK.items()) else LLAMAS[_llama_type(cfg)]
    order = [w for w in every if w.model_type == prefer] + [first]
    return [*dict.fromkeys([*order, *every])]


def mismatches(cfg: GPTConfig, fam: Writer, ids: dict[str, int | None] | None = None) -> list[tuple[str, Any, Any]]:
    """(switch, the model's value, what the class reads) for each switch the written config.json would
    not give back; one entry naming what stops the writer or the reader, where either refuses."""
    try:
        back = fam.reader()(config_json(cfg, fam, ids or {}))
    except CannotWrite as e:
        return [(e.field, getattr(cfg, e.field, None), str(e))]
    except ValueError as e:  # the importer's ImportFailed, or GPTConfig's own check
        return [("config", None, str(e))]
    out = []
    for f in fields(GPTConfig):
        if f.name not in TRAINING_ONLY and _canon(cfg, f.name) != _canon(back, f.name):
            out.append((f.name, _canon(cfg, f.name), _canon(back, f.name)))
    return out


def family_of(cfg: GPTConfig, prefer: str | None = None) -> Writer:
    """The transformers class that computes this model exactly: the first candidate whose importer reads
    every switch back from the config.json it would be written with; else ExportRefused naming the
    first switch the nearest class (the one it differs from in fewest) would compute otherwise."""
    if cfg.n_expert:
        raise ExportRefused(
            "n_expert", "a mixture of experts has no transformers class among the families gptscope writes"
        )
    tried = []
    for fam in candidates(cfg, prefer):
        miss = mismatches(cfg, fam)
        if not miss:
            return fam
        tried.append((len(miss), fam, miss[0]))
    _, fam, (field, ours, theirs) = min(tried, key=lambda x: x[0])
    if field == "config":
        raise ExportRefused(
            "config",
            f"no transformers class computes this model; the nearest, {fam.architecture}, refuses it: {theirs}",
        )
    raise ExportRefused(
        field,
        f"the model's {field} is {ours!r}; {fam.architecture}, the nearest class that computes such a block, "
        f"would compute {theirs!r}: no transformers class computes this model exactly",
    )


# --- config.json --------------------------------------------------------------------------------


def _gpt2_config(cfg: GPTConfig) -> dict[str, Any]:
    return {
        "n_positions": cfg.n_ctx,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": cfg.d_mlp,
        "activation_function": "gelu_new" if cfg.gelu == "tanh" else "gelu",
        "layer_norm_epsilon": cfg.ln_eps,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }


def _llama_config(cfg: GPTConfig, model_type: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_mlp,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_kv_head,
        "head_dim": cfg.d_head,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.n_ctx,
        "rms_norm_eps": cfg.ln_eps,
        **rope_fields(cfg),
    }
    if cfg.rope_scaling == "longrope":
        raise CannotWrite("rope_scaling", "the LLaMA family computes no LongRoPE")
    if model_type == "llama":
        out.update(attention_bias=cfg.qkv_bias, mlp_bias=cfg.mlp_bias)
    if model_type == "mistral":
        out["sliding_window"] = cfg.window or None
    if model_type in ("qwen2", "qwen3"):
        out.update(use_sliding_window=False, sliding_window=None)
    if model_type == "qwen3":
        out["attention_bias"] = cfg.qkv_bias
    return out


def _importer(module: str, name: str):
    def get():
        from importlib import import_module

        return getattr(import_module(f"gptscope.model.importers.{module}"), name)

    return get


GPT2 = Writer("gpt2", "GPT2LMHeadModel", _gpt2_config, _importer("gpt2", "hf_config"), _importer("gpt2", "hf_names"))
LLAMAS = {
    mt: Writer(
        mt,
        arch,
        partial(_llama_config, model_type=mt),
        _importer("llama", "llama_config"),
        _importer("llama", "llama_names"),
    )
    for mt, arch in (
        ("llama", "LlamaForCausalLM"),
        ("qwen2", "Qwen2ForCausalLM"),
        ("qwen3", "Qwen3ForCausalLM"),
        ("mistral", "MistralForCausalLM"),
    )
}


def config_json(cfg: GPTConfig, fam: Writer, ids: dict[str, int | None]) -> dict[str, Any]:
    return {
        "architectures": [fam.architecture],
        "model_type": fam.model_type,
        "vocab_size": cfg.vocab_size,
        **fam.config(cfg),
        "tie_word_embeddings": cfg.tie_weights,
        "torch_dtype": "float32",
        "pad_token_id": None,  # no class default (Phi-3's 32,000) may name an id the vocabulary lacks
        **{k: v for k, v in ids.items() if v is not None},
    }


def check_read_back(cfg: GPTConfig, fam: Writer, raw: dict) -> None:
    """Every switch of the model comes back from the written config.json as it is, or ExportRefused
    names the first that does not (the class would compute something else)."""
    try:
        back = fam.reader()(raw)
    except ValueError as e:
        raise ExportRefused("config", f"{fam.architecture} refuses the config it would be written with: {e}") from None
    for f in fields(GPTConfig):
        if f.name in TRAINING_ONLY:
            continue
        ours, theirs = _canon(cfg, f.name), _canon(back, f.name)
        if ours != theirs:
            raise ExportRefused(
                f.name,
                f"the model's {f.name} is {ours!r}, but {fam.architecture} reads {theirs!r} from the config "
                f"it would be written with: no transformers class computes this model exactly",
            )


def _canon(cfg: GPTConfig, name: str) -> Any:
    """A switch's value with its "0 means the usual" spelled out (head_dim 0: d_model / n_head; rotary_dim
    0: the whole head), so two spellings of one model compare equal."""
    if name == "head_dim":
        return cfg.d_head
    if name == "rotary_dim":
        return cfg.rotary
    return getattr(cfg, name)


# --- the tensors --------------------------------------------------------------------------------


def gpt2_tensors(state: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's names (transformer.h.i...), its Conv1D weights stored (in, out)."""
    from .importers.gpt2 import hf_names

    out = {}
    for ours, (theirs, transposed) in hf_names(cfg).items():
        t = state[ours]
        out[("" if theirs == "lm_head.weight" else "transformer.") + theirs] = t.t() if transposed else t
    return out


def _inverse(
    fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...], t: torch.Tensor, into: torch.Tensor
) -> None:
    """Undo what the import computed of one stored tensor (a piece with a function), into `into` (the
    stored tensor's shape): a shift (Gemma's gain 1 + w: w = gain - 1), or a choice and order of rows
    (GPT-NeoX's per-head q, k, v; Phi-3's gate and up halves), found by running the function on the
    row numbers."""
    rows = torch.arange(shape[0], dtype=torch.float64).reshape(shape[0], *([1] * (len(shape) - 1)))
    got = fn(rows)
    shift = got - rows if got.shape == rows.shape else None
    if shift is not None and torch.all(shift == shift.flatten()[0]) and float(shift.flatten()[0]) != 0:
        into.copy_(t - float(shift.flatten()[0]))
        return
    picked = got.reshape(got.shape[0], -1)[:, 0]
    if not torch.equal(picked, picked.round()) or picked.min() < 0 or picked.max() >= shape[0]:
        raise ExportRefused("weights", "a tensor the import computed cannot be written back (a bug)")
    into[picked.long()] = t


def named_tensors(state: dict[str, torch.Tensor], names: dict[str, list]) -> dict[str, torch.Tensor]:
    """The importer's name map read backwards: each stored tensor from the parameters it was made into
    (stacked pieces split along the first axis, a computed piece undone by _inverse)."""
    out: dict[str, torch.Tensor] = {}
    computed: set[str] = set()
    for ours, pieces in names.items():
        t, at = state[ours], 0
        for piece in pieces:
            name, shape = piece[0], tuple(piece[1])
            if len(piece) > 2:
                computed.add(name)
                _inverse(piece[2], shape, t, out.setdefault(name, torch.full(shape, float("nan"))))
                continue
            out[name] = t[at : at + shape[0]]
            at += shape[0]
    unfilled = sorted(k for k in computed if torch.isnan(out[k]).any())
    if unfilled:
        raise ExportRefused("weights", f"tensor {unfilled[0]} is not filled by the model's parameters (a bug)")
    return out


def tensors(model: torch.nn.Module, cfg: GPTConfig, fam: Writer) -> dict[str, torch.Tensor]:
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    made = gpt2_tensors(state, cfg) if fam is GPT2 else named_tensors(state, fam.names()(cfg))
    return {k: v.contiguous().clone() for k, v in made.items()}


# --- the tokenizer ------------------------------------------------------------------------------


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-character table, which a byte-level tokenizer.json writes its tokens in."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _ranks_to_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Each multi-byte token's merge, in rank order: the two tokens of lower rank it is built from (the
    last merge of BPE run on its bytes with only lower ranks)."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda x: x[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = min(
                (i for i in range(len(parts) - 1) if ranks.get(parts[i] + parts[i + 1], rank) < rank),
                key=lambda i: ranks[parts[i] + parts[i + 1]],
            )
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        merges.append((parts[0], parts[1]))
    return merges


def bpe_tokenizer_json(enc: Any) -> str:
    """A tiktoken Encoding (gptscope's trained BPE, GPT-2's, cl100k's) as a byte-level tokenizer.json:
    its pattern as a Split, bytes as GPT-2's characters, its merges in rank order (ignore_merges: a
    pre-token that is a token stays whole, as tiktoken does), its special tokens added."""
    chars = _byte_chars()
    ranks: dict[bytes, int] = enc._mergeable_ranks

    def s(b: bytes) -> str:
        return "".join(chars[x] for x in b)

    vocab = {s(t): r for t, r in ranks.items()}
    merges = [[s(a), s(b)] for a, b in _ranks_to_merges(ranks)]
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in sorted(enc._special_tokens.items(), key=lambda x: x[1])
    ]
    split = {"type": "Split", "pattern": {"Regex": enc._pat_str}, "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    return json.dumps(spec, ensure_ascii=False)


def tokenizer_files(enc: Any, n_ctx: int) -> tuple[str, dict[str, Any]]:
    """tokenizer.json's text and tokenizer_config.json: an imported model's own file and settings, or
    a byte-level BPE written out; ExportRefused for a tokenizer no tokenizer.json can say."""
    if isinstance(enc, NanochatEncoding):
        raise ExportRefused("tokenizer", "a nanochat model's tokenizer is exported with its block, which is refused")
    if isinstance(enc, HFEncoding):
        keep = ("bos_token", "eos_token", "chat_template", "tokenizer_class", "legacy", "add_prefix_space", "unk_token")
        cfg = {k: enc.config[k] for k in keep if enc.config.get(k) is not None}
        return enc.json_text, {"model_max_length": n_ctx, **cfg}
    if not getattr(enc, "_mergeable_ranks", None) or type(enc).__name__ == "CharEncoding":
        raise ExportRefused(
            "tokenizer", "a character-level vocabulary has no byte-level tokenizer.json; export a BPE model"
        )
    eot = "<|endoftext|>" if "<|endoftext|>" in enc._special_tokens else None
    cfg = {"tokenizer_class": BACKEND, "model_max_length": n_ctx, "clean_up_tokenization_spaces": False}
    if eot:
        cfg.update(eos_token=eot, bos_token=eot, unk_token=eot)
    return bpe_tokenizer_json(enc), cfg


def special_ids(enc: Any, tok_cfg: dict) -> dict[str, int | None]:
    def tid(text: str | None) -> int | None:
        if text is None:
            return None
        if isinstance(enc, HFEncoding):
            return enc.token_id(text)
        return enc._special_tokens.get(text)

    return {"bos_token_id": tid(tok_cfg.get("bos_token")), "eos_token_id": tid(tok_cfg.get("eos_token"))}


# --- the folder ---------------------------------------------------------------------------------


def write_head(folder: Path, head: dict[str, torch.Tensor], classifier: dict) -> None:
    """A fine-tuned classifier's W_y and bias (classifier.safetensors) and its labels and special tokens
    (classifier.json): no transformers class reads them as gptscope computes them (its head has a bias
    and reads the extract token), so they travel beside the language model, not in it."""
    from safetensors.torch import save_file

    save_file({k: v.detach().float().contiguous() for k, v in head.items()}, str(folder / "classifier.safetensors"))
    (folder / "classifier.json").write_text(json.dumps(classifier, indent=2, ensure_ascii=False) + "\n")


def export_hf(
    model: torch.nn.Module, enc: Any, out: str | Path, name: str = "model", prefer: str | None = None
) -> dict[str, Any]:
    """Write the folder (a new one: refused where `out` exists and is not empty); returns what was
    written. Read back by the family's importer before it is kept. `prefer`: the model_type an imported
    model came from, tried first (Phi-3-mini-4k is Mistral's computation too, but goes back as Phi-3)."""
    from safetensors.torch import save_file

    cfg: GPTConfig = model.cfg  # type: ignore[assignment]
    fam = family_of(cfg, prefer)
    tok_json, tok_cfg = tokenizer_files(enc, cfg.n_ctx)
    raw = config_json(cfg, fam, special_ids(enc, tok_cfg))
    check_read_back(cfg, fam, raw)
    weights = tensors(model, cfg, fam)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportRefused("out", f"{out} exists and is not empty; export into a new folder")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (tmp / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        gen = {k: v for k, v in raw.items() if k in ("bos_token_id", "eos_token_id")}
        (tmp / "generation_config.json").write_text(json.dumps({**gen, "_from_model_config": True}, indent=2) + "\n")
        (tmp / "tokenizer.json").write_text(tok_json, encoding="utf-8")
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    n = sum(t.numel() for t in weights.values())
    return {
        "format": FORMAT,
        "path": str(out),
        "architecture": fam.architecture,
        "model_type": fam.model_type,
        "tensors": len(weights),
        "parameters": n,
        "name": name,
    }
