"""One runner for all background work: training runs, fine-tuning, SAE training, patching sweeps,
edge circuits.

A kind of work is a function `work(job)`: it does the work, keeps `job.progress` and its own
`job.state` up to date as it goes, and raises its kind's Cancelled once `job.cancel` is set. A
`JobRunner` starts it in a daemon thread once the process' memory budget holds the bytes it says it
needs (server/memory.py: "queued" until then), keeps the job by a 12-hex-digit id, refuses a second start
with a 409 naming the job going (or, for a kind that says so, cancels the old one), sets the status,
error and finish time, cancels a job and waits for its thread, and at shutdown stops every job
before torch can be left mid-update. `run_here` runs the same function in the foreground (the
command line). `answer_fields` gives the fields every job's answer shares, and `job_routes` adds a
kind's list / get / cancel endpoints.

An `Analysis` (patching sweeps, edge circuits) is the common case of an answer that may take longer
than a request: a plan (the checks, its 422s at once, and the units of work) and a compute step; its
plain endpoint computes in the request, its job form in a runner's thread (`analysis_routes`).
"""

from __future__ import annotations

import inspect
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Generic, TypeVar

import torch
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from . import memory
from .config import ALL_CORES
from .digits import SECONDS
from .errors import Conflict, NotFound
from .schemas.common import NOT_FOUND, JobStatus
from .wire import Binary, answer, responses

Status = JobStatus
ACTIVE = ("queued", "starting", "running")  # the statuses of a job still going
JOB_ID = re.compile(r"^[0-9a-f]{12}$")
# Torch threads of a job's own thread: every core, as `gptscope train` uses. Torch's intra-op
# thread count belongs to the thread that sets it; requests set their own (ModelService.run), so
# a small model's requests stay on one thread while a run trains beside them. (A job thread that
# inherited the serving count of 1 trained at 5,600 tokens/s where the command line makes 9,300.)
JOB_THREADS = ALL_CORES

S = TypeVar("S")


@dataclass
class JobProgress:
    """How far a job is: `done` of `total` units (steps, cells, patched runs); total None while unknown."""

    done: int = 0
    total: int | None = None


@dataclass
class Job(Generic[S]):
    """One piece of background work: what the runner keeps of it, and the kind's own `state`."""

    id: str
    kind: str  # how messages name it ("training run", "fine-tuning job")
    state: S
    status: Status = "running"
    progress: JobProgress = field(default_factory=JobProgress)
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started


Work = Callable[[Job[S]], None]


class JobRunner(Generic[S]):
    """The jobs of one kind: started one at a time, each in a daemon thread."""

    def __init__(
        self,
        noun: str,
        route: str,
        cancelled: type[BaseException] | tuple[type[BaseException], ...],
        *,
        first_status: Status = "running",
        replaces: bool = False,
        keep: int | None = None,
    ) -> None:
        self.noun = noun  # how messages name one ("training run")
        self.route = route  # its API path under /api/v1 ("training", "saes/jobs")
        self.cancelled = cancelled  # what the work raises when it stops on job.cancel
        self.first_status = first_status  # a job's status until its work reports otherwise
        self.replaces = replaces  # a new start cancels the job going, instead of a 409
        self.keep = keep  # how many jobs are kept (None: all)
        self.jobs: dict[str, Job[S]] = {}
        self.lock = threading.RLock()  # a kind may hold it around start (a check, then the start)

    def running(self) -> Job[S] | None:
        return next((j for j in self.jobs.values() if j.status in ACTIVE), None)

    def listing(self) -> list[Job[S]]:
        return list(self.jobs.values())

    def start(self, work: Work[S], state: S, total: int | None = None, need: memory.Need | None = None) -> Job[S]:
        """Register a job for `state` and run work(job) in a daemon thread on JOB_THREADS torch threads,
        once the memory budget has `need`'s bytes free (a 422 at once when it never could; the job
        waits as "queued" while other work holds them)."""
        if need is not None:
            memory.BUDGET.check(need, job=True)
        with self.lock:
            self._make_room()
            job = self._register(state, total)
        job.thread = threading.Thread(target=self._in_thread, args=(job, work, need), name=f"{self.route}-{job.id}")
        job.thread.daemon = True
        job.thread.start()
        return job

    def run_here(self, work: Work[S], state: S, total: int | None = None) -> Job[S]:
        """The same work in the caller's thread (the command line); a failure is raised once recorded."""
        with self.lock:
            job = self._register(state, total)
        failure = self._run(job, work)
        if failure is not None:
            raise failure
        return job

    def _make_room(self) -> None:
        """Cancel the jobs going (a kind that replaces), or refuse with a 409 naming the one going."""
        if self.replaces:
            for old in self.jobs.values():
                old.cancel.set()
        elif busy := self.running():
            raise Conflict(
                f"a {self.noun} is already going: {busy.id}; cancel it "
                f"(POST /api/v1/{self.route}/{busy.id}/cancel) or wait",
                running_id=busy.id,
            )

    def _register(self, state: S, total: int | None) -> Job[S]:
        job = Job(uuid.uuid4().hex[:12], self.noun, state, self.first_status, JobProgress(total=total))
        self.jobs[job.id] = job
        if self.keep is not None:
            for old_id in list(self.jobs)[: -self.keep]:
                del self.jobs[old_id]
        return job

    def _in_thread(self, job: Job[S], work: Work[S], need: memory.Need | None) -> None:
        torch.set_num_threads(JOB_THREADS)
        self._run(job, work, need)
        memory.give_back()  # what the job freed goes back to the system, not to a grown heap

    def _run(self, job: Job[S], work: Work[S], need: memory.Need | None = None) -> Exception | None:
        """work(job) once `need` is held, its end recorded: done, cancelled, or failed with the error (returned)."""

        def queued() -> None:
            job.status = "queued"

        try:
            with memory.BUDGET.hold(
                need, job=True, label=f"{self.noun} {job.id}", cancel=job.cancel.is_set, queued=queued
            ):
                if job.status == "queued":
                    job.status = self.first_status
                work(job)
            job.status = "done"
        except (self.cancelled, memory.Cancelled):
            job.status = "cancelled"
        except Exception as e:
            job.status, job.error = "failed", f"{type(e).__name__}: {e}"
            return e
        finally:
            job.finished = time.time()
        return None

    def get(self, job_id: str) -> Job[S]:
        if not JOB_ID.fullmatch(job_id) or job_id not in self.jobs:
            raise NotFound(f"no {self.noun} {job_id!r}")
        return self.jobs[job_id]

    def cancel(self, job_id: str, wait: float = 30.0) -> Job[S]:
        """Ask the job to stop and wait up to `wait` seconds for its thread."""
        job = self.get(job_id)
        job.cancel.set()
        memory.BUDGET.wake()  # a job queued for memory sees its cancel now
        if job.thread is not None:
            job.thread.join(timeout=wait)
        return job

    def shutdown(self, wait: float = 30.0) -> None:
        """Cancel every job still going and wait for their threads."""
        for job in self.jobs.values():
            job.cancel.set()
        for job in self.jobs.values():
            if job.thread is not None:
                job.thread.join(timeout=wait)


def answer_fields(job: Job, elapsed: str = "elapsed") -> dict[str, Any]:
    """The fields every job's answer shares: its id, status, error, and seconds since it started
    (named `elapsed`, or as the schema names them)."""
    return {"id": job.id, "status": job.status, "error": job.error, elapsed: round(job.elapsed, SECONDS)}


# ---- the endpoints every kind has: list, get, cancel ----------------------------------------------


@dataclass(frozen=True)
class Route:
    """One job endpoint: its function's name (FastAPI makes the operation id of it), summary and
    documented answers; `show`, when given, turns a job into the answer instead of the kind's, and
    its parameters after the job become the endpoint's (a query parameter, the binary form)."""

    name: str
    summary: str
    responses: dict | None = None
    show: Callable[..., Any] | None = None


def job_routes(
    router: APIRouter,
    path: str,
    runner: Callable[[Request], JobRunner],
    model: type[BaseModel],
    show: Callable[[Job], BaseModel],
    *,
    get: Route,
    cancel: Route,
    listing: Route | None = None,
    id_name: str = "job_id",
) -> None:
    """Add GET path (when `listing`), GET path/{id} and POST path/{id}/cancel to the router, in that
    order, each answering `show(job)` (or its route's own show)."""
    jobs = inspect.Parameter("jobs", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[JobRunner, Depends(runner)])
    job_id = inspect.Parameter(id_name, inspect.Parameter.KEYWORD_ONLY, annotation=str)
    if listing is not None:
        _add(router.get, path, list[model], listing, [jobs], _list_answer(listing.show or show))
    for route, method, tail, act in (
        (get, router.get, "", JobRunner.get),
        (cancel, router.post, "/cancel", JobRunner.cancel),
    ):
        view, extra = (route.show, _parameters_after_job(route.show)) if route.show else (show, [])
        _add(method, f"{path}/{{{id_name}}}{tail}", model, route, [job_id, jobs, *extra], _answer(act, id_name, view))


def _list_answer(view: Callable[[Job], Any]) -> Callable[[dict], Any]:
    return lambda kw: [view(job) for job in kw["jobs"].listing()]


def _answer(act: Callable[..., Job], id_name: str, view: Callable[..., Any]) -> Callable[[dict], Any]:
    """Get or cancel (`act`) the job the path names, then answer view(job, the endpoint's other parameters)."""

    def respond(kw: dict) -> Any:
        job = act(kw.pop("jobs"), kw.pop(id_name))
        return view(job, **kw)

    return respond


def _parameters_after_job(view: Callable[..., Any]) -> list[inspect.Parameter]:
    params = list(inspect.signature(view, eval_str=True).parameters.values())[1:]
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]


def _add(method: Callable[..., Any], path: str, model: Any, route: Route, params: list, respond: Callable) -> None:
    """One endpoint whose signature is `params` (FastAPI reads its parameters from it)."""

    def endpoint(**kw):
        return respond(kw)

    endpoint.__name__ = endpoint.__qualname__ = route.name
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method(path, response_model=model, responses=route.responses, summary=route.summary, name=route.name)(endpoint)


# ---- an analysis, at once or as a job -------------------------------------------------------------

A = TypeVar("A", bound=BaseModel)  # an analysis' answer
J = TypeVar("J", bound=BaseModel)  # an analysis job's answer


@dataclass
class Answered(Generic[A]):
    """An analysis job's own state: its answer once done (its progress counts the analysis' units)."""

    result: A | None = None


@dataclass
class Analysis(Generic[A]):
    """Work that may take longer than a request, in two steps: plan(service, req, limit=...) checks the
    request against the model and its limit (every 422 at once) and returns a plan whose `total` is
    its units of work; compute(service, plan, on_chunk, cancel) does them, calling on_chunk(done,
    total) as it goes and raising `cancelled` once cancel() is true. The plain endpoint plans with its
    own limit and computes in the request; the job form (`start`) plans with `job_limit` and computes
    in a runner's thread, a newer job cancelling the one still going, the last `keep` jobs kept."""

    noun: str  # how messages name a job ("patching job")
    route: str  # its path under /api/v1 ("patch/jobs")
    plan: Callable[..., Any]
    compute: Callable[..., A]
    job_limit: float
    cancelled: type[BaseException]
    keep: int = 8

    def runner(self) -> JobRunner[Answered[A]]:
        return JobRunner(self.noun, self.route, self.cancelled, replaces=True, keep=self.keep)

    def start(self, runner: JobRunner[Answered[A]], service: Any, req: BaseModel) -> Job[Answered[A]]:
        """Plan it (its 422s at once), then compute it in the background, cancelling an older one."""
        plan = self.plan(service, req, limit=self.job_limit)
        need = getattr(plan, "need", None)  # the plan's peak bytes (server/memory.py), when it estimates them
        return runner.start(partial(self._work, service=service, plan=plan), Answered(), plan.total, need)

    def _work(self, job: Job[Answered[A]], service: Any, plan: Any) -> None:
        def progress(done: int, _total: int) -> None:
            job.progress.done = done

        job.state.result = self.compute(service, plan, progress, job.cancel.is_set)
        job.progress.done = plan.total


def analysis_routes(
    router: APIRouter,
    path: str,
    runner: Callable[[Request], JobRunner],
    model: type[J],
    noun: str,
    units: str,
) -> Callable[[Job[Answered]], J]:
    """An analysis job's endpoints: GET path/{id} (its `units` done and needed, its answer once done;
    JSON or MessagePack) and POST path/{id}/cancel, each answering `model`. Returns the function that
    makes that answer of a job (the start endpoint's too)."""

    def show(job: Job[Answered]) -> J:
        progress = job.progress
        return model(**answer_fields(job), done=progress.done, total=progress.total or 0, result=job.state.result)

    def show_or_msgpack(job: Job[Answered], binary: Binary) -> Any:
        return answer(show(job), binary)

    found = {**NOT_FOUND, **responses(model)}
    job_routes(
        router,
        path,
        runner,
        model,
        show,
        get=Route(
            "get_job", f"A {noun}: {units} done and needed, and its answer once done", found, show=show_or_msgpack
        ),
        cancel=Route("cancel_job", f"Stop a {noun}", found),
    )
    return show
