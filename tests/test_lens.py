"""The tuned lens (issue #46): at its start it is the logit lens exactly; training lowers the held-out KL
to the final distribution at every stage but the last; the shipped lens beats the logit lens there, with
the figures README and the manual give; the lens reads what the model reads for every kind of block; files are checked
on load, written in the tuned-lens library's layout (issue #62; tests/test_lens_library.py opens them with
the library itself), and older folders are still read; the API, its job and its refusals."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from gptscope.model import tuned_lens as tl
from gptscope.model.gpt import GPT, GPTConfig, preset_config
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.lenses import LENSES

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = BUILTIN_CHECKPOINT / "lenses" / "tuned-s0"
PROMPT = "First Lord: What news of Caesar?\nSecond Lord: My lord, Caesar is dead.\nFirst Lord: Alas, poor"


def identity_lens(service, folder: Path) -> Path:
    """A lens at its start (every translator zero) for the served model, with honest figures."""
    lens = tl.TunedLens(service.model.cfg.d_model, len(tl.stream_hooks(service.model.cfg)) - 1)
    seqs = torch.tensor([service.encoding.encode_ordinary(PROMPT * 8)[: service.model.cfg.n_ctx]])
    meta = {
        "name": folder.name,
        "checkpoint": {"name": service.meta.name, "weights_sha256": service.meta.weights_sha256},
        "corpus": {"name": "prompt"},
        "stages": tl.stage_names(service.model.cfg),
        "steps": 0,
        "tokens": 0,
        "quality": tl.quality(service.model, lens, seqs),
    }
    return tl.save_lens(folder, lens, meta, service.model.lm_head.weight)


@pytest.fixture
def identity(client):
    # the model `client` serves now (an earlier test may have served another and then the built-in
    # again, and the session's `service` may have been given another app's folders since)
    service = client.app.state.models.served
    folder = identity_lens(service, LENSES.folders(service)[0] / "zz-identity")
    yield folder.name
    shutil.rmtree(folder)


def test_at_its_start_the_tuned_lens_is_the_logit_lens_exactly(client, identity):
    r = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["logit_lens", "tuned_lens"], "lens": identity})
    assert r.status_code == 200, r.text
    body = r.json()
    logit, tuned = body["logit_lens"], body["tuned_lens"]
    assert tuned["lens"] == identity
    for field in ("stages", "top", "actual_next_prob", "kl_to_final", "top1_agreement"):
        assert tuned[field] == logit[field], field
    held = tuned["held_out"]["stages"]
    assert all(s["tuned_kl"] == s["logit_kl"] and s["tuned_top1"] == s["logit_top1"] for s in held)


@pytest.mark.parametrize(
    "cfg",
    [
        GPTConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, d_model=16),
        GPTConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, d_model=16, norm="post"),
        GPTConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, d_model=16, norm="both", norm_type="rmsnorm"),
        preset_config("nanochat-tiny", vocab_size=61, n_ctx=16),
    ],
    ids=["gpt2", "post-norm", "sandwich", "nanochat"],
)
def test_the_lens_reads_each_stage_as_the_model_reads_its_last(cfg):
    """Every kind of block: the last stage's readout is the model's own logits (nanochat's after its backout,
    softcapped), and a lens at its start equals the logit lens at every stage, bit for bit."""
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    idx = torch.randint(0, 61, (2, 16))
    streams, logp = tl.streams_and_final(model, idx)
    assert len(streams) == len(tl.stage_names(cfg)) == cfg.n_layer + 1 + int(cfg.backout)
    assert torch.allclose(torch.log_softmax(tl.read_out(model, streams[-1]), -1), logp, atol=1e-5)
    lens = tl.TunedLens(cfg.d_model, len(streams) - 1)
    for s, h in enumerate(streams):
        assert torch.equal(lens.logits(model, h, s), tl.read_out(model, h))


@pytest.mark.slow
def test_training_lowers_the_held_out_kl_at_every_stage_but_the_last(client):
    """A short run through the API's job (ten updates): every translated stage reads the held-out text closer
    to the final distribution than the logit lens does."""
    r = client.post(
        "/api/v1/lenses",
        json={"name": "test-short", "batch_tokens": 1024, "max_tokens": 10240, "eval_sequences": 4, "lr": 0.003},
    )
    assert r.status_code == 202, r.text
    job = r.json()
    while job["status"] == "running":
        time.sleep(0.5)
        job = client.get(f"/api/v1/lenses/jobs/{job['id']}").json()
    assert job["status"] == "done", job["error"]
    assert job["step"] == 10 and len(job["history"]) >= 1
    stages = job["quality"]["stages"]
    assert all(s["tuned_kl"] < s["logit_kl"] for s in stages[:-1])
    assert stages[-1]["tuned_kl"] == stages[-1]["logit_kl"] == 0.0
    listed = {lens["name"] for lens in client.get("/api/v1/lenses").json()["lenses"]}
    assert "test-short" in listed
    assert client.post("/api/v1/lenses", json={"name": "test-short"}).json()["detail"][0]["loc"][-1] == "name"
    shutil.rmtree(LENSES.folders(client.app.state.models.served)[0] / "test-short")


def test_the_shipped_lens_beats_the_logit_lens_at_every_stage_but_the_last(client):
    lenses = client.get("/api/v1/lenses").json()["lenses"]
    shipped = next(lens for lens in lenses if lens["name"] == "tuned-s0")
    stages = shipped["quality"]["stages"]
    assert [s["stage"] for s in stages] == ["embed", *(f"block {i}" for i in range(6))]
    assert all(s["tuned_kl"] < s["logit_kl"] and s["tuned_top1"] > s["logit_top1"] for s in stages[:-1])
    assert stages[-1]["tuned_kl"] == stages[-1]["logit_kl"] == 0 and stages[-1]["tuned_top1"] == 1
    assert shipped["translators"] == 6 and shipped["tokens"] > 0 and shipped["train_seconds"] <= 240
    assert client.get("/api/v1/lenses/tuned-s0").json() == shipped


def test_the_docs_give_the_shipped_lens_figures():
    """The manual's table row by row: each stage's held-out KL of both lenses (3 decimals) and top-1
    agreement; README's sentence, the KL after block 0 and the top-1 after block 3."""
    q = json.loads((SHIPPED / tl.META_FILE).read_text())["quality"]
    stage = {s["stage"]: s for s in q["stages"]}
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    b0, b3 = stage["block 0"], stage["block 3"]
    assert f"On {q['tokens']:,} held-out tokens it brings the KL" in readme
    assert f"after block 0 from {b0['logit_kl']:.3f} to {b0['tuned_kl']:.3f} nats" in readme
    assert f"after block 3 from {100 * b3['logit_top1']:.1f}% to {100 * b3['tuned_top1']:.1f}%" in readme
    text = (ROOT / "docs/manual.md").read_text(encoding="utf-8")
    for s in q["stages"]:
        row = next(line for line in text.splitlines() if line.startswith(f"| {s['stage']} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        want = [
            f"{s['logit_kl']:.3f}",
            f"{s['tuned_kl']:.3f}",
            f"{100 * s['logit_top1']:.1f}%",
            f"{100 * s['tuned_top1']:.1f}%",
        ]
        assert cells[1:5] == want, (row, want)
    assert f"On {q['tokens']:,} held-out tokens" in " ".join(text.split())


@pytest.mark.parametrize("name", [tl.WEIGHTS_FILE, tl.CONFIG_FILE])
def test_a_lens_file_altered_is_refused_on_load(tmp_path, service, name):
    folder = identity_lens(service, tmp_path / "lens")
    assert tl.load_lens(folder).lens.n_translators == 6
    with open(folder / name, "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\0\0\0\1")
    with pytest.raises(tl.LensError, match="sha256"):
        tl.load_lens(folder)


# the tuned-lens library's TunedLensConfig (tuned_lens/nn/lenses.py, 0.2.0): its fields, in order
LIBRARY_CONFIG_KEYS = [
    "base_model_name_or_path",
    "d_model",
    "num_hidden_layers",
    "bias",
    "base_model_revision",
    "unembed_hash",
    "lens_type",
]


def test_the_shipped_lens_is_kept_in_the_tuned_lens_librarys_layout(service):
    """config.json (the library's config, nothing else in it) and params.pt (its layer_translators' state
    dict, `{s}.weight` and `{s}.bias`) beside gptscope's JSON; no pickled object but tensors in params.pt."""
    assert sorted(p.name for p in SHIPPED.iterdir()) == sorted([tl.CONFIG_FILE, tl.WEIGHTS_FILE, tl.META_FILE])
    config = json.loads((SHIPPED / tl.CONFIG_FILE).read_text())
    assert list(config) == LIBRARY_CONFIG_KEYS
    assert config["d_model"] == 192 and config["num_hidden_layers"] == 6 and config["bias"] is True
    assert config["lens_type"] == "linear_tuned_lens" and config["base_model_name_or_path"] == "shakespeare-cpu"
    assert config["unembed_hash"] == tl.unembed_hash(service.model.lm_head.weight)
    state = torch.load(SHIPPED / tl.WEIGHTS_FILE, map_location="cpu", weights_only=True)
    assert list(state) == [f"{s}.{w}" for s in range(6) for w in ("weight", "bias")]
    assert all(
        v.dtype == torch.float32 and v.shape == ((192, 192) if k.endswith("weight") else (192,))
        for k, v in state.items()
    )
    assert (SHIPPED / tl.WEIGHTS_FILE).stat().st_size < 1_000_000  # the shipped files stay small
    loaded = tl.load_lens(SHIPPED)
    assert loaded.meta["version"] == tl.VERSION
    for s, t in enumerate(loaded.lens.layer_translators):
        assert torch.equal(t.weight, state[f"{s}.weight"]) and torch.equal(t.bias, state[f"{s}.bias"])


def test_an_older_lens_folder_is_still_read(tmp_path):
    """A version 1 folder (lens.safetensors, `layer_translators.{s}.*`, as gptscope wrote before issue #62)
    loads with the same translators; its weights are checked against their sha256 too."""
    from safetensors.torch import save as st_save

    from gptscope.model.sae import save_folder

    shipped = tl.load_lens(SHIPPED)
    meta = {k: v for k, v in shipped.meta.items() if k != "files"}
    blob = st_save({k: v.contiguous() for k, v in shipped.lens.state_dict().items()})
    folder = save_folder(
        tmp_path / "old", {tl.LEGACY_WEIGHTS_FILE: blob}, tl.META_FILE, {**meta, "version": 1}, tl.LensError
    )
    old = tl.load_lens(folder)
    assert old.meta["version"] == 1 and old.lens.n_translators == 6
    new = shipped.lens.state_dict()
    assert all(torch.equal(v, new[k]) for k, v in old.lens.state_dict().items())
    with open(folder / tl.LEGACY_WEIGHTS_FILE, "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\0\0\0\1")
    with pytest.raises(tl.LensError, match="sha256"):
        tl.load_lens(folder)


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"lr": 0}, "lr"),
        ({"time_budget": 0}, "time_budget"),
        ({"name": "jobs"}, "name"),
        ({"name": "../x"}, "name"),
        ({"batch_tokens": 8}, "batch_tokens"),
        ({"corpus": "nope"}, "corpus"),
    ],
)
def test_bad_training_requests_name_the_field(client, payload, field):
    r = client.post("/api/v1/lenses", json=payload)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field, r.text


def test_an_unknown_lens_is_refused_naming_the_field(client):
    r = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["tuned_lens"], "lens": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "lens"
    assert "tuned-s0" in r.json()["detail"][0]["msg"]
    assert client.get("/api/v1/lenses/nope").status_code == 404


def test_the_cli_writes_what_the_api_reads(tmp_path, service):
    """`gptscope lens` with a tiny budget writes a folder gptscope_lens.json + the tuned-lens library's
    config.json and params.pt, every figure recorded; the command line is recorded too."""
    from gptscope.server.cli import main

    out = tmp_path / "cli-lens"
    argv = ["lens", "--max-tokens", "512", "--batch-tokens", "256", "--eval-sequences", "1", "--out", str(out)]
    assert main(argv) == 0
    loaded = tl.load_lens(out)
    assert loaded.meta["steps"] == 2 and loaded.meta["command"].startswith("gptscope lens")
    assert len(loaded.meta["quality"]["stages"]) == 7
    assert sorted(p.name for p in out.iterdir()) == sorted([tl.CONFIG_FILE, tl.WEIGHTS_FILE, tl.META_FILE])
    assert json.loads((out / tl.CONFIG_FILE).read_text())["unembed_hash"] == tl.unembed_hash(
        service.model.lm_head.weight
    )
