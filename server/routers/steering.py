"""Steering four ways on one concept: a DiffMean vector, a probe direction, an SAE feature and a prompt
prefix, each at several strengths, judged by the unsteered model (concept score and fluency)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ..deps import Service
from ..explain import steering as explain_steering
from ..job_kinds import STEERING
from ..jobs import Answered, JobRunner, analysis_routes
from ..schemas.common import ERROR_RESPONSES
from ..schemas.steering import SteeringJob, SteeringRequest, SteeringResponse
from ..steering_jobs import STEERINGS
from ..wire import Binary, answer, responses

router = APIRouter(tags=["steering"])

get_jobs = STEERING.runner
Jobs = Annotated[JobRunner[Answered[SteeringResponse]], Depends(get_jobs)]


@router.post(
    "/steering",
    response_model=SteeringResponse,
    responses={**ERROR_RESPONSES, **responses(SteeringResponse)},
    summary="Steer generation towards a concept four ways (DiffMean, probe direction, SAE feature, prompt "
    "prefix) at several strengths: each one's concept score and fluency, and the generations",
)
def steering(req: SteeringRequest, service: Service, binary: Binary) -> SteeringResponse:
    return answer(explain_steering.steer(service, req), binary)


@router.post(
    "/steering/jobs",
    status_code=202,
    response_model=SteeringJob,
    responses=ERROR_RESPONSES,
    summary="The same in the background, for a longer sweep: poll GET /api/v1/steering/jobs/{id} for its "
    "progress and answer (a newer job cancels one still going)",
)
def start_job(req: SteeringRequest, service: Service, jobs: Jobs) -> SteeringJob:
    return show(STEERINGS.start(jobs, service, req))


show = analysis_routes(router, "/steering/jobs", get_jobs, SteeringJob, "steering job", "decode steps")
