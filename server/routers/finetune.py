"""Fine-tuning (GPT-1's second stage): labelled tasks, comparison jobs, and a served classifier."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, UploadFile

from gptscope.model import checkpoint as ckpt

from ..config import BUILTIN_CHECKPOINT
from ..deps import Runs, Service
from ..errors import InputError
from ..explain import finetune as explain_finetune
from ..finetune_jobs import FinetuneManager
from ..job_kinds import FINETUNE
from ..jobs import Route, job_routes
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND, ErrorResponse
from ..schemas.finetune import (
    MAX_CSV_BYTES,
    TASK_PATTERN,
    ClassifyRequest,
    ClassifyResponse,
    FinetuneJob,
    FinetuneRequest,
    TaskInfo,
    TasksResponse,
)

router = APIRouter(tags=["fine-tuning"])


get_finetune = FINETUNE.runner


Jobs = Annotated[FinetuneManager, Depends(get_finetune)]
CONFLICT = {409: {"model": ErrorResponse, "description": "a fine-tuning job is already going"}}


@router.get(
    "/finetune/tasks", response_model=TasksResponse, summary="Labelled tasks: the built-in ones and uploaded CSVs"
)
def list_tasks(jobs: Jobs) -> TasksResponse:
    return explain_finetune.tasks(jobs)


@router.post(
    "/finetune/tasks",
    status_code=201,
    response_model=TaskInfo,
    responses=ERROR_RESPONSES,
    summary=f"Upload a CSV (header text,label[,text_b]; at most {MAX_CSV_BYTES // 2**20} MiB) as a task",
)
async def upload_task(
    jobs: Jobs,
    file: Annotated[UploadFile, File(description="CSV: text,label[,text_b]")],
    name: Annotated[str, Form(pattern=TASK_PATTERN, description="the task's name")],
) -> TaskInfo:
    data = await file.read(MAX_CSV_BYTES + 1)
    return explain_finetune.task_info(jobs.save_csv(name, data))


@router.post(
    "/finetune",
    status_code=202,
    response_model=FinetuneJob,
    responses={**ERROR_RESPONSES, **CONFLICT, **NOT_FOUND},
    summary="Fine-tune a pretrained model on a task, by every method and size asked for (in the background)",
)
def start(req: FinetuneRequest, jobs: Jobs, runs: Runs, service: Service) -> FinetuneJob:
    if req.checkpoint is None:
        base, name = service.checkpoint, service.name
    else:
        path = runs.checkpoint_path(req.checkpoint, BUILTIN_CHECKPOINT)
        try:
            base, name = ckpt.load(path), req.checkpoint
        except ckpt.CheckpointError as e:
            raise InputError("checkpoint", str(e)) from None
    return explain_finetune.job_status(jobs.finetune(req, base, name, loaded=req.checkpoint is not None))


job_routes(
    router,
    "/finetune",
    get_finetune,
    FinetuneJob,
    explain_finetune.job_status,
    listing=Route("list_jobs", "Fine-tuning jobs since the app started"),
    get=Route("get_job", "A fine-tuning job: finished cells, the one running, the saved classifier", NOT_FOUND),
    cancel=Route("cancel_job", "Stop a fine-tuning job (the cells already finished stay)", NOT_FOUND),
)


@router.post(
    "/classify",
    response_model=ClassifyResponse,
    responses=ERROR_RESPONSES,
    summary="Label a text with the served fine-tuned classifier, and explain the label",
)
def classify(req: ClassifyRequest, service: Service) -> ClassifyResponse:
    return explain_finetune.classify(service, req)
