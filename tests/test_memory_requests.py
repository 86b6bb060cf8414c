"""Memory under hostile input (issue #59), the request side: a forward trace, an activation-patching
sweep and an edge-circuit search each estimate their peak bytes before any work and hold them in the
process' memory budget (server/memory.py). Over the budget, a 422 names the field to change (a trace's
attention maps: `include`); while other work holds the bytes, a request waits and then gets a 503 with
Retry-After, and a job waits as "queued". The trace's estimate bounds its measured peak."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import pytest

from gptscope.server import memory
from gptscope.server.explain import circuits as explain_circuits
from gptscope.server.explain import forward as fwd
from gptscope.server.explain import patch as explain_patch
from gptscope.server.schemas.circuits import CircuitRequest
from gptscope.server.schemas.forward import ForwardRequest
from gptscope.server.schemas.patch import PatchRequest

LONG = "ROMEO:\n" + "But soft, what light through yonder window breaks? " * 40  # past the 256-token context


@pytest.fixture
def budget(monkeypatch):
    """A budget of the test's own (nothing else's work in it), its total set by the test: the
    process' one is left as it was."""
    own = memory.MemoryBudget()
    monkeypatch.setattr(memory, "BUDGET", own)
    yield own
    own.configure(None)


@pytest.fixture(scope="module")
def caesar(client):
    p = {p["name"]: p for p in client.get("/api/v1/patch/pairs").json()}["dead-caesar"]
    return {"clean": p["clean"], "corrupted": p["corrupted"], "answer": p["answer"], "wrong": p["wrong"]}


def trace_need(service, include: list[str], binary: bool = False) -> memory.Need:
    req = ForwardRequest(text=LONG, include=include, truncate=True)
    return fwd.need(service, fwd.prepare(service, req), binary)


def refused(r) -> tuple[list, str]:
    assert r.status_code == 422, r.text
    return r.json()["detail"][0]["loc"], r.json()["detail"][0]["msg"]


class Holder:
    """Bytes of the budget held in other threads (other work going) until released or the test ends."""

    def __init__(self, budget: memory.MemoryBudget) -> None:
        self.budget, self.done, self.threads = budget, threading.Event(), []

    def __call__(self, n: int, label: str = "another trace") -> None:
        took = threading.Event()

        def run() -> None:
            with self.budget.hold(memory.Need(n, "text", label)):
                took.set()
                self.done.wait(30)

        self.threads.append(threading.Thread(target=run, daemon=True))
        self.threads[-1].start()
        assert took.wait(5)

    def release(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(5)


@pytest.fixture
def held_elsewhere(budget):
    holder = Holder(budget)
    yield holder
    holder.release()


# ---- the forward trace -------------------------------------------------------------------------------


def test_attention_maps_over_the_budget_are_a_422_naming_include_and_the_same_trace_without_them_answers(
    client, service, budget
):
    with_maps, without = trace_need(service, ["attention", "next_token"]), trace_need(service, ["next_token"])
    assert with_maps.field == "include" and without.field == "text" and with_maps.bytes > 4 * without.bytes
    budget.configure((with_maps.bytes + without.bytes) // 2)
    body = {"text": LONG, "truncate": True}
    loc, msg = refused(client.post("/api/v1/forward", json={**body, "include": ["attention", "next_token"]}))
    assert loc == ["body", "include"]
    assert "256 tokens" in msg and "MiB" in msg and "leave out attention" in msg and "--memory-budget" in msg
    r = client.post("/api/v1/forward", json={**body, "include": ["next_token"]})
    assert r.status_code == 200 and r.json()["attention"] is None and r.json()["next_token"]
    assert budget.used == 0  # given back


def test_the_binary_answer_needs_less_and_a_trace_in_the_url_names_its_text(client, service, budget):
    from gptscope.server import wire

    json_need, binary_need = trace_need(service, ["attention"]), trace_need(service, ["attention"], binary=True)
    assert binary_need.bytes < json_need.bytes
    budget.configure((json_need.bytes + binary_need.bytes) // 2)
    body = {"text": LONG, "truncate": True, "include": ["attention"]}
    r = client.post("/api/v1/forward", json=body, headers={"Accept": wire.MSGPACK})
    assert r.status_code == 200 and r.headers["content-type"] == wire.MSGPACK
    assert refused(client.post("/api/v1/forward", json=body))[0] == ["body", "include"]
    text = LONG[:600]  # within the context: the URL's trace has no truncate
    need = fwd.need(service, fwd.prepare(service, ForwardRequest(text=text)), where="query")
    assert need.field == "text" and need.where == "query"
    budget.configure(need.bytes - 1)
    loc, msg = refused(client.get("/api/v1/forward", params={"text": text}))
    assert loc == ["query", "text"] and "a shorter prompt" in msg


def _resident() -> tuple[int, int]:
    got = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            got[key] = int(value.split()[0]) * 1024
    return got["VmRSS"], got["VmHWM"]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's peak resident memory")
def test_the_trace_estimate_bounds_its_measured_peak(client, service):
    """The whole request, its answer encoded as JSON (and gzip's copy) included: measured 54-64 MiB
    against an estimate of 82 MiB for every attention map of a 256-token trace and three more parts."""
    body = {"text": LONG, "truncate": True, "include": ["attention", "next_token", "residual", "embeddings"]}
    need = fwd.need(service, fwd.prepare(service, ForwardRequest(**body)))
    peaks = []
    for _ in range(2):
        gc.collect()
        memory.give_back()
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
        before, _ = _resident()
        r = client.post("/api/v1/forward", json=body)
        assert r.status_code == 200
        peaks.append(_resident()[1] - before)
        del r
    assert min(peaks) <= need.bytes <= 4 * max(min(peaks), 8 * memory.MiB)


def test_a_trace_waiting_on_memory_held_elsewhere_gets_a_503_with_retry_after(
    client, service, budget, held_elsewhere, monkeypatch
):
    need = trace_need(service, ["attention", "next_token"])
    budget.configure(need.bytes + 10 * memory.MiB)
    held_elsewhere(need.bytes // 2, "a patching job 123")
    monkeypatch.setattr(memory, "REQUEST_WAIT_S", 0.3)
    t0 = time.monotonic()
    r = client.post("/api/v1/forward", json={"text": LONG, "truncate": True})
    assert r.status_code == 503 and r.headers["retry-after"] and time.monotonic() - t0 < 5
    assert "a patching job 123" in r.json()["detail"] and "try again" in r.json()["detail"]
    small = client.post("/api/v1/forward", json={"text": "ROMEO:", "include": ["next_token"]})
    assert small.status_code == 200  # what still fits goes on


# ---- activation patching and edge circuits ------------------------------------------------------------


def test_a_sweep_over_the_budget_is_a_422_naming_clean_at_once_and_as_a_job(client, service, caesar, budget):
    need = explain_patch.check(service, PatchRequest(**caesar), explain_patch.MAX_SYNC_MACS).need
    assert need.field == "clean" and need.bytes > 2 * explain_patch.pt.record_bytes(service.model, 32)
    budget.configure(need.bytes - 1)
    loc, msg = refused(client.post("/api/v1/patch", json=caesar))
    assert loc == ["body", "clean"] and "patched runs on 32 tokens" in msg and "shorter prompts" in msg
    # a job may hold the budget less the part kept for requests
    budget.configure(need.bytes + memory.FLOOR - 1)
    loc, msg = refused(client.post("/api/v1/patch/jobs", json=caesar))
    assert loc == ["body", "clean"] and "more than a job may hold" in msg
    assert client.post("/api/v1/patch", json=caesar).status_code == 200  # a request may hold all of it


def test_a_sweep_job_queues_while_other_work_holds_the_memory_then_runs(
    client, service, caesar, budget, held_elsewhere
):
    body = {**caesar, "kinds": ["attn_out"]}
    need = explain_patch.check(service, PatchRequest(**body), explain_patch.MAX_JOB_MACS).need
    budget.configure(need.bytes + memory.FLOOR + memory.MiB)
    held_elsewhere(memory.FLOOR + 2 * memory.MiB, "a trace")  # the job's bytes are not free now
    job = client.post("/api/v1/patch/jobs", json=body).json()
    deadline = time.monotonic() + 5
    while job["status"] != "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
        job = client.get(f"/api/v1/patch/jobs/{job['id']}").json()
    assert job["status"] == "queued" and job["result"] is None
    held_elsewhere.release()
    deadline = time.monotonic() + 10
    while job["status"] in ("queued", "starting", "running") and time.monotonic() < deadline:
        time.sleep(0.05)
        job = client.get(f"/api/v1/patch/jobs/{job['id']}").json()
    assert job["status"] == "done" and job["result"]["sweeps"][0]["kind"] == "attn_out"
    assert budget.used == 0


def test_edge_scores_over_the_budget_are_a_422_naming_the_field_at_once_and_as_a_job(client, service, caesar, budget):
    need = explain_circuits.check(service, CircuitRequest(**caesar), explain_circuits.MAX_SYNC_MACS).need
    assert need.field == "steps"  # EAP-IG's gradient pass is the largest step of the default request
    budget.configure(need.bytes - 1)
    loc, msg = refused(client.post("/api/v1/circuits", json=caesar))
    assert loc == ["body", "steps"] and "edge scores on 32 tokens" in msg and "fewer steps" in msg
    loc, _ = refused(client.post("/api/v1/circuits/jobs", json=caesar))
    assert loc == ["body", "steps"]
    atp = {**caesar, "methods": ["atp"], "rank_by": "atp", "exact": "none"}
    small = explain_circuits.check(service, CircuitRequest(**atp), explain_circuits.MAX_SYNC_MACS).need
    assert small.field == "clean" and small.bytes < need.bytes
    budget.configure(small.bytes - 1)
    assert refused(client.post("/api/v1/circuits", json=atp))[0] == ["body", "clean"]
