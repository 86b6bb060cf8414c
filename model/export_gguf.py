"""A gptscope model written as one GGUF file, the format of llama.cpp and the runners built on it
(Ollama, LM Studio), by the `gguf` package's own writer and names.

It starts from the Hugging Face folder's tensors (model/export_hf.py: the same refusals, the same
read-back check) and writes them as llama.cpp's converter does: the names from gguf's TensorNameMap
for the architecture (gpt2, llama, qwen2, qwen3), GPT-2's Conv1D weights back in nn.Linear's (out,
in), and for the llama architecture W_Q and W_K permuted from transformers' rotate-half RoPE to the
pairs llama.cpp turns (qwen2 and qwen3 turn halves, as transformers does: no permutation). The
metadata: the architecture's sizes, epsilon and RoPE base, and the byte-level BPE (tokens in id
order, merges, special tokens as control tokens). A SentencePiece-style tokenizer is refused for
GGUF (its scores are not in tokenizer.json). Weights in float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .config import GPTConfig
from .export_hf import (
    GPT2,
    ExportRefused,
    check_read_back,
    config_json,
    family_of,
    special_ids,
    tensors,
    tokenizer_files,
)

GGUF_ARCH = {"gpt2": "GPT2", "llama": "LLAMA", "mistral": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3"}
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def permute_rope(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """transformers' rotate-half rows of W_Q or W_K (pair i: rows i and i + hs/2 of each head) as
    llama.cpp's llama architecture turns them (pair i: rows 2i and 2i + 1), as its converter does."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(hf: dict[str, torch.Tensor], cfg: GPTConfig, arch: str) -> dict[str, torch.Tensor]:
    import gguf

    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch), cfg.n_layer)
    out = {}
    for name, t in hf.items():
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ExportRefused("format", f"gguf has no name for tensor {name} in the {arch.lower()} architecture")
        if arch == "GPT2" and name.endswith(CONV1D):
            t = t.t()
        if arch == "LLAMA" and name.endswith("self_attn.q_proj.weight"):
            t = permute_rope(t, cfg.n_head)
        if arch == "LLAMA" and name.endswith("self_attn.k_proj.weight"):
            t = permute_rope(t, cfg.n_kv_head)
        out[new] = t.contiguous()
    return out


def _metadata(w: Any, cfg: GPTConfig, arch: str) -> None:
    w.add_context_length(cfg.n_ctx)
    w.add_embedding_length(cfg.d_model)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.d_mlp)
    w.add_head_count(cfg.n_head)
    w.add_file_type(0)  # all float32
    if arch == "GPT2":
        w.add_layer_norm_eps(cfg.ln_eps)
        return
    w.add_head_count_kv(cfg.n_kv_head)
    w.add_layer_norm_rms_eps(cfg.ln_eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_rope_dimension_count(cfg.rotary)
    w.add_key_length(cfg.d_head)
    w.add_value_length(cfg.d_head)
    if cfg.window:
        w.add_sliding_window(cfg.window)


def _tokenizer(w: Any, tok_json: str, ids: dict[str, int | None], vocab_size: int) -> None:
    """The byte-level BPE as gguf's "gpt2" tokenizer model: every id's token (padding ids named
    [PAD{id}], as llama.cpp's converter names them), its merges and its control tokens."""
    import gguf

    spec = json.loads(tok_json)
    if spec["model"]["type"] != "BPE" or '"ByteLevel"' not in tok_json:
        raise ExportRefused("tokenizer", "GGUF export reads byte-level BPE tokenizers; this one is SentencePiece-style")
    by_id = {i: t for t, i in spec["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in spec.get("added_tokens") or []}
    tokens, types = [], []
    for i in range(vocab_size):
        text = added.get(i, by_id.get(i))
        tokens.append(text if text is not None else f"[PAD{i}]")
        types.append(gguf.TokenType.CONTROL if i in added else gguf.TokenType.NORMAL if text else gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]])
    if ids.get("bos_token_id") is not None:
        w.add_bos_token_id(ids["bos_token_id"])
    if ids.get("eos_token_id") is not None:
        w.add_eos_token_id(ids["eos_token_id"])


def export_gguf(model: torch.nn.Module, enc: Any, out: str | Path, name: str = "model") -> dict[str, Any]:
    """Write `out` (a .gguf file; refused where it exists); returns what was written."""
    import gguf

    cfg: GPTConfig = model.cfg  # type: ignore[assignment]
    fam = family_of(cfg)
    if fam.model_type not in GGUF_ARCH:
        raise ExportRefused(
            "format",
            f"GGUF export writes the {', '.join(sorted(set(GGUF_ARCH)))} architectures; this model is {fam.model_type}: export it as hf",
        )
    arch = GGUF_ARCH[fam.model_type]
    for switch in ("window", "mlp_bias"):  # llama.cpp's llama architecture computes neither
        if arch == "LLAMA" and getattr(cfg, switch):
            raise ExportRefused(switch, f"GGUF's llama architecture has no {switch}; export this model as hf")
    tok_json, tok_cfg = tokenizer_files(enc, cfg.n_ctx)
    ids = special_ids(enc, tok_cfg)
    check_read_back(cfg, fam, config_json(cfg, fam, ids))
    if fam is not GPT2 and cfg.rope_scaling != "none":
        raise ExportRefused("rope_scaling", "GGUF export writes no RoPE scaling yet; export as hf")
    written = gguf_tensors(tensors(model, cfg, fam), cfg, arch)
    out = Path(out)
    if out.exists():
        raise ExportRefused("out", f"{out} exists; export into a new file")
    tmp = out.with_name(out.name + ".partial")
    try:
        w = gguf.GGUFWriter(str(tmp), getattr(gguf.MODEL_ARCH, arch).name.lower())
        w.add_name(name)
        _metadata(w, cfg, arch)
        _tokenizer(w, tok_json, ids, cfg.vocab_size)
        for k, t in written.items():
            w.add_tensor(k, t.float().numpy())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp.rename(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"format": "gguf", "path": str(out), "architecture": arch.lower(), "tensors": len(written), "name": name}


def read_gguf_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """A GGUF file's tensors as gguf's reader gives them back (in the file's own shapes)."""
    import gguf

    r = gguf.GGUFReader(str(path))
    return {
        t.name: torch.from_numpy(t.data.copy()).reshape(tuple(reversed([int(x) for x in t.shape]))) for t in r.tensors
    }
