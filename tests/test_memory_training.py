"""Training-like jobs and the process' memory budget (issue #59): a training run, a fine-tuning job and
an SAE, transcoder or tuned-lens training job each estimate their peak bytes before any work
(model/train.py, finetune.py, sae.py, transcoders.py, tuned_lens.py) and hand them to the job runner,
which refuses at once what could never fit and queues what does not fit beside the jobs going."""

from __future__ import annotations

import ctypes
import gc
import os
import time

import pytest
from small_text import SMALL_TEXT

from gptscope.model import sae as sae_mod
from gptscope.model.train import TrainConfig, corpus_bytes, run_peak_bytes, train, train_memory
from gptscope.server import memory

MiB = 2**20
TINY = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "small", "snapshots": []}
# The issue's run: sizes the schema allows, accepted before and killed at 7.5 GB under a 10 GiB limit
ISSUE = {
    "max_steps": 10,
    "batch_size": 256,
    "seq_len": 1024,
    "overrides": {"d_model": 768, "n_layer": 12, "n_ctx": 1024},
}
SAE_SMALL = {"layer": 0, "batch_tokens": 1024, "eval_sequences": 1, "ce_sequences": 1, "corpus": "small"}


@pytest.fixture
def budget():
    """Set the budget's total for one test (configure(None): the default), restored after it."""
    before = memory.BUDGET.total
    yield memory.BUDGET.configure
    memory.BUDGET.configure(before)


def refusal(r) -> tuple[list, str]:
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    return detail["loc"], detail["msg"]


def status(c, path: str, job_id: str) -> str:
    return c.get(f"/api/v1/{path}/{job_id}").json()["status"]


def wait_for(c, path: str, job_id: str, statuses: tuple[str, ...], timeout: float = 60) -> str:
    t = time.time()
    while time.time() - t < timeout:
        if (s := status(c, path, job_id)) in statuses:
            return s
        time.sleep(0.05)
    raise AssertionError(f"{path}/{job_id} stayed {status(c, path, job_id)}, not one of {statuses}")


def test_the_issues_run_is_refused_at_once_naming_batch_size(tclient, budget):
    budget(None)
    runs = tclient.get("/api/v1/training").json()
    t = time.time()
    loc, msg = refusal(tclient.post("/api/v1/training", json=ISSUE))
    assert time.time() - t < 5
    assert loc == ["body", "batch_size"]
    assert "this training run would take about" in msg and "MiB of memory" in msg and "batch_size at most" in msg
    assert tclient.get("/api/v1/training").json() == runs  # nothing was started


def test_a_small_budget_refuses_a_small_run_and_accepts_a_tiny_one(tclient, budget):
    budget(memory.FLOOR + 100 * MiB)
    loc, msg = refusal(
        tclient.post("/api/v1/training", json={**TINY, "preset": "cpu", "batch_size": 64, "max_steps": 3})
    )
    assert loc == ["body", "batch_size"] and "100 MiB" in msg, msg
    r = tclient.post("/api/v1/training", json={**TINY, "max_steps": 3})
    assert r.status_code == 202, r.text
    assert wait_for(tclient, "training", r.json()["id"], ("done", "failed", "cancelled")) == "done"


@pytest.mark.parametrize(
    "path, body, fields",
    [
        ("saes", SAE_SMALL, {"batch_tokens", "expansion", "eval_sequences", "ce_sequences"}),
        ("transcoders", {"corpus": "small", "name": "mem"}, {"batch_tokens", "expansion", "eval_sequences"}),
        ("lenses", {"corpus": "small", "name": "mem"}, {"batch_tokens", "eval_sequences"}),
        ("finetune", {"task": "genre"}, {"checkpoint"}),
    ],
)
def test_every_training_job_kind_is_refused_naming_a_field_when_it_cannot_fit(tclient, budget, path, body, fields):
    budget(memory.FLOOR + 8 * MiB)
    jobs = tclient.get(f"/api/v1/{path}" + ("" if path == "finetune" else "/jobs")).json()
    loc, msg = refusal(tclient.post(f"/api/v1/{path}", json=body))
    assert loc[0] == "body" and loc[-1] in fields and ("training job" in msg or "fine-tuning job" in msg), (loc, msg)
    assert "would take about" in msg and "ask for" in msg
    assert tclient.get(f"/api/v1/{path}" + ("" if path == "finetune" else "/jobs")).json() == jobs


def _rss(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/status VmHWM")
def test_the_estimate_bounds_what_a_tiny_run_measures(tmp_path):
    """A few updates of a tiny run (in this process: VmHWM reset, then the peak above the memory before);
    a first run of the same config warms torch's kernels and the prepared text."""
    corpus = tmp_path / "small.txt"
    corpus.write_text(SMALL_TEXT, encoding="utf-8")
    tc = TrainConfig(
        corpus=str(corpus), preset="tiny", vocab_size=300, batch_size=8, max_steps=4, snapshots=(0.0, 1.0), seed=1
    )
    train(TrainConfig(**{**tc.__dict__, "max_steps": 1}), out=tmp_path / "warm", progress=False)
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc: freed memory back to the system first
    if trim is not None:
        trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss("VmRSS")
    train(tc, out=tmp_path / "run", progress=False)
    measured = _rss("VmHWM") - before
    estimate = run_peak_bytes(tc, corpus_bytes(str(corpus)))
    parts = train_memory(tc, corpus_bytes(str(corpus)))
    assert measured <= estimate, (measured / MiB, {k: v / MiB for k, v in parts.items()})


def test_a_second_job_waits_queued_until_the_first_is_cancelled(tclient, budget, service):
    """A training run and an SAE job of the served model: each fits the budget, both together do not."""
    run_bytes = run_peak_bytes(
        TrainConfig(corpus="x", preset="tiny", vocab_size=300, batch_size=8, max_steps=1, optimizer="muon"),
        len(SMALL_TEXT.encode()),
    )
    cfg = service.model.cfg
    sae_bytes = sae_mod.peak_bytes(
        sae_mod.SAETrainConfig(**{k: v for k, v in SAE_SMALL.items() if k != "corpus"}), cfg, len(SMALL_TEXT.encode())
    )
    budget(memory.FLOOR + max(run_bytes, sae_bytes) + min(run_bytes, sae_bytes) // 2)
    first = tclient.post("/api/v1/training", json={**TINY, "max_steps": 100_000}).json()["id"]
    t = time.time()
    while not any(label == f"training run {first}" for label, _ in memory.BUDGET.held()):  # its bytes taken
        assert time.time() - t < 30, memory.BUDGET.held()
        time.sleep(0.02)
    second = tclient.post("/api/v1/saes", json={**SAE_SMALL, "time_budget": 60, "max_tokens": 10**9})
    assert second.status_code == 202, second.text
    second = second.json()["id"]
    try:
        assert wait_for(tclient, "saes/jobs", second, ("queued",)) == "queued"
        assert status(tclient, "training", first) in ("starting", "running")
        assert tclient.post(f"/api/v1/training/{first}/cancel").json()["status"] == "cancelled"
        assert wait_for(tclient, "saes/jobs", second, ("running", "done", "failed")) == "running"
        assert tclient.post(f"/api/v1/saes/jobs/{second}/cancel").json()["status"] == "cancelled"
    finally:
        tclient.post(f"/api/v1/training/{first}/cancel")
        tclient.post(f"/api/v1/saes/jobs/{second}/cancel")
