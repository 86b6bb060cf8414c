"""A run's timeline: every snapshot read the same way (loss and its split, the in-context-learning score,
head roles, lenses, SAE features, a pair's edge circuit) and followed across the run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from .. import timeline_jobs
from ..deps import Models, Runs
from ..explain import timeline as explain_timeline
from ..job_kinds import TIMELINE
from ..jobs import JobRunner, Route, job_routes
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND
from ..schemas.timeline import TimelineJob, TimelineRequest

router = APIRouter(tags=["timeline"])

get_jobs = TIMELINE.runner
Jobs = Annotated[JobRunner[timeline_jobs.TimelineState], Depends(get_jobs)]


class TimelineSource(BaseModel):
    run: str = Field(description="what POST /api/v1/timeline/jobs's `run` takes")
    steps: list[int] = Field(description="its snapshots' steps")


@router.get(
    "/timeline/runs",
    response_model=list[TimelineSource],
    summary="The runs a timeline can read: the app's training runs and the imported series with two snapshots or more",
)
def timeline_runs(runs: Runs) -> list[TimelineSource]:
    return [TimelineSource(**s) for s in explain_timeline.sources(runs)]


@router.post(
    "/timeline/jobs",
    status_code=202,
    response_model=TimelineJob,
    responses={**ERROR_RESPONSES, **NOT_FOUND},
    summary="Read every snapshot of a run and follow them (a background job: poll GET "
    "/api/v1/timeline/jobs/{id}; the timeline so far comes with each answer; a newer job cancels one going)",
)
def start_job(req: TimelineRequest, runs: Runs, models: Models, jobs: Jobs) -> TimelineJob:
    return timeline_jobs.show(timeline_jobs.start(jobs, runs, models, req))


job_routes(
    router,
    "/timeline/jobs",
    get_jobs,
    TimelineJob,
    timeline_jobs.show,
    get=Route("get_job", "A timeline job: snapshots read and to read, the timeline so far, the answer once done",
              NOT_FOUND),
    cancel=Route("cancel_job", "Stop a timeline job", NOT_FOUND),
)  # fmt: skip
