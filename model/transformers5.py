"""How transformers 5 runs a Hugging Face tokenizer folder, so an imported model reads the very ids
`tokenizer(text).input_ids` and `apply_chat_template(...)` give its makers' users.

transformers 5 does not always run tokenizer.json as written. AutoTokenizer picks a class from
tokenizer_config.json's `tokenizer_class` and config.json's `model_type`; a family class (LlamaTokenizer,
GemmaTokenizer, GPT2Tokenizer, Qwen2Tokenizer, GPTNeoXTokenizer) keeps only the file's vocabulary,
merges, added tokens and post-processor, and builds its own normaliser, pre-tokeniser and decoder.
The generic class (TokenizersBackend) runs the file as written. Two changes from transformers 4 show
in the ids:
- the beginning-of-text token comes from tokenizer.json's post-processor alone; transformers 4's
  Llama and Gemma classes read tokenizer_config.json's add_bos_token instead (Phi-3's files say false
  while the post-processor adds <s>: transformers 4 added no BOS, transformers 5 adds it);
- LlamaTokenizer swaps the file's Prepend("▁") normaliser (a "▁" before every stretch of text,
  after each special token too) for a Metaspace pre-tokeniser that puts "▁" before the text's first
  stretch only (legacy false), so a chat has no "▁" after each </s>.

`effective` rewrites the file's JSON as the class builds it: the fields below are the classes' own
(transformers/models/*/tokenization_*.py, read for transformers 5.25). Nothing here imports
transformers; tests/test_import_checkpoints.py checks every family's layout against it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

BACKEND = "TokenizersBackend"  # tokenizer.json run as written

# config.json model_type -> the class transformers 5 registers for it (AutoTokenizer's mapping), for
# the families gptscope imports; None: no class of its own
REGISTERED: dict[str, str | None] = {
    "gpt2": "GPT2Tokenizer",
    "llama": None,
    "mistral": BACKEND,
    "qwen2": "Qwen2Tokenizer",
    "qwen3": "Qwen2Tokenizer",
    "gemma": "GemmaTokenizer",
    "gemma2": "GemmaTokenizer",
    "gemma3": "GemmaTokenizer",
    "gemma3_text": "GemmaTokenizer",
    "gpt_neox": "GPTNeoXTokenizer",
    "phi3": BACKEND,
    "olmo2": BACKEND,
}
# model types whose published tokenizer_class transformers 5 overrides with the registered class
WRONG_HUB_CLASS = frozenset({"phi3", "qwen2"})
GENERIC = frozenset({BACKEND, "PreTrainedTokenizer", "PythonBackend"})  # "Fast" already dropped

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_BYTE_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
_SP_DECODER = [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
]
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class Runs:
    """The class transformers 5 runs a tokenizer folder with, and what that changes from the file."""

    cls: str  # the class's name, or TokenizersBackend
    rebuilt: bool  # the class built its own normaliser, pre-tokeniser and decoder
    note: str  # in words, for the tokenizer page


def tokenizer_class(model_type: str | None, hub_class: str | None, json_text: str) -> str:
    """AutoTokenizer's choice of class (transformers 5.25's rules, for the model types above)."""
    hub = (hub_class or "").removesuffix("Fast") or None
    registered = REGISTERED.get(model_type or "")
    if hub == "LlamaTokenizer" and model_type not in WRONG_HUB_CLASS and '"ByteLevel"' in json_text:
        return BACKEND  # a byte-level file under the Llama name (Llama 3's kind): the file as written
    if hub and registered and registered != hub:
        if registered in GENERIC:
            return BACKEND
        hub = registered if model_type in WRONG_HUB_CLASS else hub
    cls = hub or registered or BACKEND
    return BACKEND if cls in GENERIC else cls


def _bpe(spec: dict, **fields) -> dict:
    """The file's BPE model (its vocabulary and merges) with the options the class sets."""
    model = dict(spec["model"])
    model.update(dropout=None, continuing_subword_prefix=None, end_of_word_suffix=None, ignore_merges=False)
    model.update(fields)
    return model


def _llama(spec: dict, cfg: dict) -> None:
    """LlamaTokenizer: no normaliser; Metaspace puts "▁" for each space and one before the text's first
    stretch (prepend_scheme "first"; "always" for legacy files, "never" without add_prefix_space)."""
    prefix = cfg.get("add_prefix_space")
    prefix = True if prefix is None else prefix
    scheme = ("always" if cfg.get("legacy") else "first") if prefix else "never"
    spec["model"] = _bpe(spec, fuse_unk=True, byte_fallback=True, unk_token=None)
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": False}
    strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else []
    spec["decoder"] = {"type": "Sequence", "decoders": _SP_DECODER + strip}


def _gemma(spec: dict, cfg: dict) -> None:
    spec["model"] = _bpe(spec, fuse_unk=True, byte_fallback=True, unk_token=str(cfg.get("unk_token") or "<unk>"))
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    spec["pre_tokenizer"] = {
        "type": "Split",
        "pattern": {"String": " "},
        "behavior": "MergedWithPrevious",
        "invert": False,
    }
    spec["decoder"] = {"type": "Sequence", "decoders": _SP_DECODER}


def _gpt2(spec: dict, cfg: dict) -> None:
    """GPT2Tokenizer: GPT-2's own byte-level split (its regex), whatever split the file writes."""
    spec["model"] = _bpe(spec, fuse_unk=False, byte_fallback=False, unk_token=None)
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {**_BYTE_LEVEL, "add_prefix_space": bool(cfg.get("add_prefix_space") or False)}
    spec["decoder"] = _BYTE_DECODER


def _qwen2(spec: dict, cfg: dict) -> None:
    spec["model"] = _bpe(spec, fuse_unk=False, byte_fallback=False, unk_token=None)
    spec["normalizer"] = {"type": "NFC"}
    split = {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False}
    prefix = bool(cfg.get("add_prefix_space") or False)
    byte_level = {**_BYTE_LEVEL, "add_prefix_space": prefix, "use_regex": False}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    spec["decoder"] = _BYTE_DECODER


def _gpt_neox(spec: dict, cfg: dict) -> None:
    """GPTNeoXTokenizer also rebuilds the post-processor, without a BOS (its add_bos_token is false)."""
    spec["model"] = _bpe(spec, fuse_unk=False, byte_fallback=False, unk_token=None)
    spec["normalizer"] = {"type": "NFC"}
    spec["pre_tokenizer"] = {**_BYTE_LEVEL, "add_prefix_space": bool(cfg.get("add_prefix_space") or False)}
    spec["decoder"] = _BYTE_DECODER
    a, b = {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}
    spec["post_processor"] = {"type": "TemplateProcessing", "single": [a], "pair": [a, b], "special_tokens": {}}


REBUILDS = {
    "LlamaTokenizer": _llama,
    "GemmaTokenizer": _gemma,
    "GPT2Tokenizer": _gpt2,
    "Qwen2Tokenizer": _qwen2,
    "GPTNeoXTokenizer": _gpt_neox,
}
WHAT = {
    "LlamaTokenizer": 'no normaliser; "▁" for each space and one before the first stretch of text only',
    "GemmaTokenizer": 'spaces written "▁", split after each space, byte fallback',
    "GPT2Tokenizer": "GPT-2's byte-level split, whatever split tokenizer.json writes",
    "Qwen2Tokenizer": "NFC, Qwen's split pattern, then bytes",
    "GPTNeoXTokenizer": "NFC, GPT-2's byte-level split, and no beginning-of-text token",
}


def effective(json_text: str, spec: dict, cfg: dict) -> tuple[dict, Runs]:
    """tokenizer.json (its text and its JSON) as transformers 5 runs it for this folder (a copy; the
    file's own where the class keeps it), and which class that is. `cfg`: what the import kept of
    config.json's model_type and tokenizer_config.json's tokenizer_class, legacy, add_prefix_space
    and unk_token."""
    cls = tokenizer_class(cfg.get("model_type"), cfg.get("tokenizer_class"), json_text)
    rebuild = REBUILDS.get(cls)
    if cls == BACKEND:
        return spec, Runs(cls, False, "transformers 5 runs tokenizer.json as written (TokenizersBackend)")
    if rebuild is None or (spec.get("model") or {}).get("type") != "BPE":
        note = f"transformers 5 would run it as {cls}, which gptscope does not rebuild: tokenizer.json runs as written"
        return spec, Runs(cls, False, note)
    out = copy.deepcopy(spec)
    rebuild(out, cfg)
    same = all(out.get(k) == spec.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor"))
    t4 = (
        " (the pipeline tokenizer.json writes)"
        if same
        else " in place of tokenizer.json's own, which transformers 4 ran"
    )
    return out, Runs(cls, True, f"transformers 5 runs it as {cls}, which builds its own pipeline: {WHAT[cls]}{t4}")


def unreadable(spec: dict, runs: Runs, why: str) -> tuple[dict, Runs]:
    """The file as written, where the class transformers 5 picks cannot run it (a byte-level file under
    GemmaTokenizer's name fails in transformers too: its unknown token is not in the vocabulary)."""
    return spec, Runs(
        runs.cls,
        False,
        f"transformers 5 would run it as {runs.cls}, which fails on this file ({why}): it runs as written",
    )
