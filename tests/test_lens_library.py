"""Issue #62: a gptscope tuned lens opens in the tuned-lens library (PyPI `tuned-lens`) with the library's
own loader, TunedLens.from_model_and_pretrained(model, folder), and its translators are gptscope's: the same
weights and biases, the same transformed hidden states and the same logits. The library is in the [test]
extra (skipped where it is not installed).

The library builds its unembedding from a transformers model (Unembed: the model's final norm and output
embeddings). The built-in model is GPT-2's architecture, so a one-block GPT2LMHeadModel given its final
LayerNorm and W_U stands in for it: the library reads only those two."""

from __future__ import annotations

import json
import logging

import pytest
import torch

tuned_lens_nn = pytest.importorskip("tuned_lens.nn")
transformers = pytest.importorskip("transformers")

from gptscope.model import tuned_lens as tl  # noqa: E402
from gptscope.model.gpt import GPT  # noqa: E402
from gptscope.server.config import BUILTIN_CHECKPOINT  # noqa: E402

SHIPPED = BUILTIN_CHECKPOINT / "lenses" / "tuned-s0"


@pytest.fixture(autouse=True)
def without_hooked_transformer(monkeypatch):
    """tuned-lens 0.2.0 asks `isinstance(model, transformer_lens.HookedTransformer)` where TransformerLens
    is installed, and TransformerLens 4 (also in the test extra) removed that class, raising on the
    lookup: the library is told TransformerLens is not there, as it would be without it."""
    import importlib

    for module in ("tuned_lens.model_surgery", "tuned_lens.nn.unembed"):
        monkeypatch.setattr(importlib.import_module(module), "_transformer_lens_available", False, raising=False)


def library_model(model: GPT):
    """A transformers GPT-2 whose final norm and unembedding are `model`'s (one block; the library's Unembed
    reads nothing else)."""
    cfg = model.cfg
    assert cfg.norm_type == "layernorm" and cfg.bias and not cfg.softcap
    config = transformers.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.n_ctx,
        n_embd=cfg.d_model,
        n_layer=1,
        n_head=cfg.n_head,
        layer_norm_epsilon=cfg.ln_eps,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
    )
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        hf.transformer.ln_f.weight.copy_(model.ln_final.weight)
        hf.transformer.ln_f.bias.copy_(model.ln_final.bias)
        hf.get_output_embeddings().weight.copy_(model.lm_head.weight)
    return hf


def assert_same_translators(lib, ours: tl.TunedLens, model: GPT) -> float:
    """Weights and biases equal; on a random input the same transformed hidden states at every translated
    stage, and the same logits. Returns the largest difference of the transformed states."""
    assert len(lib) == ours.n_translators
    gen = torch.Generator().manual_seed(0)
    h = 3 * torch.randn(256, model.cfg.d_model, generator=gen)
    worst = 0.0
    with torch.no_grad():
        for s in range(ours.n_translators):
            assert torch.equal(lib[s].weight, ours.layer_translators[s].weight), s
            assert torch.equal(lib[s].bias, ours.layer_translators[s].bias), s
            diff = (lib.transform_hidden(h, s) - ours.translate(h, s)).abs().max().item()
            worst = max(worst, diff)
            torch.testing.assert_close(lib(h, s), ours.logits(model, h, s), rtol=1e-5, atol=1e-5)
    assert worst == 0.0  # the same arithmetic, h + Linear(h), on the same tensors
    return worst


def test_the_shipped_lens_opens_in_the_tuned_lens_library(service, caplog):
    """TunedLens.from_model_and_pretrained on the shipped folder: no warning (the config has only the
    library's keys, and its unembedding hash is the model's), the translators gptscope reads."""
    hf = library_model(service.model)
    with caplog.at_level(logging.WARNING):
        lib = tuned_lens_nn.TunedLens.from_model_and_pretrained(hf, str(SHIPPED))
    assert not [r for r in caplog.records if r.name == "root"], caplog.text
    assert lib.config.num_hidden_layers == 6 and lib.config.d_model == 192
    assert lib.config.unembed_hash == tl.unembed_hash(service.model.lm_head.weight)
    assert_same_translators(lib, tl.load_lens(SHIPPED).lens, service.model)


def test_a_lens_round_trips_through_the_library(service, tmp_path):
    """A lens gptscope saves (random translators) loads in the library (from_unembed_and_pretrained), and
    the library's own save writes back the very config and the same tensors under the same names."""
    torch.manual_seed(1)
    lens = tl.TunedLens(service.model.cfg.d_model, 6)
    with torch.no_grad():
        for p in lens.parameters():
            p.normal_(0, 0.05)
    meta = {"name": "round-trip", "checkpoint": {"name": service.meta.name}}
    folder = tl.save_lens(tmp_path / "ours", lens, meta, service.model.lm_head.weight)
    unembed = tuned_lens_nn.Unembed(library_model(service.model))
    lib = tuned_lens_nn.TunedLens.from_unembed_and_pretrained(unembed, str(folder))
    assert_same_translators(lib, lens, service.model)
    assert_same_translators(lib, tl.load_lens(folder).lens, service.model)

    lib.save(tmp_path / "theirs")
    ours_cfg = json.loads((folder / tl.CONFIG_FILE).read_text())
    assert json.loads((tmp_path / "theirs" / tl.CONFIG_FILE).read_text()) == ours_cfg
    theirs = torch.load(tmp_path / "theirs" / tl.WEIGHTS_FILE, weights_only=True)
    mine = torch.load(folder / tl.WEIGHTS_FILE, weights_only=True)
    assert list(theirs) == list(mine)
    assert all(torch.equal(theirs[k], mine[k]) for k in mine)
