"""Training from the app: start / watch / cancel runs, upload corpora, list and switch checkpoints."""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import APIRouter, File, Form, HTTPException, Query, Request, UploadFile
from fastapi.responses import JSONResponse

from model import checkpoint as ckpt
from model import corpus as corpus_mod

from ..config import BUILTIN_CHECKPOINT
from ..deps import Service
from ..explain import training as ex
from ..schemas.common import ERROR_RESPONSES, ErrorResponse
from ..schemas.health import Health
from ..experiments import EXPERIMENTS
from ..schemas.training import (NAME_PATTERN, CheckpointInfo, CorpusInfo, Experiment, ReplayFrame, SwitchModelRequest,
                                TrainingRequest, TrainingStatus)
from ..service import ModelService
from ..training import RUN_ID, Conflict, TrainingManager

router = APIRouter(tags=["training"])


def manager(request: Request) -> TrainingManager:
    return request.app.state.training


def _job(request: Request, run_id: str):
    try:
        return manager(request).get(run_id)
    except KeyError:
        raise HTTPException(404, f"no training run {run_id!r}") from None


def _job_dir(request: Request, run_id: str) -> None:
    """A run of this app, or one left on disk by an earlier start of it."""
    m = manager(request)
    if run_id in m.jobs or (RUN_ID.fullmatch(run_id) and (m.runs_dir / run_id).is_dir()):
        return
    raise HTTPException(404, f"no training run {run_id!r}")


@router.post("/training", status_code=202, response_model=TrainingStatus,
             responses={**ERROR_RESPONSES, 409: {"model": ErrorResponse, "description": "a run is already going"}},
             summary="Start a training run (one at a time); the app keeps serving its model meanwhile")
def start_training(req: TrainingRequest, request: Request):
    try:
        job = manager(request).start(req)
    except Conflict as e:
        return JSONResponse(status_code=409, content={"detail": str(e), "running_id": e.running_id})
    except FileNotFoundError as e:
        return JSONResponse(status_code=422, content={"detail": [{"loc": ["body", "corpus"], "msg": str(e), "type": "value_error"}]})
    except ValueError as e:
        return JSONResponse(status_code=422, content={"detail": [{"loc": ["body"], "msg": str(e), "type": "value_error"}]})
    if job.cached:  # an identical request already finished: 200 with that run instead of 202
        return JSONResponse(status_code=200, content=ex.status(job).model_dump(mode="json"))
    return ex.status(job)


@router.get("/training", response_model=list[TrainingStatus], summary="Runs started since the app began (history omitted)")
def list_training(request: Request) -> list[TrainingStatus]:
    return [ex.status(j, since=10**9) for j in manager(request).jobs.values()]


@router.get("/training/{run_id}", response_model=TrainingStatus, responses={404: {"model": ErrorResponse}},
            summary="Progress of a run; `since` returns only the steps after it (for polling)")
def get_training(run_id: str, request: Request, since: Annotated[int, Query(ge=0)] = 0) -> TrainingStatus:
    return ex.status(_job(request, run_id), since)


@router.delete("/training/{run_id}", response_model=TrainingStatus, responses={404: {"model": ErrorResponse}},
               summary="Cancel a run; the snapshots it saved stay loadable")
def cancel_training(run_id: str, request: Request) -> TrainingStatus:
    _job(request, run_id)
    return ex.status(manager(request).cancel(run_id))


@router.get("/training/{run_id}/replay", response_model=ReplayFrame, responses={**ERROR_RESPONSES, 404: {"model": ErrorResponse}},
            summary="Watch it learn: one snapshot of a run applied to a fixed prompt")
def replay(run_id: str, request: Request, step: Annotated[int, Query(ge=0)],
           text: Annotated[str, Query(min_length=1, max_length=2000)] = "ROMEO:\nBut soft, what light",
           tokens: Annotated[int, Query(ge=10, le=5000, description="how many token ids to project")] = 300) -> ReplayFrame:
    _job_dir(request, run_id)
    return ex.replay(manager(request), run_id, step, text, tokens)


@router.get("/experiments", response_model=list[Experiment],
            summary="Short training experiments from the seeds: run each variant with POST /api/v1/training")
def list_experiments() -> list[Experiment]:
    return EXPERIMENTS


@router.get("/corpora", response_model=list[CorpusInfo], summary="The built-in corpus and the uploaded ones")
def list_corpora(request: Request) -> list[CorpusInfo]:
    return ex.corpora(manager(request))


@router.post("/corpora", status_code=201, response_model=CorpusInfo, responses=ERROR_RESPONSES,
             summary=f"Upload a UTF-8 text file (at most {corpus_mod.MAX_CORPUS_BYTES // 2**20} MiB) to train on")
async def upload_corpus(request: Request, file: Annotated[UploadFile, File(description="a UTF-8 text file")],
                        name: Annotated[str, Form(pattern=NAME_PATTERN, description="name to train with")]):
    if name == "shakespeare" or ".." in name:
        return JSONResponse(status_code=422, content={"detail": [{"loc": ["body", "name"], "msg": f"{name!r} is reserved or not valid", "type": "value_error"}]})
    data = await file.read(corpus_mod.MAX_CORPUS_BYTES + 1)
    try:
        corpus = corpus_mod.from_bytes(data, name)
    except corpus_mod.CorpusError as e:
        status = 413 if len(data) > corpus_mod.MAX_CORPUS_BYTES else 422
        return JSONResponse(status_code=status, content={"detail": [{"loc": ["body", "file"], "msg": str(e), "type": "value_error"}]})
    folder = manager(request).corpora_dir
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.txt"
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return CorpusInfo(name=name, chars=len(corpus.text), bytes=len(data), builtin=False)


@router.get("/checkpoints", response_model=list[CheckpointInfo], summary="Checkpoints the app can serve: the built-in model, finished runs and their snapshots")
def list_checkpoints(request: Request, service: Service) -> list[CheckpointInfo]:
    return ex.checkpoints(manager(request), BUILTIN_CHECKPOINT, service.path)


@router.post("/model", response_model=Health, responses={**ERROR_RESPONSES, 404: {"model": ErrorResponse}},
             summary="Serve another checkpoint (by name from /api/v1/checkpoints)")
def switch_model(req: SwitchModelRequest, request: Request) -> Health:
    from .health import health

    try:
        path = manager(request).checkpoint_path(req.checkpoint, BUILTIN_CHECKPOINT)
        new = ModelService(path, request.app.state.settings.device)
    except FileNotFoundError as e:
        raise HTTPException(404, str(e)) from None
    except (ValueError, ckpt.CheckpointError) as e:
        return JSONResponse(status_code=422, content={"detail": [{"loc": ["body", "checkpoint"], "msg": str(e), "type": "value_error"}]})
    request.app.state.service = new  # requests already running finish on the old model
    return health(new)
