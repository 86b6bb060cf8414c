"""Training from the app: runs, 409 while busy, cancel, snapshots, replay, uploads, switching models."""

from __future__ import annotations

import math
import time

import pytest
import torch
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.server.app import create_app
from gptscope.server.config import Settings

FAST = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "small"}


def wait(c, run_id, timeout=120):
    t = time.time()
    while time.time() - t < timeout:
        body = c.get(f"/api/v1/training/{run_id}").json()
        if body["status"] not in ("starting", "running"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish")


@pytest.mark.slow  # trains 60 steps, then replays and scores its snapshots
def test_a_run_trains_snapshots_and_can_be_served(tclient):
    r = tclient.post("/api/v1/training", json={**FAST, "max_steps": 60, "snapshots": [0, 0.5, 1]})
    assert r.status_code == 202
    run_id = r.json()["id"]
    busy = tclient.post("/api/v1/training", json={**FAST, "max_steps": 5})
    if busy.status_code == 409:  # the first run may already be done on a fast machine
        assert busy.json()["running_id"] == run_id
    body = wait(tclient, run_id)
    assert body["status"] == "done", body["error"]
    assert body["step"] == 60 and body["total_steps"] == 60
    assert body["snapshots"] == [0, 30, 60]
    assert body["uniform_loss"] == pytest.approx(math.log(300), abs=1e-3)
    assert body["evals"][-1]["val_loss"] < body["uniform_loss"] - 1.0
    # the training text's unigram and bigram entropies: lines on the loss chart
    assert 0 < body["bigram_loss"] < body["unigram_loss"] < body["uniform_loss"]
    assert [h["step"] for h in body["history"]] == list(range(1, 61))
    later = tclient.get(f"/api/v1/training/{run_id}", params={"since": 55}).json()
    assert [h["step"] for h in later["history"]] == [56, 57, 58, 59, 60]

    names = [c["name"] for c in tclient.get("/api/v1/checkpoints").json()]
    assert {"builtin", run_id, f"{run_id}/step-000030"} <= set(names)

    frames = [tclient.get(f"/api/v1/training/{run_id}/replay", params={"step": s}).json() for s in (0, 60)]
    assert frames[0]["steps"] == [0, 30, 60]
    assert frames[0]["forward"]["attention"]["pattern"] != frames[1]["forward"]["attention"]["pattern"]
    assert frames[0]["forward"]["next_token"][0]["prob"] < frames[1]["forward"]["next_token"][0]["prob"]
    assert len(frames[1]["projection"]["tokens"]) == 300
    bad = tclient.get(f"/api/v1/training/{run_id}/replay", params={"step": 7})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "step"]

    roles = tclient.get(f"/api/v1/training/{run_id}/heads").json()  # head roles at every snapshot
    assert [s["step"] for s in roles["snapshots"]] == [0, 30, 60]
    first, last = roles["snapshots"][0], roles["snapshots"][-1]
    assert len(last["scores"]["induction"]) == 2 and len(last["scores"]["induction"][0]) == 4  # tiny: 2 x 4 heads
    assert first["scores"]["previous-token"] != last["scores"]["previous-token"]
    assert last["in_context"]["second_copy_loss"] > 0 and last["val_loss"] is not None
    assert {d["name"] for d in roles["roles"]} == set(last["best"])

    r = tclient.post("/api/v1/model", json={"checkpoint": run_id})
    assert r.status_code == 200 and r.json()["info"]["vocab_size"] == 300
    assert tclient.get("/api/v1/health").json()["model"] == r.json()["model"]
    assert tclient.post("/api/v1/forward", json={"text": "The quick brown fox"}).status_code == 200
    assert tclient.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200


def test_cancel_keeps_the_last_snapshot_loadable(tclient):
    r = tclient.post("/api/v1/training", json={**FAST, "max_steps": 50_000, "snapshots": [0, 0.5]})
    run_id = r.json()["id"]
    deadline = time.time() + 60
    while tclient.get(f"/api/v1/training/{run_id}").json()["step"] < 3 and time.time() < deadline:
        time.sleep(0.1)
    body = tclient.post(f"/api/v1/training/{run_id}/cancel").json()
    assert body["status"] == "cancelled" and body["snapshots"] == [0]
    assert body["checkpoint"] is None
    names = [c["name"] for c in tclient.get("/api/v1/checkpoints").json()]
    assert f"{run_id}/step-000000" in names and run_id not in names
    assert tclient.post("/api/v1/model", json={"checkpoint": f"{run_id}/step-000000"}).status_code == 200
    assert tclient.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200
    # a new run may start once the old one is cancelled
    r = tclient.post("/api/v1/training", json={**FAST, "max_steps": 3, "snapshots": []})
    assert r.status_code == 202
    assert wait(tclient, r.json()["id"])["status"] == "done"


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "..\\x", "a/b", ".hidden", ""])
def test_path_like_names_are_refused(tclient, name):
    r = tclient.post("/api/v1/training", json={**FAST, "corpus": name, "max_steps": 3})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "corpus"
    r = tclient.post("/api/v1/model", json={"checkpoint": name})
    assert r.status_code == 422
    r = tclient.post("/api/v1/corpora", files={"file": ("x.txt", b"hello there")}, data={"name": name})
    assert r.status_code == 422


def test_unknown_corpus_and_checkpoint(tclient):
    r = tclient.post("/api/v1/training", json={**FAST, "corpus": "nothere", "max_steps": 3})
    assert r.status_code == 422 and "upload" in r.json()["detail"][0]["msg"]
    assert tclient.post("/api/v1/model", json={"checkpoint": "0123456789ab"}).status_code == 404
    assert tclient.get("/api/v1/training/0123456789ab").status_code == 404
    assert tclient.delete("/api/v1/training/0123456789ab").status_code == 404


def test_uploads_that_are_not_text_empty_or_too_big_write_nothing(tclient, monkeypatch, app):
    folder = tclient.app.state.jobs["training"].corpora_dir
    before = sorted(p.name for p in folder.iterdir())
    r = tclient.post("/api/v1/corpora", files={"file": ("b.bin", b"\xff\xfe\x00binary")}, data={"name": "binary"})
    assert r.status_code == 422 and "UTF-8" in r.json()["detail"][0]["msg"]
    r = tclient.post("/api/v1/corpora", files={"file": ("e.txt", b"")}, data={"name": "empty"})
    assert r.status_code == 422 and "empty" in r.json()["detail"][0]["msg"]
    monkeypatch.setattr(corpus_mod, "MAX_CORPUS_BYTES", 1000)
    r = tclient.post("/api/v1/corpora", files={"file": ("big.txt", b"a" * 1001)}, data={"name": "big"})
    assert r.status_code == 413 and "1,000" in r.json()["detail"][0]["msg"]
    assert sorted(p.name for p in folder.iterdir()) == before


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"max_steps": 0}, "max_steps"),
        ({"time_budget": -1}, "time_budget"),
        ({"time_budget": 1e9}, "time_budget"),
        ({"max_steps": 5, "max_lr": 0}, "max_lr"),
        ({"max_steps": 5, "preset": "gpt2"}, "preset"),
        ({"max_steps": 5, "vocab_size": 10}, "vocab_size"),
        ({"max_steps": 5, "overrides": {"n_layer": 99}}, "overrides"),
        ({"max_steps": 5, "schedule": "linear"}, "schedule"),
        ({"max_steps": 5, "schedule": "wsd", "cooldown": 0}, "cooldown"),
        ({"max_steps": 5, "schedule": "wsd", "cooldown": 1.5}, "cooldown"),
    ],
)
def test_bad_training_requests(tclient, payload, field):
    r = tclient.post("/api/v1/training", json={**FAST, **payload})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][1] == field


def test_a_warmup_stable_decay_run_from_the_app_records_its_schedule(tclient):
    """schedule="wsd" with a cooldown share trains with it: checkpoint.json records the schedule, and
    the rates the trainer set hold at the peak, then fall in a line over the last half."""
    req = {**FAST, "max_steps": 20, "warmup_steps": 2, "schedule": "wsd", "cooldown": 0.5, "snapshots": [], "seed": 77}
    r = tclient.post("/api/v1/training", json=req)
    assert r.status_code == 202, r.text
    body = wait(tclient, r.json()["id"])
    assert body["status"] == "done" and body["request"]["schedule"] == "wsd" and body["request"]["cooldown"] == 0.5
    schedule = ckpt.read_meta(tclient.app.state.jobs["training"].runs_dir / r.json()["id"]).schedule
    assert schedule["kind"] == "warmup_stable_decay" and schedule["cooldown"] == 0.5
    lr = [h["lr"] for h in body["history"]]  # update k used the schedule's step k - 1
    peak = schedule["max_lr"]
    assert lr[1:10] == [peak] * 9 and lr[10] == peak and peak > lr[12] > lr[16] > lr[19]


def test_exactly_one_of_steps_or_time(tclient):
    r = tclient.post("/api/v1/training", json={**FAST})
    assert r.status_code == 422 and "max_steps" in r.json()["detail"][0]["msg"]


@pytest.mark.slow  # trains a BPE on all of Shakespeare and encodes it
def test_identical_shakespeare_requests_are_cached_and_runs_survive_a_restart(tclient, service):
    req = {"preset": "tiny", "vocab_size": 300, "batch_size": 4, "max_steps": 4, "snapshots": [], "seed": 3}
    first = tclient.post("/api/v1/training", json=req)
    assert first.status_code == 202
    run_id = first.json()["id"]
    assert wait(tclient, run_id)["status"] == "done"
    again = tclient.post("/api/v1/training", json=req)
    assert again.status_code == 200 and again.json()["id"] == run_id and again.json()["cached"] is True
    assert tclient.get(f"/api/v1/training/{run_id}").json()["cached"] is False
    # a new app on the same data folder knows the finished run
    data_dir = tclient.app.state.jobs["training"].data_dir
    with TestClient(create_app(Settings(data_dir=data_dir, allow_hosts=["testserver"]), service=service)) as c2:
        body = c2.get(f"/api/v1/training/{run_id}").json()
        assert body["status"] == "done" and body["step"] == 4 and len(body["history"]) == 4


def test_experiments_are_listed_with_valid_requests(tclient):
    exps = tclient.get("/api/v1/experiments").json()
    names = {e["name"] for e in exps}
    assert {"causal-mask", "norm-warmup", "weight-tying"} <= names
    causal = next(e for e in exps if e["name"] == "causal-mask")
    assert [v["request"]["overrides"]["causal"] for v in causal["variants"]] == [None, False]
    # the texts' claims without a number, as runs: dropout's ablation, NoPE beside RoPE, a sliding window
    by_name = {e["name"]: e for e in exps}
    assert [v["request"]["overrides"]["dropout"] for v in by_name["dropout"]["variants"]] == [0.0, 0.1]
    assert [v["request"]["overrides"]["pos"] for v in by_name["positions"]["variants"]] == [None, "rope", "none"]
    assert [v["request"]["overrides"]["window"] for v in by_name["window"]["variants"]] == [None, 16]


def test_the_served_model_is_untouched_while_a_run_trains(tclient, service):
    before = tclient.post("/api/v1/forward", json={"text": "To be, or not to be", "include": ["next_token"]}).json()
    weights = {k: v.clone() for k, v in service.model.state_dict().items()}
    r = tclient.post("/api/v1/training", json={**FAST, "max_steps": 50_000, "snapshots": [], "seed": 11})
    run_id = r.json()["id"]
    try:
        seen = 0
        deadline = time.time() + 30
        while seen < 20 and time.time() < deadline:
            now = tclient.post(
                "/api/v1/forward", json={"text": "To be, or not to be", "include": ["next_token"]}
            ).json()
            assert now["next_token"] == before["next_token"]
            assert not service.model.training
            if tclient.get(f"/api/v1/training/{run_id}").json()["step"] > 0:
                seen += 1
        assert seen == 20, "the run never got going"
    finally:
        assert tclient.post(f"/api/v1/training/{run_id}/cancel").json()["status"] == "cancelled"
    assert all(torch.equal(v, service.model.state_dict()[k]) for k, v in weights.items())


def test_delete_removes_a_run_and_its_checkpoints_cancel_keeps_it(tclient):
    r = tclient.post("/api/v1/training", json={**FAST, "max_steps": 8, "snapshots": [0, 1], "seed": 4242})
    run_id = r.json()["id"]
    assert wait(tclient, run_id)["status"] == "done"
    assert tclient.post(f"/api/v1/training/{run_id}/cancel").json()["status"] == "done"  # a finished run stays as it is
    assert tclient.post("/api/v1/model", json={"checkpoint": run_id}).status_code == 200
    r = tclient.delete(f"/api/v1/training/{run_id}")  # the served model is this run's: refused, nothing removed
    assert r.status_code == 409 and "switch to another model" in r.json()["detail"]
    assert tclient.get(f"/api/v1/training/{run_id}").status_code == 200
    assert tclient.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200
    assert tclient.delete(f"/api/v1/training/{run_id}").status_code == 204
    for path in (f"/api/v1/training/{run_id}", f"/api/v1/training/{run_id}/replay?step=0"):
        assert tclient.get(path).status_code == 404, path
    assert tclient.delete(f"/api/v1/training/{run_id}").status_code == 404
    names = [c["name"] for c in tclient.get("/api/v1/checkpoints").json()]
    assert not [n for n in names if n.startswith(run_id)]
    assert tclient.post("/api/v1/model", json={"checkpoint": run_id}).status_code == 404


def test_a_run_trains_on_every_core_while_requests_keep_their_own_thread_count(service):
    """Torch's thread count belongs to the thread that sets it: a job's thread takes every core (as
    `gptscope train` does), and a request thread made after it still runs the served model on the
    service's own count (one for a small model), not on the count the job left behind."""
    import threading

    from gptscope.server.jobs import JOB_THREADS, JobRunner

    seen = {}
    job = JobRunner("job", "jobs", RuntimeError).start(
        lambda job: seen.setdefault("job", torch.get_num_threads()), None
    )
    job.thread.join()
    assert seen["job"] == JOB_THREADS == max(1, __import__("os").cpu_count() or 1)

    def request() -> None:
        with service.run():
            seen["request"] = torch.get_num_threads()

    t = threading.Thread(target=request)
    t.start()
    t.join()
    assert seen["request"] == service.threads == 1  # the built-in model is small
