"""AutoTokenizer's choice of class in transformers 5.25 (model/transformers5.py), written down for the
model types gptscope imports: which class runs a folder decides its normaliser and pre-tokeniser.
tests/test_import_checkpoints.py checks the ids themselves against transformers."""

from __future__ import annotations

import pytest

from gptscope.model.transformers5 import BACKEND, effective, tokenizer_class

SP = '{"normalizer": {"type": "Sequence"}, "pre_tokenizer": null}'
BYTES = '{"pre_tokenizer": {"type": "ByteLevel"}}'

CASES = [  # (model_type, tokenizer_class, tokenizer.json, the class transformers 5 runs)
    ("llama", "LlamaTokenizer", SP, "LlamaTokenizer"),  # TinyLlama, Llama 2
    ("llama", "LlamaTokenizerFast", SP, "LlamaTokenizer"),
    ("llama", "LlamaTokenizer", BYTES, BACKEND),  # a byte-level file under the Llama name
    ("llama", "PreTrainedTokenizerFast", BYTES, BACKEND),  # Llama 3
    ("llama", "GPT2Tokenizer", BYTES, "GPT2Tokenizer"),  # SmolLM2
    ("phi3", "LlamaTokenizer", SP, BACKEND),  # Phi-3: transformers 5 overrides the published class
    ("phi3", "GPT2Tokenizer", BYTES, BACKEND),  # Phi-4-mini
    ("mistral", "LlamaTokenizer", SP, BACKEND),
    ("olmo2", "GPT2Tokenizer", BYTES, BACKEND),
    ("qwen2", "Qwen2Tokenizer", BYTES, "Qwen2Tokenizer"),
    ("qwen3", "Qwen2Tokenizer", BYTES, "Qwen2Tokenizer"),
    ("gemma2", "GemmaTokenizer", SP, "GemmaTokenizer"),
    ("gemma3_text", "GemmaTokenizerFast", SP, "GemmaTokenizer"),
    ("gemma3_text", "PreTrainedTokenizerFast", SP, BACKEND),
    ("gpt_neox", "GPTNeoXTokenizer", BYTES, "GPTNeoXTokenizer"),
    ("gpt_neox", None, BYTES, "GPTNeoXTokenizer"),  # no class named: the model type's own
    (None, None, SP, BACKEND),  # a checkpoint imported before the class was kept
]


@pytest.mark.parametrize("model_type,hub,text,want", CASES)
def test_autotokenizers_choice_of_class(model_type, hub, text, want):
    assert tokenizer_class(model_type, hub, text) == want


def test_a_class_it_does_not_rebuild_runs_the_file_and_says_so():
    spec = {"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}
    out, runs = effective(
        '{"type": "ByteLevel"}', spec, {"model_type": "llama", "tokenizer_class": "CodeLlamaTokenizer"}
    )
    assert out is spec and not runs.rebuilt and "CodeLlamaTokenizer" in runs.note and "as written" in runs.note


def test_llamatokenizer_prepends_by_legacy_and_add_prefix_space():
    spec = {"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": "Prepend", "prepend": "▁"}}
    for cfg, scheme in (({}, "first"), ({"legacy": True}, "always"), ({"add_prefix_space": False}, "never")):
        out, runs = effective(SP, spec, {"model_type": "llama", "tokenizer_class": "LlamaTokenizer", **cfg})
        assert out["normalizer"] is None and out["pre_tokenizer"]["prepend_scheme"] == scheme and runs.rebuilt
        assert "transformers 4 ran" in runs.note
