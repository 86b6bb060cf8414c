"""Tuned lenses: the served model's lenses with their held-out figures, and training them in the background."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from gptscope.model.tuned_lens import LensTrainConfig

from ..artefacts import Training
from ..deps import Runs, Service
from ..explain import lens as explain_lens
from ..job_kinds import LENS_TRAINING
from ..jobs import JobRunner, Route, job_routes
from ..lenses import LENSES as store
from ..saes import corpus_for
from ..schemas.common import ERROR_RESPONSES, ErrorResponse
from ..schemas.lens import LensInfo, LensJob, LensList, LensTrainRequest

router = APIRouter(tags=["lens"])


get_jobs = LENS_TRAINING.runner


Jobs = Annotated[JobRunner[Training], Depends(get_jobs)]
CONFLICT = {409: {"model": ErrorResponse, "description": "a tuned-lens training job is already going"}}


@router.get(
    "/lenses",
    response_model=LensList,
    summary="The served model's tuned lenses, each with both lenses' KL and top-1 agreement per stage on held-out text",
)
def list_lenses(service: Service) -> LensList:
    return explain_lens.listing(service)


@router.post(
    "/lenses",
    status_code=202,
    response_model=LensJob,
    responses={**ERROR_RESPONSES, **CONFLICT},
    summary="Train a tuned lens for the served model (in the background, within a time budget)",
)
def start(req: LensTrainRequest, jobs: Jobs, runs: Runs, service: Service) -> LensJob:
    tc = LensTrainConfig(**req.model_dump(exclude={"name", "corpus"}))
    corpus = corpus_for(service, req.corpus, runs.corpus_path)
    return explain_lens.job_status(store.start_training(jobs, service, tc, req.name, corpus))


job_routes(
    router,
    "/lenses/jobs",
    get_jobs,
    LensJob,
    explain_lens.job_status,
    listing=Route("list_jobs", "Tuned-lens training jobs since the app started"),
    get=Route("get_job", "A tuned-lens training job: its progress, then its figures"),
    cancel=Route("cancel_job", "Stop a tuned-lens training job (nothing is saved)"),
)


@router.get(
    "/lenses/{name}",
    response_model=LensInfo,
    responses=ERROR_RESPONSES,
    summary="One tuned lens: how it was trained and its figures beside the logit lens's",
)
def get_lens(name: str, service: Service) -> LensInfo:
    return explain_lens.info(store.get_by_path(service, name))
