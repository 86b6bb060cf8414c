"""Gemma published in bfloat16 (issue #61): the import reads each norm weight w as the gain 1 + w, which
bfloat16 would round by up to 2^-8 near 1 (0.03-0.07 in real Gemma's logits, a changed top-1 token),
so those computed tensors are stored in float32 beside the file's bfloat16 and the imported model
computes what transformers computes from the same bfloat16 file in float32. And Gemma 2 9B's
config.json spelling sliding_window_size, which transformers ignores: accepted where it equals
sliding_window, refused naming both where it does not.

The references are transformers' own random Gemma 2 and Gemma 3 (text) models (tests/hf_families.py),
saved in bfloat16 and loaded back in float32. Building transformers' model classes takes seconds (slow)."""

from __future__ import annotations

import shutil

import pytest
import torch
from hf_families import PROMPT, build, edit_json, ours, reference_logits
from safetensors.torch import load_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import KVCache

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # transformers' model classes take seconds to load

GEMMAS = ("gemma2", "gemma3")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each Gemma saved in bfloat16 and imported: arch -> (transformers' model of the bfloat16 file in
    float32, tokenizer, folder, checkpoint folder)."""
    root = tmp_path_factory.mktemp("gemma-bf16")
    out = {}
    for arch in GEMMAS:
        m, tok = build(arch, root / "f32" / arch)
        folder = root / arch
        m.to(torch.bfloat16).save_pretrained(folder)
        shutil.copy(root / "f32" / arch / "tokenizer.json", folder / "tokenizer.json")
        ref = type(m).from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        dest, _ = importers.import_model(folder, arch, root / "data")
        out[arch] = (ref, tok, folder, dest)
    return out


def prompt_ids(tok) -> list[int]:
    return tok.encode(PROMPT, add_special_tokens=False).ids


@pytest.mark.parametrize("arch", GEMMAS)
def test_a_bf16_gemma_matches_transformers_in_float32(built, arch):
    """The file is bfloat16 throughout; the checkpoint keeps it so, except the gains 1 + w (float32),
    and the logits agree with transformers' float32 forward of the same file to 1e-4 in both modes."""
    ref, tok, folder, dest = built[arch]
    assert {t.dtype for t in load_file(str(folder / "model.safetensors")).values()} == {torch.bfloat16}
    c = ckpt.load(dest)
    ids = prompt_ids(tok)
    want = reference_logits(ref, ids)
    for mode in ("explain", "fast"):
        c.model.set_mode(mode)
        assert (ours(c.model, ids) - want).abs().max() < 1e-4, (arch, mode)
    assert all(p.dtype == torch.float32 for p in c.model.parameters())
    stored = load_file(str(dest / c.meta.weights))
    gains = {
        k for k in stored if k.split(".")[-2] in ("ln1", "ln1_post", "ln2", "ln2_post", "ln_final", "q_norm", "k_norm")
    }
    assert len(gains) == c.config.n_layer * (6 if arch == "gemma3" else 4) + 1
    assert all(stored[k].dtype == torch.float32 for k in gains)
    assert {t.dtype for k, t in stored.items() if k not in gains} == {torch.bfloat16}


@pytest.mark.parametrize("arch", GEMMAS)
def test_a_bf16_gemmas_kv_cached_step_matches_transformers(built, arch):
    """A prefill, then one token and then two with the KV cache, against transformers' whole text."""
    ref, tok, _folder, dest = built[arch]
    c = ckpt.load(dest)
    ids = prompt_ids(tok)
    want = reference_logits(ref, ids)
    T = len(ids)
    for mode in ("explain", "fast"):
        c.model.set_mode(mode)
        cache = KVCache(c.config, 1)
        with torch.no_grad():
            c.model(torch.tensor([ids[: T - 3]]), kv_cache=cache)
            one = c.model(torch.tensor([ids[T - 3 : T - 2]]), kv_cache=cache)[0][0, -1]
            two = c.model(torch.tensor([ids[T - 2 :]]), kv_cache=cache)[0][0]
        assert (one - want[T - 3]).abs().max() < 1e-4, (arch, mode)
        assert (two - want[T - 2 :]).abs().max() < 1e-4, (arch, mode)


def test_gemma2_9bs_sliding_window_size_imports_the_same(built, tmp_path):
    """Gemma 2 9B's config.json writes sliding_window_size beside sliding_window; equal, it changes nothing."""
    ref, tok, folder, _dest = built["gemma2"]
    alias = tmp_path / "gemma2-9b-spelling"
    shutil.copytree(folder, alias)
    edit_json(alias / "config.json", lambda c: c.update(sliding_window_size=c["sliding_window"]))
    dest, _ = importers.import_model(alias, "alias", tmp_path / "data")
    c = ckpt.load(dest)
    assert c.config.window == 5
    c.model.set_mode("explain")
    ids = prompt_ids(tok)
    assert (ours(c.model, ids) - reference_logits(ref, ids)).abs().max() < 1e-4


@pytest.mark.parametrize("size", [4096, "1", True])
def test_a_sliding_window_size_that_differs_is_refused_naming_both(built, tmp_path, size):
    _ref, _tok, folder, _dest = built["gemma2"]
    bad = tmp_path / "gemma2-two-windows"
    shutil.copytree(folder, bad)
    edit_json(bad / "config.json", lambda c: c.update(sliding_window_size=size, sliding_window=1))
    with pytest.raises(importers.ImportFailed, match=r"sliding_window_size \(.*\) and sliding_window \(1\) differ"):
        importers.import_model(bad, "bad", tmp_path / "data")
    assert not (tmp_path / "data" / "models" / "bad").exists()
