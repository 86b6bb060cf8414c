"""Activation-patching sweeps too big to answer at once: one job at a time, in a background thread.

POST /api/v1/patch/jobs checks the request (its 422s come at once, as from POST /api/v1/patch),
then runs the sweep in a thread, the model's lock held per batch so other requests go on between
batches; GET /api/v1/patch/jobs/{id} tells how many patched runs are done and, once finished, holds
the answer. A newer job cancels the one still going (the page starts one per change of its
prompts), and only the last JOBS_KEPT jobs are kept.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from gptscope.model.patching import Cancelled

from .background import BackgroundJobs
from .explain import patch as ex
from .schemas.patch import PatchJob, PatchRequest, PatchResponse
from .service import ModelService

JOBS_KEPT = 8


@dataclass
class PatchJobState:
    id: str
    total: int
    status: str = "running"
    done: int = 0
    result: PatchResponse | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def status_json(self) -> PatchJob:
        return PatchJob(
            id=self.id,
            status=self.status,  # type: ignore[arg-type]
            done=self.done,
            total=self.total,
            elapsed=round((self.finished or time.time()) - self.started, 2),
            result=self.result,
            error=self.error,
        )


class PatchJobs(BackgroundJobs[PatchJobState]):
    noun, route = "patching job", "patch/jobs"

    def start(self, service: ModelService, req: PatchRequest) -> PatchJobState:
        plan = ex.plan(service, req, limit=ex.MAX_JOB_MACS)
        with self._lock:
            for old in self.jobs.values():  # a newer sweep replaces one still going
                old.cancel.set()
            job = PatchJobState(uuid.uuid4().hex[:12], plan.total)
            self.jobs[job.id] = job
            for old_id in list(self.jobs)[:-JOBS_KEPT]:
                del self.jobs[old_id]
        return self.launch(job, self._run, service, plan)

    def _run(self, job: PatchJobState, service: ModelService, plan: ex.Plan) -> None:
        def progress(done: int, _total: int) -> None:
            job.done = done

        try:
            job.result = ex.compute(service, plan, progress, job.cancel.is_set)
            job.done, job.status = job.total, "done"
        except Cancelled:
            job.status = "cancelled"
        except Exception as e:
            job.status, job.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            job.finished = time.time()
