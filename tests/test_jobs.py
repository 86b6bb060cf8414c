"""One runner for all background work (server/jobs.py): the runner itself, then every kind of job
(a training run, fine-tuning, SAE and transcoder training, a patching sweep, a circuit search) run, watched and cancelled through
the API in process, each a tiny job."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from gptscope.server import circuit_jobs, errors, patch_jobs
from gptscope.server.app import create_app
from gptscope.server.config import BUILTIN_CHECKPOINT, Settings
from gptscope.server.errors import Conflict, NotFound
from gptscope.server.jobs import Job, JobRunner, Route, answer_fields, job_routes


class Stopped(Exception):
    """What the test work raises when its job is cancelled."""


def waiting(job: Job) -> None:
    """Work that goes until cancelled, counting to 10 on the way."""
    job.status, job.progress.total = "running", 10
    while not job.cancel.wait(0.01):
        job.progress.done = min(10, job.progress.done + 1)
    raise Stopped


def failing(job: Job) -> None:
    raise ValueError("no good")


def until(condition, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


# ---- the runner ------------------------------------------------------------------------------------


def test_a_second_start_is_refused_while_one_goes_and_cancel_stops_it():
    runner = JobRunner("test job", "tests", Stopped)
    job = runner.start(waiting, {"mine": 1})
    assert job.id in runner.jobs and job.state == {"mine": 1} and job.thread.daemon
    with pytest.raises(Conflict) as refused:
        runner.start(waiting, {})
    assert refused.value.extra == {"running_id": job.id}
    until(lambda: job.progress.done >= 2)
    assert runner.cancel(job.id) is job and job.status == "cancelled" and job.finished is not None
    assert job.error is None and not job.thread.is_alive()
    again = runner.start(lambda j: None, {})  # once it stopped, the next may start
    again.thread.join()
    assert again.status == "done" and [j.id for j in runner.listing()] == [job.id, again.id]


def test_the_409_names_the_job_going_and_how_to_cancel_it():
    runner = JobRunner("test job", "tests", Stopped)
    job = runner.start(waiting, None)
    try:
        with pytest.raises(Conflict, match=f"a test job is already going: {job.id}; cancel it "
                           f"\\(POST /api/v1/tests/{job.id}/cancel\\) or wait"):  # fmt: skip
            runner.start(waiting, None)
    finally:
        runner.shutdown()


def test_an_unknown_or_malformed_id_is_a_404():
    runner = JobRunner("test job", "tests", Stopped)
    for bad in ("0123456789ab", "nope", "../../etc"):
        with pytest.raises(NotFound, match="no test job"):
            runner.get(bad)
        with pytest.raises(NotFound):
            runner.cancel(bad)


def test_a_failing_work_function_leaves_the_job_failed_with_its_error():
    runner = JobRunner("test job", "tests", Stopped)
    job = runner.start(failing, None)
    job.thread.join()
    assert job.status == "failed" and job.error == "ValueError: no good" and job.finished is not None
    assert runner.running() is None  # a failed job does not block the next


def test_shutdown_stops_every_job_going():
    runners = [JobRunner("test job", "tests", Stopped) for _ in range(3)]
    jobs = [r.start(waiting, None) for r in runners]
    for r in runners:
        r.shutdown()
    assert [j.status for j in jobs] == ["cancelled"] * 3 and not any(j.thread.is_alive() for j in jobs)


def test_a_replacing_runner_cancels_the_old_job_and_keeps_the_last_few():
    runner = JobRunner("test job", "tests", Stopped, replaces=True, keep=2)
    first = runner.start(waiting, None)
    second = runner.start(waiting, None)
    first.thread.join(5)
    assert first.status == "cancelled" and second.status in ("running", "starting")
    third = runner.start(waiting, None)
    assert list(runner.jobs) == [second.id, third.id]  # the first is forgotten
    runner.shutdown()


def test_run_here_runs_the_same_work_in_the_foreground():
    runner = JobRunner("test job", "tests", Stopped)
    seen = []
    job = runner.run_here(lambda j: seen.append(threading.current_thread()), "state", total=3)
    assert seen == [threading.current_thread()] and job.status == "done" and job.progress.total == 3
    with pytest.raises(ValueError, match="no good"):  # a failure is the caller's to report
        runner.run_here(failing, None)
    assert runner.listing()[-1].status == "failed"
    cancelled = runner.run_here(lambda j: (_ for _ in ()).throw(Stopped()), None)
    assert cancelled.status == "cancelled"


class Answer(BaseModel):
    id: str
    status: str
    shout: bool = False


def loud(job: Job, shout: bool = False) -> Answer:
    """A route's own view: its parameter after the job becomes the endpoint's query parameter."""
    return Answer(id=job.id, status=job.status, shout=shout)


def test_the_shared_fields_and_the_routes_factory():
    runner = JobRunner("test job", "tests", Stopped)
    job = runner.run_here(lambda j: None, None)
    assert answer_fields(job) == {"id": job.id, "status": "done", "error": None, "elapsed": round(job.elapsed, 2)}
    assert set(answer_fields(job, elapsed="elapsed_s")) == {"id", "status", "error", "elapsed_s"}

    router = APIRouter()
    job_routes(router, "/tests", lambda: runner, Answer, lambda j: Answer(id=j.id, status=j.status),
               listing=Route("list_tests", "All"), get=Route("get_test", "One", show=loud),
               cancel=Route("cancel_test", "Stop one"))  # fmt: skip
    app = FastAPI()
    errors.install(app)  # NotFound -> 404, as in the app
    app.include_router(router)
    paths = app.openapi()["paths"]
    assert list(paths) == ["/tests", "/tests/{job_id}", "/tests/{job_id}/cancel"]
    assert paths["/tests/{job_id}"]["get"]["operationId"] == "get_test_tests__job_id__get"
    assert [p["name"] for p in paths["/tests/{job_id}"]["get"]["parameters"]] == ["job_id", "shout"]
    with TestClient(app) as c:
        assert c.get("/tests").json() == [{"id": job.id, "status": "done", "shout": False}]
        assert c.get(f"/tests/{job.id}", params={"shout": True}).json()["shout"] is True
        assert c.post(f"/tests/{job.id}/cancel").json()["status"] == "done"  # a finished job stays as it is
        assert c.get("/tests/0123456789ab").status_code == 404


# ---- every kind, through the API ---------------------------------------------------------------------

TINY_RUN = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "small", "snapshots": []}
TEXT = "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. " * 80


TASK_CSV = "text,label\n" + "".join(f"example number {i},{'ab'[i % 2]}\n" for i in range(24))


def upload(c, route: str, name: str, text: str) -> None:
    r = c.post(route, files={"file": (f"{name}.txt", text.encode())}, data={"name": name})
    assert r.status_code == 201, r.text


@pytest.fixture(scope="module")
def jclient(tmp_path_factory, service):
    data = tmp_path_factory.mktemp("jobs")
    settings = Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=data, allow_hosts=["testserver"])
    with TestClient(create_app(settings, service=service)) as c:
        upload(c, "/api/v1/corpora", "small", TEXT)  # what the training runs read
        upload(c, "/api/v1/finetune/tasks", "tiny", TASK_CSV)  # a task of a few rows: its cells take a second
        yield c


def finish(c, url: str, timeout: float = 60.0) -> dict:
    """Poll a job until it is no longer going; its last answer."""
    body: dict = {}

    def ended() -> bool:
        nonlocal body
        body = c.get(url).json()
        return body["status"] not in ("starting", "running")

    until(ended, timeout)
    return body


def start_then_cancel(c, start: str, body: dict, jobs: str, going) -> dict:
    """Start a job, wait until `going(answer)` says it is under way, cancel it; the cancel's answer."""
    r = c.post(start, json=body)
    assert r.status_code == 202, r.text
    url = f"{jobs}/{r.json()['id']}"
    until(lambda: going(c.get(url).json()))
    assert c.post(start, json=body).status_code == 409  # one at a time
    return c.post(f"{url}/cancel").json()


def test_a_training_run_runs_reports_progress_and_cancels(jclient):
    r = jclient.post("/api/v1/training", json={**TINY_RUN, "max_steps": 4})
    assert r.status_code == 202 and r.json()["status"] in ("starting", "running")
    done = finish(jclient, f"/api/v1/training/{r.json()['id']}")
    assert done["status"] == "done" and done["step"] == done["total_steps"] == 4 and len(done["history"]) == 4
    assert r.json()["id"] in [j["id"] for j in jclient.get("/api/v1/training").json()]
    body = start_then_cancel(
        jclient, "/api/v1/training", {**TINY_RUN, "max_steps": 50_000, "seed": 7}, "/api/v1/training",
        lambda j: j["step"] >= 2,
    )  # fmt: skip
    assert body["status"] == "cancelled" and 2 <= body["step"] < body["total_steps"] and body["error"] is None


@pytest.mark.slow  # fine-tunes (a cell of one step, then one cancelled)
def test_a_fine_tuning_job_runs_reports_progress_and_cancels(jclient):
    ft = {"task": "tiny", "methods": ["probe", "scratch"], "sizes": [8], "steps": 1}
    r = jclient.post("/api/v1/finetune", json=ft)
    assert r.status_code == 202 and r.json()["total_cells"] == 2 and len(r.json()["cells"]) <= 2  # may be quick
    done = finish(jclient, f"/api/v1/finetune/{r.json()['id']}")
    assert done["status"] == "done" and len(done["cells"]) == 2 and done["current"] is None
    slow = {"task": "tiny", "methods": ["scratch"], "sizes": [8], "steps": 5000}
    body = start_then_cancel(
        jclient, "/api/v1/finetune", slow, "/api/v1/finetune", lambda j: (j["current"] or {}).get("step", 0) > 0
    )
    assert body["status"] == "cancelled" and body["cells"] == [] and body["current"] is None


@pytest.mark.slow  # trains an SAE and measures its quality (about 10 s on 2 cores)
def test_an_sae_training_job_runs_reports_progress_and_cancels(jclient):
    sae = {"layer": 0, "k": 4, "batch_tokens": 256, "max_tokens": 1024, "eval_sequences": 8, "ce_sequences": 4}
    r = jclient.post("/api/v1/saes", json={**sae, "name": "jobs-done"})
    assert r.status_code == 202, r.text
    done = finish(jclient, f"/api/v1/saes/jobs/{r.json()['id']}")
    assert done["status"] == "done" and done["step"] > 0 and done["progress"] == 1.0 and done["quality"]
    assert "jobs-done" in [s["name"] for s in jclient.get("/api/v1/saes").json()["saes"]]
    long = {**sae, "max_tokens": 10**8, "time_budget": 60, "name": "jobs-cancelled"}
    body = start_then_cancel(jclient, "/api/v1/saes", long, "/api/v1/saes/jobs", lambda j: j["step"] > 0)
    assert body["status"] == "cancelled" and body["quality"] is None
    assert "jobs-cancelled" not in [s["name"] for s in jclient.get("/api/v1/saes").json()["saes"]]


def test_a_patching_sweep_runs_reports_progress_and_cancels(jclient, monkeypatch):
    pair = jclient.get("/api/v1/patch/pairs").json()[0]
    sweep = {"clean": pair["clean"], "corrupted": pair["corrupted"]}
    r = jclient.post("/api/v1/patch/jobs", json=sweep)
    assert r.status_code == 202 and r.json()["total"] > 0 and r.json()["result"] is None
    done = finish(jclient, f"/api/v1/patch/jobs/{r.json()['id']}")
    assert done["status"] == "done" and done["done"] == done["total"] and done["result"]["sweeps"]

    real = patch_jobs.SWEEPS.compute

    def after_cancel(service, plan, on_chunk, cancel):  # a sweep that cannot end before it is cancelled
        until(cancel, 10)
        return real(service, plan, on_chunk, cancel)

    monkeypatch.setattr(patch_jobs.SWEEPS, "compute", after_cancel)
    noised = {**sweep, "direction": "noise"}  # not in the cache yet: its sweep has patched runs to do
    r = jclient.post("/api/v1/patch/jobs", json=noised)
    newer = jclient.post("/api/v1/patch/jobs", json=noised).json()  # a newer sweep replaces it
    assert finish(jclient, f"/api/v1/patch/jobs/{r.json()['id']}")["status"] == "cancelled"
    body = jclient.post(f"/api/v1/patch/jobs/{newer['id']}/cancel").json()
    assert body["status"] == "cancelled" and body["done"] < body["total"] and body["result"] is None


def test_a_circuit_search_runs_reports_progress_and_cancels(jclient, monkeypatch):
    pair = jclient.get("/api/v1/patch/pairs").json()[0]
    # a short pair (its own prompts: nothing cached) and exact scores of 40 edges: a second's work
    search = {"clean": "GLOUCESTER:\nLong live King Edward!\n\nALL:\nLong live King",
              "corrupted": "GLOUCESTER:\nLong live King Henry!\n\nALL:\nLong live King", "exact_top": 40}  # fmt: skip
    r = jclient.post("/api/v1/circuits/jobs", json=search)
    assert r.status_code == 202 and r.json()["total"] > 40 and r.json()["result"] is None
    done = finish(jclient, f"/api/v1/circuits/jobs/{r.json()['id']}")
    assert done["status"] == "done", done["error"]
    assert done["done"] == done["total"] and done["result"]["circuit"]["edges"]
    assert len(done["result"]["scores"][-1]["edges"]) == 40

    real = circuit_jobs.SEARCHES.compute

    def after_cancel(service, plan, on_chunk, cancel):  # a search that cannot end before it is cancelled
        until(cancel, 10)
        return real(service, plan, on_chunk, cancel)

    monkeypatch.setattr(circuit_jobs.SEARCHES, "compute", after_cancel)
    other = {"clean": pair["clean"], "corrupted": pair["corrupted"], "exact": "none"}
    r = jclient.post("/api/v1/circuits/jobs", json=other)
    newer = jclient.post("/api/v1/circuits/jobs", json=other).json()  # a newer search replaces it
    assert finish(jclient, f"/api/v1/circuits/jobs/{r.json()['id']}")["status"] == "cancelled"
    body = jclient.post(f"/api/v1/circuits/jobs/{newer['id']}/cancel").json()
    assert body["status"] == "cancelled" and body["done"] < body["total"] and body["result"] is None
    assert jclient.get("/api/v1/circuits/jobs/000000000000").status_code == 404


def test_a_transcoder_training_job_runs_reports_progress_and_cancels(jclient):
    tiny = {"expansion": 2, "k": 4, "batch_tokens": 256, "max_tokens": 1024, "eval_sequences": 4, "ce_sequences": 2}
    r = jclient.post("/api/v1/transcoders", json={**tiny, "name": "jobs-done"})
    assert r.status_code == 202, r.text
    done = finish(jclient, f"/api/v1/transcoders/jobs/{r.json()['id']}")
    assert done["status"] == "done" and done["step"] > 0 and done["progress"] == 1.0, done["error"]
    assert len(done["quality"]["layers"]) == 6
    assert "jobs-done" in [s["name"] for s in jclient.get("/api/v1/transcoders").json()["sets"]]
    long = {**tiny, "max_tokens": 10**8, "time_budget": 60, "name": "jobs-cancelled"}
    body = start_then_cancel(jclient, "/api/v1/transcoders", long, "/api/v1/transcoders/jobs", lambda j: j["step"] > 0)
    assert body["status"] == "cancelled" and body["quality"] is None
    assert "jobs-cancelled" not in [s["name"] for s in jclient.get("/api/v1/transcoders").json()["sets"]]
    assert jclient.post("/api/v1/transcoders", json={**tiny, "name": "jobs-done"}).status_code == 422  # taken


def test_a_timeline_job_runs_reports_progress_and_cancels(jclient):
    r = jclient.post("/api/v1/training", json={**TINY_RUN, "max_steps": 6, "snapshots": [0, 0.5, 1], "seed": 11})
    run = finish(jclient, f"/api/v1/training/{r.json()['id']}")
    assert run["snapshots"] == [0, 3, 6]
    cheap = {"run": run["id"], "sae_tokens": 1024, "lens_tokens": 1024}
    r = jclient.post("/api/v1/timeline/jobs", json=cheap)
    assert r.status_code == 202 and r.json()["total"] == 3 and r.json()["result"] is None
    done = finish(jclient, f"/api/v1/timeline/jobs/{r.json()['id']}")
    assert done["status"] == "done" and done["done"] == 3 and done["result"]["steps"] == [0, 3, 6]
    listed = jclient.get("/api/v1/timeline/jobs/" + r.json()["id"]).json()
    assert listed["result"] == done["result"] and listed["current"] is None
    slow = jclient.post("/api/v1/timeline/jobs", json={**cheap, "sae_tokens": 10**6}).json()
    url = f"/api/v1/timeline/jobs/{slow['id']}"
    until(lambda: jclient.get(url).json()["status"] == "running")
    t0 = time.monotonic()
    body = jclient.post(f"{url}/cancel").json()
    assert body["status"] == "cancelled" and time.monotonic() - t0 < 5 and body["result"] is None
