"""Token attribution: which input tokens a prediction came from (integrated gradients, with gradient x
input, occlusion and attention rollout as baselines), for one position at once or every position as a job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ..deps import Service
from ..explain import token_attribution as explain_ta
from ..job_kinds import TOKEN_ATTRIBUTION
from ..jobs import Answered, JobRunner, analysis_routes
from ..schemas.common import ERROR_RESPONSES
from ..schemas.token_attribution import TokenAttributionJob, TokenAttributionRequest, TokenAttributionResponse
from ..token_attribution_jobs import TOKEN_ATTRIBUTIONS
from ..wire import Binary, answer, responses

router = APIRouter(tags=["token attribution"])


get_jobs = TOKEN_ATTRIBUTION.runner


Jobs = Annotated[JobRunner[Answered[TokenAttributionResponse]], Depends(get_jobs)]


@router.post(
    "/token-attribution",
    response_model=TokenAttributionResponse,
    responses={**ERROR_RESPONSES, **responses(TokenAttributionResponse)},
    summary="Which input tokens a prediction came from: integrated gradients on the input embeddings (with its "
    "completeness error), gradient x input, occlusion and attention rollout, for one position or every one",
)
def token_attribution(req: TokenAttributionRequest, service: Service, binary: Binary) -> TokenAttributionResponse:
    return answer(explain_ta.attribute(service, req), binary)


@router.post(
    "/token-attribution/jobs",
    status_code=202,
    response_model=TokenAttributionJob,
    responses=ERROR_RESPONSES,
    summary="The same in the background, for every position of a long prompt: poll "
    "GET /api/v1/token-attribution/jobs/{id} for its progress and answer (a newer job cancels one still going)",
)
def start_job(req: TokenAttributionRequest, service: Service, jobs: Jobs) -> TokenAttributionJob:
    return show(TOKEN_ATTRIBUTIONS.start(jobs, service, req))


show = analysis_routes(
    router, "/token-attribution/jobs", get_jobs, TokenAttributionJob, "token attribution job", "runs of the prompt"
)
