"""Training end to end on a tiny text: the loss falls, checkpoints round-trip and refuse bad files,
resuming reproduces an uninterrupted run, DDP replicas agree, and the CLI reports and refuses."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model.corpus import Corpus, CorpusError
from gptscope.model.train import TrainConfig, evaluate_text, train
from gptscope.server.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(n_ctx=32, d_model=32, n_head=2)  # on top of the 'tiny' preset's 2 layers


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # tiny tensors: one thread avoids oversubscription on a shared CPU (many times faster)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def english(n_lines: int = 150, seed: int = 0) -> str:
    rng = random.Random(seed)
    subj = ["the cat", "a dog", "the old man", "my sister", "the king", "our teacher"]
    verb = ["sat on", "looked at", "walked to", "found", "carried", "painted"]
    obj = ["the mat.", "a red ball.", "the river.", "the small house.", "his crown.", "the garden."]
    return (
        "\n".join(f"{rng.choice(subj).capitalize()} {rng.choice(verb)} {rng.choice(obj)}" for _ in range(n_lines))
        + "\n"
    )


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    p.write_text(english(), encoding="utf-8")  # about 4.4 KB
    return p


def tiny_tc(corpus: Path, **kw) -> TrainConfig:
    base = dict(
        corpus=str(corpus),
        preset="tiny",
        tokenizer="bpe",
        vocab_size=300,
        batch_size=8,
        warmup_steps=5,
        max_lr=1e-2,
        eval_batches=1,
        device="cpu",
        precision="fp32",
        optimizer="adamw",
        overrides=dict(TINY),
    )
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def trained(corpus_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "ckpt"
    res = train(tiny_tc(corpus_file, max_steps=80), out=out, progress=False, command="pytest tiny run")
    return res, out


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: dict, b: dict, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


# ---- training ----------------------------------------------------------------------------------


def test_training_lowers_the_loss_well_below_uniform(trained):
    res, _ = trained
    meta = res.meta
    ln_v = math.log(res.config.vocab_size)
    assert res.config.vocab_size == 300 and res.config.n_ctx == 32 and res.config.n_layer == 2
    assert meta.uniform_loss == pytest.approx(ln_v)
    assert meta.step == 80 and len(res.history) == 80
    first, last = res.history[0], meta.evals[-1]
    assert abs(first["loss"] - ln_v) < 0.3  # starts near chance
    assert last["step"] == 80
    assert last["val_loss"] < ln_v - 1.5, last
    assert last["train_loss"] < ln_v - 1.5, last
    # and the returned model really is that good on the held-out text
    enc = res.encoding()
    _, val_text = Corpus("tiny.txt", english()).split(meta.corpus["val_fraction"])
    assert evaluate_text(res.model, enc, val_text)["nats_per_token"] < ln_v - 1.5


# ---- checkpoints -------------------------------------------------------------------------------


def test_checkpoint_round_trip(trained, tmp_path):
    res, out = trained
    meta = json.loads((out / "checkpoint.json").read_text())
    for key in (
        "config",
        "tokenizer",
        "corpus",
        "step",
        "history",
        "schedule",
        "command",
        "evals",
        "weights",
        "weights_sha256",
        "optimizer",
    ):
        assert key in meta, key
    # the per-update history is a hashed JSON-lines file beside checkpoint.json, not inside it
    history = out / meta["history"]
    assert history.name == f"history-{meta['history_sha256'][:12]}.jsonl"
    assert hashlib.sha256(history.read_bytes()).hexdigest() == meta["history_sha256"]
    assert [json.loads(line) for line in history.read_text().splitlines()] == res.history
    assert ckpt.read_history(out, meta) == res.history and len(res.history) == 80
    assert meta["command"] == "pytest tiny run"
    assert meta["schedule"]["total_steps"] == 80 and meta["schedule"]["kind"] == "warmup_cosine"
    assert meta["corpus"]["chars"] == len(english()) and meta["step"] == 80 and meta["final"] is True
    assert meta["tokenizer"]["kind"] == "bpe"
    weights = out / meta["weights"]
    assert weights.name == f"weights-{meta['weights_sha256'][:12]}.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == meta["weights_sha256"]

    loaded = ckpt.load(out)
    assert loaded.config == res.config
    assert_same_weights(state(loaded.model), state(res.model), atol=0)
    idx = torch.randint(0, res.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    res.model.eval()
    with torch.no_grad():
        assert torch.equal(loaded.model(idx)[0], res.model(idx)[0])
    assert loaded.encoding().encode_ordinary("The cat sat on the mat.") == res.encoding().encode_ordinary(
        "The cat sat on the mat."
    )

    # saving again into the same folder replaces the files and leaves no stray ones behind
    torch.manual_seed(1)
    with torch.no_grad():
        loaded.model.wpe.weight.add_(torch.randn_like(loaded.model.wpe.weight))
    copy = tmp_path / "c"
    shutil.copytree(out, copy)
    ckpt.save(copy, loaded.model, loaded.meta, history=loaded.read_history()[:10])
    again = ckpt.load(copy)
    assert torch.equal(again.model.wpe.weight, loaded.model.wpe.weight)
    assert not torch.equal(again.model.wpe.weight, res.model.wpe.weight)
    assert again.read_history() == res.history[:10]
    assert sorted(p.name for p in copy.iterdir()) == sorted(["checkpoint.json", again.meta.weights, again.meta.history])


@pytest.fixture
def ckpt_copy(trained, tmp_path) -> Path:
    _, out = trained
    dst = tmp_path / "ckpt"
    shutil.copytree(out, dst)
    return dst


def weights_path(folder: Path) -> Path:
    return folder / json.loads((folder / "checkpoint.json").read_text())["weights"]


def test_truncated_weights_are_refused(ckpt_copy):
    w = weights_path(ckpt_copy)
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(ckpt.CheckpointError, match="sha256"):
        ckpt.load(ckpt_copy)


def test_altered_weights_are_refused(ckpt_copy):
    w = weights_path(ckpt_copy)
    data = bytearray(w.read_bytes())
    data[-7] ^= 0x01  # one bit of one float
    w.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="does not match the sha256"):
        ckpt.load(ckpt_copy)


class _Payload:
    """Unpickling this creates the file at `path` (standing in for arbitrary code)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickle_disguised_as_weights_is_never_unpickled(ckpt_copy, tmp_path):
    sentinel = tmp_path / "pwned"
    blob = pickle.dumps({"wte.weight": _Payload(str(sentinel))})
    # the payload is live: unpickling it (elsewhere) does create a file
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(str(probe)))).close()
    assert probe.exists()

    meta_path = ckpt_copy / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    weights_path(ckpt_copy).unlink()
    (ckpt_copy / meta["weights"]).write_bytes(blob)
    # as it is: the hash in checkpoint.json does not match
    with pytest.raises(ckpt.CheckpointError, match="sha256"):
        ckpt.load(ckpt_copy)
    assert not sentinel.exists()
    # an attacker who also rewrites the hash still only gets a parse error
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="not a valid safetensors file"):
        ckpt.load(ckpt_copy)
    # and the same under a new name that follows the convention
    name = f"weights-{meta['weights_sha256'][:12]}.safetensors"
    (ckpt_copy / meta["weights"]).rename(ckpt_copy / name)
    meta["weights"] = name
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="not a valid safetensors file"):
        ckpt.load(ckpt_copy)
    assert not sentinel.exists()


def test_missing_or_foreign_metadata_is_refused(ckpt_copy, tmp_path):
    (ckpt_copy / "checkpoint.json").unlink()
    with pytest.raises(ckpt.CheckpointError, match=r"no checkpoint\.json"):
        ckpt.load(ckpt_copy)
    with pytest.raises(ckpt.CheckpointError, match=r"no checkpoint\.json"):
        ckpt.load(tmp_path / "does-not-exist")


def test_missing_weights_and_path_tricks_are_refused(ckpt_copy):
    meta_path = ckpt_copy / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    for bad in ("../ckpt/" + meta["weights"], ".hidden"):
        meta_path.write_text(json.dumps({**meta, "weights": bad}))
        with pytest.raises(ckpt.CheckpointError, match="not a plain file name"):
            ckpt.load(ckpt_copy)
    meta_path.write_text(json.dumps({**meta, "config": {**meta["config"], "d_model": 64}}))
    with pytest.raises(ckpt.CheckpointError, match="shape"):
        ckpt.load(ckpt_copy)
    meta_path.write_text(json.dumps(meta))
    weights_path(ckpt_copy).unlink()
    with pytest.raises(ckpt.CheckpointError, match="missing"):
        ckpt.load(ckpt_copy)


# ---- resuming ----------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_from_a_final_checkpoint_continues_exactly(corpus_file, tmp_path, optimizer):
    """N steps, then resume to 2N (max_steps is the total) == 2N in one go.

    The cosine schedule is planned from max_steps, so an N-step run anneals differently from the
    first half of a 2N-step run; min_lr_ratio=1 (flat after warmup) makes the schedules agree, so
    everything else that resuming restores (weights, AdamW moments and step count, Muon's momentum,
    batch streams) is what this compares."""
    N = 6
    kw = dict(min_lr_ratio=1.0, optimizer=optimizer, muon_lr=0.02)
    whole = train(tiny_tc(corpus_file, max_steps=2 * N, **kw), progress=False)
    train(tiny_tc(corpus_file, max_steps=N, **kw), out=tmp_path / "half", progress=False)
    resumed = train(
        tiny_tc(corpus_file, max_steps=2 * N, **kw), out=tmp_path / "resumed", resume=tmp_path / "half", progress=False
    )
    assert resumed.meta.step == 2 * N
    assert [h["step"] for h in resumed.history] == list(range(1, 2 * N + 1))
    assert_same_weights(state(resumed.model), state(whole.model))
    for a, b in zip(resumed.history, whole.history):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5) and a["lr"] == b["lr"]

    # without the optimizer state the continuation is a different run
    train(tiny_tc(corpus_file, max_steps=N, **kw), out=tmp_path / "noopt", progress=False, save_optimizer=False)
    fresh_adam = train(tiny_tc(corpus_file, max_steps=2 * N, **kw), resume=tmp_path / "noopt", progress=False)
    assert max((fresh_adam.model.state_dict()[k] - v).abs().max() for k, v in state(whole.model).items()) > 1e-4


def test_resume_from_a_snapshot_reproduces_the_uninterrupted_run(corpus_file, tmp_path):
    """A run of 2N steps with the (default) cosine schedule snapshots at N; resuming from that
    snapshot ends with the same weights as the run that never stopped."""
    N = 6
    whole = train(tiny_tc(corpus_file, max_steps=2 * N, snapshots=(0.5,)), out=tmp_path / "whole", progress=False)
    snap = tmp_path / "whole" / "snapshots" / f"step-{N:06d}"
    meta = ckpt.read_meta(snap)
    assert meta.step == N and meta.schedule["total_steps"] == 2 * N and meta.final is False
    resumed = train(tiny_tc(corpus_file, max_steps=2 * N), out=tmp_path / "resumed", resume=snap, progress=False)
    assert_same_weights(state(resumed.model), state(whole.model))
    assert [h["lr"] for h in resumed.history] == [h["lr"] for h in whole.history]
    assert len(ckpt.read_history(snap, meta)) == N  # a snapshot keeps the history up to its step


def test_resume_with_a_time_budget_trains_more(trained, corpus_file, tmp_path):
    res, out = trained
    more = train(tiny_tc(corpus_file, time_budget=0.3), resume=out, out=tmp_path / "more", progress=False)
    assert more.meta.step > res.meta.step
    assert len(more.history) == more.meta.step


# ---- distributed data parallel -----------------------------------------------------------------


@pytest.mark.slow  # torchrun starts two training processes
def test_ddp_two_ranks_end_with_identical_weights(corpus_file, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GPTSCOPE_RANK_DIGESTS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "gptscope.model.train",
        "--corpus",
        str(corpus_file),
        "--preset",
        "tiny",
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "300",
        "--max-steps",
        "6",
        "--batch-size",
        "4",
        "--warmup-steps",
        "2",
        "--device",
        "cpu",
        "--set",
        "n_ctx=32",
        "--set",
        "d_model=32",
        "--set",
        "n_head=2",
        "--no-progress",
        "--out",
        str(out),
    ]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    digests = {r: (out / f"rank-{r}.weights.sha256").read_text().strip() for r in (0, 1)}
    assert digests[0] == digests[1]
    meta = json.loads((out / "checkpoint.json").read_text())
    assert meta["world_size"] == 2 and meta["step"] == 6
    # the digest is the hash of the very weights file rank 0 saved
    assert digests[0] == meta["weights_sha256"]
    line = json.loads(p.stdout.strip().splitlines()[-1])  # one JSON summary, from rank 0 only
    assert line["step"] == 6 and len(p.stdout.strip().splitlines()) == 1


# ---- command line ------------------------------------------------------------------------------


def test_cli_eval_prints_one_json_line(trained, corpus_file, capsys):
    res, out = trained
    assert cli_main(["eval", "--checkpoint", str(out), "--text", str(corpus_file)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    direct = evaluate_text(res.model, res.encoding(), corpus_file.read_text())
    assert r["nats_per_token"] == pytest.approx(direct["nats_per_token"], rel=1e-6)
    assert r["nats_per_token"] < math.log(300) - 1.5
    assert r["bits_per_char"] == pytest.approx(r["nats_per_token"] * r["tokens"] / math.log(2) / r["chars"])
    assert r["chars"] == len(corpus_file.read_text()) - len(
        res.encoding().decode(res.encoding().encode_ordinary(corpus_file.read_text())[:1])
    )
    assert r["perplexity"] == pytest.approx(math.exp(r["nats_per_token"]))


BAD_TEXTS = {
    "not-utf8": (b"caf\xe9 au lait\n" * 50, "not valid UTF-8"),
    "empty": (b"", "empty"),
    "whitespace": (b"  \n\n\t ", "empty"),
}


@pytest.mark.parametrize("kind", list(BAD_TEXTS))
def test_cli_eval_refuses_bad_text(trained, tmp_path, capsys, kind):
    _, out = trained
    data, msg = BAD_TEXTS[kind]
    f = tmp_path / "bad.txt"
    f.write_bytes(data)
    assert cli_main(["eval", "--checkpoint", str(out), "--text", str(f)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("error:") and msg in cap.err


def test_cli_eval_refuses_a_one_token_text_and_a_bad_checkpoint(trained, tmp_path, capsys):
    _, out = trained
    f = tmp_path / "short.txt"
    f.write_text("The")
    assert cli_main(["eval", "--checkpoint", str(out), "--text", str(f)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "too short" in cap.err
    assert cli_main(["eval", "--checkpoint", str(tmp_path / "nope"), "--text", str(f)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "checkpoint.json" in cap.err


def train_args(corpus: Path, out: Path) -> list[str]:
    return [
        "train",
        "--corpus",
        str(corpus),
        "--preset",
        "tiny",
        "--vocab-size",
        "300",
        "--max-steps",
        "3",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--set",
        "n_ctx=32",
        "--set",
        "d_model=32",
        "--no-progress",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("kind", [*BAD_TEXTS, "too-small", "missing"])
def test_cli_train_refuses_bad_corpora_and_writes_nothing(tmp_path, capsys, kind):
    f = tmp_path / "corpus.txt"
    if kind == "too-small":
        f.write_text(english(3))  # ~100 characters: fewer tokens than one sequence of 32 + 1
        msg = "too few for one sequence"
    elif kind != "missing":
        data, msg = BAD_TEXTS[kind]
        f.write_bytes(data)
    else:
        msg = "is not a file"
    out = tmp_path / "out"
    assert cli_main(train_args(f, out)) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("error:") and msg in cap.err, cap.err
    assert not out.exists()


def test_cli_train_then_generate(corpus_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(train_args(corpus_file, out)) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["step"] == 3 and summary["out"] == str(out)
    assert ckpt.read_meta(out).command.startswith("gptscope train ")
    assert (
        cli_main(["generate", "--checkpoint", str(out), "--prompt", "The cat", "--max-new-tokens", "5", "--seed", "1"])
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("The cat")
    with pytest.raises(CorpusError):
        train(tiny_tc(tmp_path / "nothing-here.txt", max_steps=1), progress=False)


def test_a_corpus_made_ready_once_is_reused_and_the_cache_is_bounded_by_bytes(tmp_path, monkeypatch):
    """Runs on the same text, split and tokenizer share one tokenization (model/train.py's cache);
    another vocabulary is made anew, and past the byte limit the least recently used entry goes."""
    from gptscope.model import corpus as corpus_mod
    from gptscope.model import train as train_mod

    monkeypatch.setattr(train_mod, "_prepared", {})
    text = "To be, or not to be, that is the question.\n" * 300
    c = corpus_mod.Corpus("q", text)
    a = train_mod.prepared_data(c, train_mod.TrainConfig(vocab_size=300))
    assert train_mod.prepared_data(corpus_mod.Corpus("other name", text), train_mod.TrainConfig(vocab_size=300)) is a
    assert not a.train_ids.flags.writeable  # shared: no run may change it
    b = train_mod.prepared_data(c, train_mod.TrainConfig(vocab_size=280))
    assert b is not a and b.tok_spec != a.tok_spec
    fresh = train_mod.prepared_data(
        corpus_mod.Corpus("q2", text + "Ay, there's the rub.\n"), train_mod.TrainConfig(vocab_size=300)
    )
    assert fresh is not a and len(fresh.train_ids) > len(a.train_ids)
    monkeypatch.setattr(train_mod, "PREPARED_CACHE_BYTES", a.nbytes + b.nbytes + fresh.nbytes - 1)
    train_mod.prepared_data(c, train_mod.TrainConfig(vocab_size=300))  # a: the most recent again
    train_mod.prepared_data(c, train_mod.TrainConfig(vocab_size=270))  # over the limit: b (least recent) goes
    assert b not in train_mod._prepared.values() and a in train_mod._prepared.values()
    # what the cache returns is what a run would have made on its own
    spec = train_mod.build_tokenizer(
        train_mod.TrainConfig(vocab_size=300), c.split(train_mod.TrainConfig().val_fraction)[0]
    )
    assert spec == a.tok_spec


def test_a_run_cancelled_while_its_tokenizer_trains_stops_there(tmp_path):
    """A cancel is heard while the corpus is made ready, not only between updates: training the
    plays' tokenizer takes seconds on 2 cores, and a cancel waited for all of it."""
    from gptscope.model import train as train_mod
    from gptscope.model.errors import Cancelled

    asked = []
    text = tmp_path / "play.txt"
    rng = random.Random(0)  # words enough for a few hundred merges
    text.write_text("\n".join(" ".join("".join(rng.choices("abcdefgh", k=5)) for _ in range(9)) for _ in range(400)))

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(Cancelled, match="while training the tokenizer, at merge"):
        train_mod.prepared_data(
            train_mod.corpus_mod.load(str(text)), train_mod.TrainConfig(vocab_size=400), should_stop=stop
        )
    with pytest.raises(Cancelled, match="while training the tokenizer"):
        train(tiny_tc(text, max_steps=1, vocab_size=400), progress=False, should_stop=lambda: True)
