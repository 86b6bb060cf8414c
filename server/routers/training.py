"""Training from the app: start / watch / cancel runs, upload corpora, list and switch checkpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Query, Response, UploadFile
from fastapi.responses import JSONResponse

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod

from ..config import BUILTIN_CHECKPOINT
from ..deps import Models, Runs, Service, get_runs
from ..errors import InputError
from ..experiments import EXPERIMENTS
from ..explain import training as explain_training
from ..explain.model_info import health
from ..jobs import Job, Route, job_routes
from ..runs import TrainingRun
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND, ErrorResponse
from ..schemas.health import Health
from ..schemas.training import (
    NAME_PATTERN,
    CheckpointInfo,
    CorpusInfo,
    Experiment,
    ReplayFrame,
    SnapshotPlan,
    SwitchModelRequest,
    TrainingRequest,
    TrainingStatus,
)
from ..wire import Binary, answer, responses

router = APIRouter(tags=["training"])


@router.post(
    "/training",
    status_code=202,
    response_model=TrainingStatus,
    responses={
        **ERROR_RESPONSES,
        409: {"model": ErrorResponse, "description": "a run is already going"},
        200: {"model": TrainingStatus, "description": "an identical request already finished: that run, `cached` true"},
    },
    summary="Start a training run (one at a time); the app keeps serving its model meanwhile",
)
def start_training(req: TrainingRequest, runs: Runs):
    job = runs.train(req)
    if job.state.cached:  # an identical request already finished: 200 with that run instead of 202
        return JSONResponse(status_code=200, content=explain_training.status(job).model_dump(mode="json"))
    return explain_training.status(job)


@router.post(
    "/training-plan",
    response_model=SnapshotPlan,
    responses=ERROR_RESPONSES,
    summary="Before a run: how many snapshots a training request saves, at which steps, and their disk cost "
    "(nothing is started)",
)
def plan_training(req: TrainingRequest) -> SnapshotPlan:
    return explain_training.snapshot_plan(req)


def status_since(job: Job[TrainingRun], since: Annotated[int, Query(ge=0)] = 0) -> TrainingStatus:
    return explain_training.status(job, since)


job_routes(
    router,
    "/training",
    get_runs,
    TrainingStatus,
    explain_training.status,
    id_name="run_id",
    listing=Route(
        "list_training",
        "Runs started since the app began (history omitted)",
        show=lambda job: explain_training.status(job, since=10**9),
    ),
    get=Route(
        "get_training",
        "Progress of a run; `since` returns only the steps after it (for polling)",
        NOT_FOUND,
        show=status_since,
    ),
    cancel=Route(
        "cancel_training",
        "Cancel a run (a finished one is left as it is); the run and the snapshots it saved stay loadable",
        NOT_FOUND,
    ),
)


@router.delete(
    "/training/{run_id}",
    status_code=204,
    response_class=Response,
    responses={
        **NOT_FOUND,
        409: {"model": ErrorResponse, "description": "the app serves one of the run's checkpoints: switch model first"},
    },
    summary="Delete a run: cancel it if it is going, then remove it and its checkpoints (the run, its "
    "replay and its snapshots answer 404 from then on)",
)
def delete_training(run_id: str, runs: Runs, service: Service) -> Response:
    runs.delete(run_id, service.path)
    return Response(status_code=204)


@router.get(
    "/training/{run_id}/replay",
    response_model=ReplayFrame,
    responses={**ERROR_RESPONSES, **NOT_FOUND, **responses(ReplayFrame)},
    summary="Watch it learn: one snapshot of a run applied to a fixed prompt",
)
def replay(
    run_id: str,
    runs: Runs,
    models: Models,
    binary: Binary,
    step: Annotated[int, Query(ge=0)],
    text: Annotated[str, Query(min_length=1, max_length=2000)] = "ROMEO:\nBut soft, what light",
    tokens: Annotated[int, Query(ge=10, le=5000, description="how many token ids to project")] = 300,
) -> ReplayFrame:
    return answer(explain_training.replay(runs, models, run_id, step, text, tokens), binary)


@router.get(
    "/experiments",
    response_model=list[Experiment],
    summary="Short training experiments from the seeds: run each variant with POST /api/v1/training",
)
def list_experiments() -> list[Experiment]:
    return EXPERIMENTS


@router.get("/corpora", response_model=list[CorpusInfo], summary="The built-in corpus and the uploaded ones")
def list_corpora(runs: Runs) -> list[CorpusInfo]:
    return explain_training.corpora(runs)


@router.post(
    "/corpora",
    status_code=201,
    response_model=CorpusInfo,
    responses=ERROR_RESPONSES,
    summary=f"Upload a UTF-8 text file (at most {corpus_mod.MAX_CORPUS_BYTES // 2**20} MiB) to train on",
)
async def upload_corpus(
    runs: Runs,
    file: Annotated[UploadFile, File(description="a UTF-8 text file")],
    name: Annotated[str, Form(pattern=NAME_PATTERN, description="name to train with")],
) -> CorpusInfo:
    data = await file.read(corpus_mod.MAX_CORPUS_BYTES + 1)
    corpus = runs.save_corpus(name, data)
    return CorpusInfo(name=name, chars=len(corpus.text), bytes=len(data), builtin=False)


@router.get(
    "/checkpoints",
    response_model=list[CheckpointInfo],
    summary="Checkpoints the app can serve: the built-in model, finished runs and their snapshots",
)
def list_checkpoints(runs: Runs, service: Service) -> list[CheckpointInfo]:
    return explain_training.checkpoints(runs, BUILTIN_CHECKPOINT, service.path)


@router.post(
    "/model",
    response_model=Health,
    responses={**ERROR_RESPONSES, **NOT_FOUND},
    summary="Serve another checkpoint (by name from /api/v1/checkpoints)",
)
def switch_model(req: SwitchModelRequest, runs: Runs, models: Models) -> Health:
    path = runs.checkpoint_path(req.checkpoint, BUILTIN_CHECKPOINT)
    try:
        return health(models.serve(path))  # requests already running finish on the old model
    except ckpt.CheckpointError as e:
        raise InputError("checkpoint", str(e)) from None
