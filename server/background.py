"""What training runs and fine-tuning jobs share: one job at a time, each in a daemon thread.

A manager keeps its jobs by a 12-hex-digit id, refuses a second start with a 409 that names the
job going, cancels through the job's `cancel` event and waits for its thread, and at shutdown
stops every job before torch can be left mid-update. What a job does, and what it keeps, is the
subclass's business (server/runs.py, server/finetune_jobs.py).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import torch

from .config import ALL_CORES
from .errors import Conflict, NotFound

JOB_ID = re.compile(r"^[0-9a-f]{12}$")
# Torch threads of a job's own thread: every core, as `gptscope train` uses. Torch's intra-op
# thread count belongs to the thread that sets it; requests set their own (ModelService.run), so
# a small model's requests stay on one thread while a run trains beside them. (A job thread that
# inherited the serving count of 1 trained at 5,600 tokens/s where the command line makes 9,300.)
JOB_THREADS = ALL_CORES


class JobLike(Protocol):
    id: str
    status: str
    cancel: threading.Event
    thread: threading.Thread | None


J = TypeVar("J", bound=JobLike)


class BackgroundJobs(Generic[J]):
    noun = "job"  # how messages name one ("training run", "fine-tuning job")
    route = ""  # its API path under /api/v1 ("training", "finetune")
    active = ("running",)  # the statuses of a job still going

    def __init__(self) -> None:
        self.jobs: dict[str, J] = {}
        self._lock = threading.Lock()

    def running(self) -> J | None:
        return next((j for j in self.jobs.values() if j.status in self.active), None)

    def refuse_if_busy(self) -> None:
        """A 409 naming the job going, if there is one (call while holding self._lock)."""
        busy = self.running()
        if busy:
            raise Conflict(
                f"a {self.noun} is already going: {busy.id}; cancel it "
                f"(POST /api/v1/{self.route}/{busy.id}/cancel) or wait",
                running_id=busy.id,
            )

    def launch(self, job: J, target: Callable[..., None], *args) -> J:
        """Run target(job, *args) in a daemon thread named after the job, on JOB_THREADS torch threads."""

        def work() -> None:
            torch.set_num_threads(JOB_THREADS)
            target(job, *args)

        job.thread = threading.Thread(target=work, name=f"{self.route}-{job.id}", daemon=True)
        job.thread.start()
        return job

    def get(self, job_id: str) -> J:
        if not JOB_ID.fullmatch(job_id) or job_id not in self.jobs:
            raise NotFound(f"no {self.noun} {job_id!r}")
        return self.jobs[job_id]

    def cancel(self, job_id: str, wait: float = 30.0) -> J:
        """Ask the job to stop and wait up to `wait` seconds for its thread."""
        job = self.get(job_id)
        job.cancel.set()
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
