"""Sparse autoencoders: the served model's SAEs, training them in the background, their features."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from gptscope.model.sae import SAETrainConfig

from ..artefacts import Training
from ..deps import Runs, Service
from ..explain import sae as explain_sae
from ..job_kinds import SAE_TRAINING
from ..jobs import JobRunner, Route, job_routes
from ..saes import SAES as store
from ..saes import corpus_for
from ..schemas.common import ERROR_RESPONSES, ErrorResponse
from ..schemas.sae import FeatureDetail, FeatureList, SaeInfo, SaeJob, SaeList, SaeTrainRequest, SortKey

router = APIRouter(tags=["sae"])


get_jobs = SAE_TRAINING.runner


Jobs = Annotated[JobRunner[Training], Depends(get_jobs)]
CONFLICT = {409: {"model": ErrorResponse, "description": "an SAE training job is already going"}}


@router.get("/saes", response_model=SaeList, summary="The served model's SAEs with their quality figures")
def list_saes(service: Service) -> SaeList:
    return explain_sae.listing(service)


@router.post(
    "/saes",
    status_code=202,
    response_model=SaeJob,
    responses={**ERROR_RESPONSES, **CONFLICT},
    summary="Train an SAE on one layer's residual stream of the served model (in the background)",
)
def start(req: SaeTrainRequest, jobs: Jobs, runs: Runs, service: Service) -> SaeJob:
    fields = req.model_dump(exclude={"name", "corpus"})
    corpus = corpus_for(service, req.corpus, runs.corpus_path)
    return explain_sae.job_status(store.start_training(jobs, service, SAETrainConfig(**fields), req.name, corpus))


job_routes(
    router,
    "/saes/jobs",
    get_jobs,
    SaeJob,
    explain_sae.job_status,
    listing=Route("list_jobs", "SAE training jobs since the app started"),
    get=Route("get_job", "An SAE training job: its progress, then its figures"),
    cancel=Route("cancel_job", "Stop an SAE training job (nothing is saved)"),
)


@router.get("/saes/{name}", response_model=SaeInfo, summary="One SAE: how it was trained and its quality figures")
def get_sae(name: str, service: Service) -> SaeInfo:
    return explain_sae.info(store.get_by_path(service, name))


@router.get(
    "/saes/{name}/features",
    response_model=FeatureList,
    responses=ERROR_RESPONSES,
    summary="An SAE's features: searchable by number or token, sortable, a page at a time",
)
def list_features(
    name: str,
    service: Service,
    q: Annotated[
        str, Query(max_length=100, description="a feature number, or text in its top or promoted tokens")
    ] = "",
    sort: SortKey = "density",
    descending: bool = True,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> FeatureList:
    return explain_sae.feature_list(service, name, q, sort, descending, offset, limit)


@router.get(
    "/saes/{name}/features/{feature}",
    response_model=FeatureDetail,
    responses=ERROR_RESPONSES,
    summary="One feature: top held-out passages shaded per token, histogram, logit effects, density",
)
def feature(name: str, feature: int, service: Service) -> FeatureDetail:
    return explain_sae.feature_detail(service, name, feature)
