"""Activation patching between a clean and a corrupted prompt: the sweep at once, as a job, and
ready-made pairs for the loaded model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from ..deps import Service
from ..explain import patch as explain_patch
from ..explain import patch_pairs
from ..jobs import Job, JobRunner, Route, job_routes
from ..patch_jobs import PatchSweep, start_sweep, sweep_status
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND
from ..schemas.patch import PatchJob, PatchPair, PatchRequest, PatchResponse
from ..wire import Binary, answer, responses

router = APIRouter(tags=["patching"])


def get_jobs(request: Request) -> JobRunner[PatchSweep]:
    return request.app.state.patch_jobs


Jobs = Annotated[JobRunner[PatchSweep], Depends(get_jobs)]


@router.post(
    "/patch",
    response_model=PatchResponse,
    responses={**ERROR_RESPONSES, **responses(PatchResponse)},
    summary="Activation patching: which layer, position and head carry the answer from the clean prompt to the "
    "corrupted one (resid_pre, attn_out, mlp_out per layer and position; each head; heads by position)",
)
def patch(req: PatchRequest, service: Service, binary: Binary) -> PatchResponse:
    return answer(explain_patch.patch(service, req), binary)


@router.post(
    "/patch/jobs",
    status_code=202,
    response_model=PatchJob,
    responses=ERROR_RESPONSES,
    summary="The same sweep in the background, for a large model or long prompts: poll "
    "GET /api/v1/patch/jobs/{id} for its progress and answer (a newer job cancels one still going)",
)
def start_job(req: PatchRequest, service: Service, jobs: Jobs) -> PatchJob:
    return sweep_status(start_sweep(jobs, service, req))


def status_or_msgpack(job: Job[PatchSweep], binary: Binary) -> PatchJob:
    return answer(sweep_status(job), binary)


job_routes(
    router,
    "/patch/jobs",
    get_jobs,
    PatchJob,
    sweep_status,
    get=Route(
        "get_job",
        "A patching job: patched runs done and needed, and its answer once done",
        {**NOT_FOUND, **responses(PatchJob)},
        show=status_or_msgpack,
    ),
    cancel=Route("cancel_job", "Stop a patching job", {**NOT_FOUND, **responses(PatchJob)}),
)


@router.get(
    "/patch/pairs",
    response_model=list[PatchPair],
    summary="Ready-made clean/corrupted pairs that the loaded model's tokenizer cuts into equal token counts",
)
def pairs(service: Service) -> list[PatchPair]:
    return patch_pairs.pairs(service)
