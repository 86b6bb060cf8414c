"""A model out into the ecosystem (issue #63): `gptscope export` and POST /api/v1/export/model write a
checkpoint as the Hugging Face folder of the transformers class that computes it exactly, or as a GGUF
file, with its add-ons; a model no class computes is refused by name.

Checked: transformers' forward of the exported folder equals gptscope's logits (1e-4) and its tokenizer
gives gptscope's ids; importing the folder back gives byte-identical weights and the same answers, for
the built-in model, a training run of each preset and a fine-tuned classifier; the GGUF file's tensors
read back equal; nanochat's block and GPT-1's post-norm block are refused, naming the switch."""

from __future__ import annotations

import json
import time
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from hf_families import ours

from gptscope.model import checkpoint as ckpt
from gptscope.model import finetune as ft
from gptscope.model import importers, tasks
from gptscope.model.config import PRESETS
from gptscope.model.export_gguf import GGUF_ARCH, export_gguf, gguf_tensors, read_gguf_tensors
from gptscope.model.export_hf import ExportRefused, export_hf, family_of, tensors
from gptscope.model.train import TrainConfig, train
from gptscope.server.app import create_app
from gptscope.server.cli import main as cli_main
from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

TEXTS = [
    "ROMEO: But soft, what light through yonder window breaks?",
    "  two  spaces,\n\nnew lines and 12345 digits!",
    "Thou art more lovely and more temperate",
    "<|endoftext|>after the end",
    "é, ü and 漢字: bytes that are not ASCII",
]
SMALL = dict(n_ctx=32, n_layer=1, d_model=32, n_head=2)  # each preset's switches at a tiny size
CORPUS = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 60)[:5000]


@pytest.fixture(scope="module")
def builtin():
    return ckpt.load(BUILTIN_CHECKPOINT)


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_the_builtin_model_exports_imports_back_exactly_and_as_gguf(builtin, tmp_path):
    out = tmp_path / "hf"
    info = export_hf(builtin.model, builtin.encoding(), out, "builtin")
    assert info["architecture"] == "GPT2LMHeadModel"
    assert {p.name for p in out.iterdir()} == {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    dest, _ = importers.import_model(out, "back", tmp_path / "data")
    back = ckpt.load(dest)
    assert same_weights(builtin.model, back.model) and back.config.vocab_size == builtin.config.vocab_size
    enc, enc_back = builtin.encoding(), back.encoding()
    for text in TEXTS:
        ids = enc.encode(text, allowed_special="all")
        assert enc_back.encode(text, allowed_special="all") == ids
        assert torch.equal(ours(back.model, ids), ours(builtin.model, ids))  # the same answers, bit for bit
    gguf = tmp_path / "m.gguf"
    export_gguf(builtin.model, builtin.encoding(), gguf, "builtin")
    fam = family_of(builtin.config)
    want = gguf_tensors(tensors(builtin.model, builtin.config, fam), builtin.config, GGUF_ARCH[fam.model_type])
    got = read_gguf_tensors(gguf)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.slow  # transformers' model classes take seconds to load
def test_transformers_computes_the_exported_builtin_model(builtin, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    export_hf(builtin.model, builtin.encoding(), out, "builtin")
    m = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    enc = builtin.encoding()
    for text in TEXTS:
        ids = enc.encode(text, allowed_special="all")
        assert tok(text).input_ids == ids, text
        with torch.no_grad():
            theirs = m(torch.tensor([ids])).logits[0]
        assert (theirs - ours(builtin.model, ids)).abs().max() < 1e-4


def trained_preset(preset: str, folder: Path, corpus: Path) -> Path:
    over = dict(SMALL)
    if preset == "llama-style":
        over.update(n_head=4, n_kv_head=2, d_mlp=48)
    tc = TrainConfig(
        corpus=str(corpus),
        preset=preset,
        tokenizer="bpe",
        vocab_size=300,
        batch_size=4,
        warmup_steps=1,
        max_steps=2,
        eval_batches=1,
        device="cpu",
        precision="fp32",
        optimizer="adamw",
        overrides=over,
    )
    train(tc, out=folder, progress=False, command="pytest export")
    return folder


EXPORTABLE = [p for p in PRESETS if p not in ("nanochat-tiny", "gpt1")]


@pytest.mark.slow  # trains each preset for two steps and loads transformers' classes
@pytest.mark.parametrize("preset", EXPORTABLE)
def test_a_training_run_of_each_preset_round_trips_and_transformers_computes_it(preset, tmp_path):
    transformers = pytest.importorskip("transformers")
    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS)
    c = ckpt.load(trained_preset(preset, tmp_path / "run", corpus))
    out = tmp_path / "hf"
    export_hf(c.model, c.encoding(), out, preset)
    back = ckpt.load(importers.import_model(out, "back", tmp_path / "data")[0])
    assert same_weights(c.model, back.model)
    m = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    ids = c.encoding().encode_ordinary(TEXTS[0])[: c.config.n_ctx]
    assert back.encoding().encode_ordinary(TEXTS[0])[: c.config.n_ctx] == ids
    with torch.no_grad():
        assert (m(torch.tensor([ids])).logits[0] - ours(c.model, ids)).abs().max() < 1e-4
    assert torch.equal(ours(back.model, ids), ours(c.model, ids))


def test_a_fine_tuned_classifier_exports_its_model_and_keeps_its_head_beside_it(builtin, tmp_path):
    task = tasks.Task("t", "csv", "two labels", ["a", "b"], [tasks.Example("x y", 0)], [tasks.Example("y", 1)])
    clf = ft.build(builtin.model, "finetune", 2, seed=0).eval()
    result = {"method": "finetune", "lm_weight": 0.5, "n_train": 1, "accuracy": 0.5}
    folder = ft.save_classifier(tmp_path / "ft", clf, builtin.meta, task, result, "pytest")
    code = cli_main(["export", str(folder), str(tmp_path / "hf"), "--data-dir", str(tmp_path / "d")])
    assert code == 0
    out = tmp_path / "hf"
    assert json.loads((out / "classifier.json").read_text())["labels"] == ["a", "b"]
    back = ckpt.load(importers.import_model(out, "back", tmp_path / "data")[0])
    assert same_weights(clf.gpt, back.model)
    text = "<|start|>To be<|delim|>or not<|extract|>"
    c = ckpt.load(folder)
    assert back.encoding().encode(text, allowed_special="all") == c.encoding().encode(text, allowed_special="all")


@pytest.mark.parametrize(
    "preset,field", [("nanochat-tiny", "mlp"), ("gpt1", "norm")], ids=["nanochat's block", "gpt1 post-norm"]
)
def test_a_block_no_transformers_class_computes_is_refused_by_name(preset, field, builtin, tmp_path):
    from gptscope.model.gpt import GPT, preset_config

    model = GPT(preset_config(preset, **SMALL))
    with pytest.raises(ExportRefused, match=field) as e:
        export_hf(model, builtin.encoding(), tmp_path / "x")
    assert e.value.field == field and not (tmp_path / "x").exists()


def test_a_switch_the_family_reads_otherwise_is_refused_naming_it(builtin, tmp_path):
    """Qwen2's attention has biases on W_Q, W_K, W_V and none on the MLP: a model with both cannot be it."""
    from gptscope.model.gpt import GPT, preset_config

    model = GPT(preset_config("llama-style", qkv_bias=True, mlp_bias=True, **SMALL))
    with pytest.raises(ExportRefused, match="mlp_bias"):
        export_hf(model, builtin.encoding(), tmp_path / "x")


def test_the_export_job_writes_the_served_model_and_its_addons_and_serves_them(tmp_path):
    app = create_app(Settings(allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        files = {}
        for fmt in ("hf", "gguf"):
            r = client.post("/api/v1/export/model", json={"format": fmt})
            assert r.status_code == 202, r.text
            job = r.json()
            for _ in range(300):
                job = client.get(f"/api/v1/export/model/jobs/{job['id']}").json()
                if job["status"] in ("done", "failed"):
                    break
                time.sleep(0.1)
            assert job["status"] == "done", job
            res = job["result"]
            files[fmt] = client.get(res["download"])
            assert files[fmt].status_code == 200
        names = zipfile.ZipFile(BytesIO(files["hf"].content)).namelist()
        assert "shakespeare-cpu/config.json" in names and "shakespeare-cpu/saes/L3-x8-topk32-s0/cfg.json" in names
        assert any(n.startswith("shakespeare-cpu/transcoders/") for n in names)
        assert "shakespeare-cpu/lenses/tuned-s0/params.pt" in names
        assert files["gguf"].content[:4] == b"GGUF"
        bad = client.post("/api/v1/export/model", json={"format": "onnx"})
        assert bad.status_code == 422 and "format" in bad.text
        gone = client.get("/api/v1/export/model/jobs/nope/download")
        assert gone.status_code == 404


def test_an_unexportable_model_is_a_422_naming_the_switch(tmp_path):
    from gptscope.model.gpt import GPT, preset_config

    folder = tmp_path / "models" / "nc"
    meta = {"name": "nc", "tokenizer": ckpt.load(BUILTIN_CHECKPOINT).meta.tokenizer, "step": 0, "final": True}
    ckpt.save(folder, GPT(preset_config("nanochat-tiny", vocab_size=2048, **SMALL)), meta)
    app = create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=tmp_path))
    with TestClient(app) as client:
        r = client.post("/api/v1/export/model", json={"format": "hf"})
        assert r.status_code == 422 and "mlp" in r.text and "checkpoint" in r.text, r.text


@pytest.mark.slow  # TransformerLens builds its bridge around transformers' model
def test_transformerlens_loads_the_exported_folder_and_its_cache_is_gptscopes(builtin, tmp_path, monkeypatch):
    """TransformerLens 4 opens the exported GPT-2-style folder from its path, and every hook point the two
    share holds the same tensor within 1e-4 (its hook_normalized is taken before the gain and shift:
    they are applied to compare; masked attention scores are left out)."""
    pytest.importorskip("transformer_lens")
    from transformer_lens.model_bridge import TransformerBridge

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "hf"
    export_hf(builtin.model, builtin.encoding(), out, "builtin")
    bridge = TransformerBridge.boot_transformers(str(out), device="cpu")
    ids = builtin.encoding().encode_ordinary(TEXTS[0])
    with builtin.model.capture() as cache:
        builtin.model(torch.tensor([ids]))
    _, theirs = bridge.run_with_cache(torch.tensor([ids]))
    state, T = builtin.model.state_dict(), len(ids)
    seen = torch.tril(torch.ones(T, T, dtype=torch.bool))
    shared = sorted(set(cache) & set(theirs.keys()))
    assert len(shared) > 100
    for k in shared:
        a, b = cache[k], theirs[k].reshape(cache[k].shape)
        if k.endswith("hook_normalized"):
            ln = k.rsplit(".", 1)[0]
            b = b * state[ln + ".weight"] + state[ln + ".bias"]
        if k.endswith("hook_attn_scores"):
            a, b = a[..., seen], b[..., seen]
        assert (a - b).abs().max() < 1e-4, k
