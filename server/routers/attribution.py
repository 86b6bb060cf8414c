"""Attribution graphs through transcoders: the served model's transcoder sets and their features, a
prompt's graph (at once or as a job), and interventions on its features."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from ..attribution_jobs import GRAPHS
from ..deps import Service
from ..explain import attribution as explain_attribution
from ..jobs import Answered, JobRunner, analysis_routes
from ..schemas.attribution import (
    AttributionJob,
    AttributionRequest,
    AttributionResponse,
    SteerRequest,
    SteerResponse,
    TranscoderFeature,
    TranscoderList,
)
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND
from ..schemas.sae import SAE_NAME
from ..wire import Binary, answer, responses

router = APIRouter(tags=["attribution"])


def get_jobs(request: Request) -> JobRunner[Answered[AttributionResponse]]:
    return request.app.state.attribution_jobs


Jobs = Annotated[JobRunner[Answered[AttributionResponse]], Depends(get_jobs)]


@router.get(
    "/transcoders",
    response_model=TranscoderList,
    summary="The served model's transcoder sets (one sparse stand-in per MLP), each with its quality figures "
    "beside their baselines",
)
def transcoder_sets(service: Service) -> TranscoderList:
    return explain_attribution.listing(service)


@router.get(
    "/transcoders/{name}/features/{layer}/{feature}",
    response_model=TranscoderFeature,
    responses={**ERROR_RESPONSES, **NOT_FOUND},
    summary="One transcoder feature: its top held-out passages, its activation histogram and the tokens it "
    "promotes and suppresses",
)
def transcoder_feature(
    name: Annotated[str, Path(pattern=SAE_NAME, max_length=64)],
    layer: Annotated[int, Path(ge=0, le=1024)],
    feature: Annotated[int, Path(ge=0, le=1_000_000)],
    service: Service,
) -> TranscoderFeature:
    return explain_attribution.feature(service, name, layer, feature)


@router.post(
    "/attribution",
    response_model=AttributionResponse,
    responses={**ERROR_RESPONSES, **responses(AttributionResponse)},
    summary="The attribution graph of a prompt at a target (the top logit, a token's, or a logit difference): "
    "tokens, active transcoder features, error nodes and the target, with every edge's direct effect under "
    "frozen attention and norms, pruned by influence",
)
def attribution(req: AttributionRequest, service: Service, binary: Binary) -> AttributionResponse:
    return answer(explain_attribution.attribution(service, req), binary)


@router.post(
    "/attribution/jobs",
    status_code=202,
    response_model=AttributionJob,
    responses=ERROR_RESPONSES,
    summary="The same graph in the background, with its progress: poll GET /api/v1/attribution/jobs/{id} (a newer "
    "job cancels one still going)",
)
def start_job(req: AttributionRequest, service: Service, jobs: Jobs) -> AttributionJob:
    return show(GRAPHS.start(jobs, service, req))


show = analysis_routes(router, "/attribution/jobs", get_jobs, AttributionJob, "attribution job", "features")


@router.post(
    "/attribution/intervene",
    response_model=SteerResponse,
    responses=ERROR_RESPONSES,
    summary="Scale or zero transcoder features at their positions and rerun the real model: the next-token "
    "distribution before and after",
)
def intervene(req: SteerRequest, service: Service) -> SteerResponse:
    return explain_attribution.steer(service, req)
