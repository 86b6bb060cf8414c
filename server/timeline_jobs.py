"""A run's timeline as a background job: POST /api/v1/timeline/jobs checks the request at once (the run,
its snapshots, the pair, the layer, the memory), then reads the snapshots in step order in a thread,
each kept (explain/timeline.py) so a second timeline of the same run reads only what is new. The
job's answer carries the timeline of the snapshots read so far; a newer job cancels the one going."""

from __future__ import annotations

from dataclasses import dataclass

from gptscope.model.errors import Cancelled

from .explain import timeline as explain_timeline
from .jobs import Job, JobRunner, answer_fields
from .models import ModelRegistry
from .runs import RunManager
from .schemas.timeline import TimelineJob, TimelineRequest, TimelineResponse


@dataclass
class TimelineState:
    current: int | None = None  # the step of the snapshot being read
    partial: TimelineResponse | None = None
    result: TimelineResponse | None = None


def runner() -> JobRunner[TimelineState]:
    return JobRunner("timeline job", "timeline/jobs", Cancelled, replaces=True, keep=8)


def start(jobs: JobRunner[TimelineState], runs: RunManager, models: ModelRegistry, req: TimelineRequest) -> Job:
    plan = explain_timeline.plan(runs, models, req)

    def work(job: Job[TimelineState]) -> None:
        def on_snapshot(done: int, step: int | None, partial: TimelineResponse | None) -> None:
            job.progress.done, job.state.current = done, step
            if partial is not None:
                job.state.partial = partial

        job.state.result = explain_timeline.compute(models, plan, on_snapshot, job.cancel.is_set)
        job.progress.done, job.state.current, job.state.partial = plan.total, None, None

    return jobs.start(work, TimelineState(), plan.total, plan.need)


def show(job: Job[TimelineState]) -> TimelineJob:
    return TimelineJob(
        **answer_fields(job),
        done=job.progress.done,
        total=job.progress.total or 0,
        current=job.state.current,
        partial=job.state.partial,
        result=job.state.result,
    )
