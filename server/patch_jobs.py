"""Activation-patching sweeps too big to answer at once, as background jobs.

POST /api/v1/patch/jobs checks the request (its 422s come at once, as from POST /api/v1/patch),
then runs the sweep in a thread, the model's lock held per batch so other requests go on between
batches; GET /api/v1/patch/jobs/{id} tells how many patched runs are done and, once finished, holds
the answer. A newer job cancels the one still going (the page starts one per change of its
prompts), and only the last JOBS_KEPT jobs are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from gptscope.model.patching import Cancelled

from .explain import patch as explain_patch
from .jobs import Job, JobRunner, answer_fields
from .schemas.patch import PatchJob, PatchRequest, PatchResponse
from .service import ModelService

JOBS_KEPT = 8


@dataclass
class PatchSweep:
    """A patching job's own state: its answer once done (its progress counts patched runs)."""

    result: PatchResponse | None = None


def patch_runner() -> JobRunner[PatchSweep]:
    return JobRunner("patching job", "patch/jobs", Cancelled, replaces=True, keep=JOBS_KEPT)


def start_sweep(runner: JobRunner[PatchSweep], service: ModelService, req: PatchRequest) -> Job[PatchSweep]:
    """Plan the sweep (its 422s at once), then run it in the background, cancelling an older one."""
    plan = explain_patch.plan(service, req, limit=explain_patch.MAX_JOB_MACS)
    return runner.start(partial(sweep, service=service, plan=plan), PatchSweep(), plan.total)


def sweep(job: Job[PatchSweep], service: ModelService, plan: explain_patch.Plan) -> None:
    """The work of a patching job: every patched run of the plan, counted as they are done."""

    def progress(done: int, _total: int) -> None:
        job.progress.done = done

    job.state.result = explain_patch.compute(service, plan, progress, job.cancel.is_set)
    job.progress.done = plan.total


def sweep_status(job: Job[PatchSweep]) -> PatchJob:
    return PatchJob(
        **answer_fields(job), done=job.progress.done, total=job.progress.total or 0, result=job.state.result
    )
