"""Attribution graphs through transcoders: the served model's transcoder sets and their features, a
prompt's graph (at once or as a job), and interventions on its features."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from gptscope.model.transcoders import TranscoderTrainConfig

from ..artefacts import Training
from ..attribution_jobs import GRAPHS
from ..deps import Runs, Service
from ..explain import attribution as explain_attribution
from ..explain import attribution_groups as explain_groups
from ..explain import attribution_heads as explain_heads
from ..job_kinds import ATTRIBUTION_GRAPHS, TRANSCODER_TRAINING
from ..jobs import Answered, JobRunner, Route, analysis_routes, job_routes
from ..saes import corpus_for
from ..schemas.attribution import (
    AttributionJob,
    AttributionRequest,
    AttributionResponse,
    CompareSetsRequest,
    CompareSetsResponse,
    HeadsRequest,
    HeadsResponse,
    QKRequest,
    QKResponse,
    SteerRequest,
    SteerResponse,
    SupernodesRequest,
    SupernodesResponse,
    TranscoderFeature,
    TranscoderJob,
    TranscoderList,
    TranscoderTrainRequest,
    TrustResponse,
)
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND, ErrorResponse
from ..schemas.sae import SAE_NAME
from ..transcoders import TRANSCODERS as store
from ..wire import Binary, answer, responses

router = APIRouter(tags=["attribution"])


get_jobs = ATTRIBUTION_GRAPHS.runner


Jobs = Annotated[JobRunner[Answered[AttributionResponse]], Depends(get_jobs)]


@router.get(
    "/transcoders",
    response_model=TranscoderList,
    summary="The served model's transcoder sets (one sparse stand-in per MLP), each with its quality figures "
    "beside their baselines",
)
def transcoder_sets(service: Service) -> TranscoderList:
    return explain_attribution.listing(service)


get_training = TRANSCODER_TRAINING.runner


SetJobs = Annotated[JobRunner[Training], Depends(get_training)]
CONFLICT = {409: {"model": ErrorResponse, "description": "a transcoder training job is already going"}}


@router.post(
    "/transcoders",
    status_code=202,
    response_model=TranscoderJob,
    responses={**ERROR_RESPONSES, **CONFLICT},
    summary="Train a transcoder set (one per MLP) on the served model, in the background",
)
def train_set(req: TranscoderTrainRequest, jobs: SetJobs, runs: Runs, service: Service) -> TranscoderJob:
    tc = TranscoderTrainConfig(**req.model_dump(exclude={"name", "corpus"}))
    corpus = corpus_for(service, req.corpus, runs.corpus_path)
    return explain_attribution.job_status(store.start_training(jobs, service, tc, req.name, corpus))


job_routes(
    router,
    "/transcoders/jobs",
    get_training,
    TranscoderJob,
    explain_attribution.job_status,
    listing=Route("list_training_jobs", "Transcoder training jobs since the app started"),
    get=Route("get_training_job", "A transcoder training job: its progress, then the set's figures"),
    cancel=Route("cancel_training_job", "Stop a transcoder training job (nothing is saved)"),
)


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


@router.post(
    "/attribution/heads",
    response_model=HeadsResponse,
    responses=ERROR_RESPONSES,
    summary="Which heads carried each edge into a node of the graph (the logit or a feature): for every block on "
    "the path, the edge's bypass plus one part per head, adding up to its weight",
)
def heads(req: HeadsRequest, service: Service) -> HeadsResponse:
    return explain_heads.head_loadings(service, req)


@router.post(
    "/attribution/qk",
    response_model=QKResponse,
    responses=ERROR_RESPONSES,
    summary="Why a head attended from a query position to a key: its pre-softmax score as a sum of terms, one per "
    "(source at the query, source at the key), over the replacement model's tokens, features, errors and biases",
)
def qk(req: QKRequest, service: Service) -> QKResponse:
    return explain_heads.qk(service, req)


@router.post(
    "/attribution/supernodes",
    response_model=SupernodesResponse,
    responses=ERROR_RESPONSES,
    summary="Group the graph's most influential features automatically (by decoder direction, co-activation or "
    "shared targets, each scored), every group checked by taking it out of the real model",
)
def supernodes(req: SupernodesRequest, service: Service) -> SupernodesResponse:
    return explain_groups.supernodes(service, req)


@router.post(
    "/attribution/trust",
    response_model=TrustResponse,
    responses=ERROR_RESPONSES,
    summary="How far to trust a graph: the replacement model's fidelity on the prompt, the error nodes' share, and "
    "the most influential features each taken out of the real model beside their edges",
)
def trust(req: AttributionRequest, service: Service) -> TrustResponse:
    return explain_groups.trust(service, req)


@router.post(
    "/attribution/compare-sets",
    response_model=CompareSetsResponse,
    responses=ERROR_RESPONSES,
    summary="Two transcoder sets (per-layer or cross-layer) on the same prompt: each graph's size, error share and "
    "replacement fidelity, and where the two graphs disagree",
)
def compare_sets(req: CompareSetsRequest, service: Service) -> CompareSetsResponse:
    return explain_groups.compare_sets(service, req)
