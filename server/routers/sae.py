"""Sparse autoencoders: the served model's SAEs, training them in the background, their features."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gptscope.model.sae import SAETrainConfig

from .. import saes as store
from ..deps import Runs, Service
from ..explain import sae as ex
from ..schemas.common import ERROR_RESPONSES, ErrorResponse
from ..schemas.sae import FeatureDetail, FeatureList, SaeInfo, SaeJob, SaeList, SaeTrainRequest, SortKey

router = APIRouter(tags=["sae"])


def get_jobs(request: Request) -> store.SaeJobs:
    return request.app.state.sae_jobs


Jobs = Annotated[store.SaeJobs, Depends(get_jobs)]
CONFLICT = {409: {"model": ErrorResponse, "description": "an SAE training job is already going"}}


@router.get("/saes", response_model=SaeList, summary="The served model's SAEs with their quality figures")
def list_saes(service: Service) -> SaeList:
    return ex.listing(service)


@router.post(
    "/saes",
    status_code=202,
    response_model=SaeJob,
    responses={**ERROR_RESPONSES, **CONFLICT},
    summary="Train an SAE on one layer's residual stream of the served model (in the background)",
)
def start(req: SaeTrainRequest, jobs: Jobs, runs: Runs, service: Service) -> SaeJob:
    fields = req.model_dump(exclude={"name", "corpus"})
    corpus = store.corpus_for(service, req.corpus, runs.corpus_path)
    return ex.job_status(jobs.start(service, SAETrainConfig(**fields), req.name, corpus))


@router.get("/saes/jobs", response_model=list[SaeJob], summary="SAE training jobs since the app started")
def list_jobs(jobs: Jobs) -> list[SaeJob]:
    return [ex.job_status(j) for j in jobs.jobs.values()]


@router.get("/saes/jobs/{job_id}", response_model=SaeJob, summary="An SAE training job: its progress, then its figures")
def get_job(job_id: str, jobs: Jobs) -> SaeJob:
    return ex.job_status(jobs.get(job_id))


@router.post("/saes/jobs/{job_id}/cancel", response_model=SaeJob, summary="Stop an SAE training job (nothing is saved)")
def cancel_job(job_id: str, jobs: Jobs) -> SaeJob:
    return ex.job_status(jobs.cancel(job_id))


@router.get("/saes/{name}", response_model=SaeInfo, summary="One SAE: how it was trained and its quality figures")
def get_sae(name: str, service: Service) -> SaeInfo:
    return ex.info(store.get_by_path(service, name))


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
    return ex.feature_list(service, name, q, sort, descending, offset, limit)


@router.get(
    "/saes/{name}/features/{feature}",
    response_model=FeatureDetail,
    responses=ERROR_RESPONSES,
    summary="One feature: top held-out passages shaded per token, histogram, logit effects, density",
)
def feature(name: str, feature: int, service: Service) -> FeatureDetail:
    return ex.feature_detail(service, name, feature)
