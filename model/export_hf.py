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
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from .config import GPTConfig
from .tokenizers import HFEncoding, NanochatEncoding
from .transformers5 import BACKEND

TRAINING_ONLY = frozenset({"dropout", "aux_loss_weight"})  # change nothing a forward pass computes
FORMAT = "hf"


class ExportRefused(ValueError):
    """The model cannot be written as a folder a transformers class computes exactly; names the switch."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str


GPT2 = Family("gpt2", "GPT2LMHeadModel")
LLAMAS = {
    "llama": Family("llama", "LlamaForCausalLM"),
    "qwen2": Family("qwen2", "Qwen2ForCausalLM"),
    "qwen3": Family("qwen3", "Qwen3ForCausalLM"),
    "mistral": Family("mistral", "MistralForCausalLM"),
}
# the switches each block is, and their values: the first one a model differs in names the refusal
GPT2_BLOCK = {"pos": "learned", "norm": "pre", "norm_type": "layernorm", "mlp": "gelu", "bias": True}
LLAMA_BLOCK = {"pos": "rope", "norm": "pre", "norm_type": "rmsnorm", "mlp": "swiglu", "bias": False}


def family_of(cfg: GPTConfig) -> Family:
    """The transformers class whose block is this model's; ExportRefused naming the first switch that
    differs from the nearer of the two blocks."""
    gpt2 = [k for k, v in GPT2_BLOCK.items() if getattr(cfg, k) != v]
    llama = [k for k, v in LLAMA_BLOCK.items() if getattr(cfg, k) != v]
    if not gpt2:
        return GPT2
    if not llama:
        if cfg.qk_norm and not cfg.qk_norm_all:
            return LLAMAS["qwen3"]
        if cfg.qkv_bias and not cfg.attn_out_bias:
            return LLAMAS["qwen2"]
        return LLAMAS["mistral" if cfg.window else "llama"]
    near, block = (gpt2, GPT2_BLOCK) if len(gpt2) <= len(llama) else (llama, LLAMA_BLOCK)
    name = "GPT-2's" if block is GPT2_BLOCK else "the LLaMA family's"
    k = near[0]
    raise ExportRefused(
        k,
        f"the model's {k} is {getattr(cfg, k)!r}; {name} block, the nearest a transformers class computes, has {block[k]!r}",
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


def _rope_scaling(cfg: GPTConfig) -> dict | None:
    if cfg.rope_scaling == "none":
        return None
    if cfg.rope_scaling == "linear":
        return {"rope_type": "linear", "factor": cfg.rope_factor}
    if cfg.rope_scaling == "llama3":
        return {
            "rope_type": "llama3",
            "factor": cfg.rope_factor,
            "low_freq_factor": cfg.rope_low_freq_factor,
            "high_freq_factor": cfg.rope_high_freq_factor,
            "original_max_position_embeddings": cfg.rope_original_ctx,
        }
    raise ExportRefused(
        "rope_scaling",
        f"the model's rope_scaling is {cfg.rope_scaling!r}; the LLaMA family computes none, linear and llama3",
    )


def _llama_config(cfg: GPTConfig, fam: Family) -> dict[str, Any]:
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
        "rope_theta": cfg.rope_base,
        "rope_scaling": _rope_scaling(cfg),
    }
    if fam.model_type == "llama":
        out.update(attention_bias=cfg.qkv_bias, mlp_bias=cfg.mlp_bias)
    if fam.model_type == "mistral":
        out["sliding_window"] = cfg.window or None
    if fam.model_type in ("qwen2", "qwen3"):
        out.update(use_sliding_window=False, sliding_window=None)
    if fam.model_type == "qwen3":
        out["attention_bias"] = cfg.qkv_bias
    return out


def config_json(cfg: GPTConfig, fam: Family, ids: dict[str, int | None]) -> dict[str, Any]:
    body = _gpt2_config(cfg) if fam is GPT2 else _llama_config(cfg, fam)
    return {
        "architectures": [fam.architecture],
        "model_type": fam.model_type,
        "vocab_size": cfg.vocab_size,
        **body,
        "tie_word_embeddings": cfg.tie_weights,
        "torch_dtype": "float32",
        **{k: v for k, v in ids.items() if v is not None},
    }


def read_back(fam: Family, raw: dict) -> GPTConfig:
    """The family importer's reading of the written config.json."""
    if fam is GPT2:
        from .importers.gpt2 import hf_config

        return hf_config(raw)
    from .importers.llama import llama_config

    return llama_config(raw)


def check_read_back(cfg: GPTConfig, fam: Family, raw: dict) -> None:
    """Every switch of the model comes back from the written config.json as it is, or ExportRefused
    names the first that does not (the class would compute something else)."""
    back = read_back(fam, raw)
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


def llama_tensors(state: dict[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """The LLaMA layout's names: the importer's name map read backwards (a stacked tensor split along
    its first axis into the pieces it was made of)."""
    from .importers.llama import llama_names

    out = {}
    for ours, pieces in llama_names(cfg).items():
        t, at = state[ours], 0
        for piece in pieces:
            if len(piece) > 2:  # a piece the import computes (Gemma's gain): not in this family
                raise ExportRefused(ours, f"{ours} is computed from its file on import; it cannot be written back")
            name, shape = piece[0], piece[1]
            out[name] = t[at : at + shape[0]]
            at += shape[0]
        if at != t.shape[0]:
            raise ExportRefused(ours, f"{ours} has {t.shape[0]} rows; the layout's pieces hold {at} (a bug)")
    return out


def tensors(model: torch.nn.Module, cfg: GPTConfig, fam: Family) -> dict[str, torch.Tensor]:
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    made = gpt2_tensors(state, cfg) if fam is GPT2 else llama_tensors(state, cfg)
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


def export_hf(model: torch.nn.Module, enc: Any, out: str | Path, name: str = "model") -> dict[str, Any]:
    """Write the folder (a new one: refused where `out` exists and is not empty); returns what was
    written. Read back by the family's importer before it is kept."""
    from safetensors.torch import save_file

    cfg: GPTConfig = model.cfg  # type: ignore[assignment]
    fam = family_of(cfg)
    if cfg.n_expert:
        raise ExportRefused("n_expert", "a mixture of experts has no class in the GPT-2 or LLaMA family")
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
