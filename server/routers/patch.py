"""Activation patching between a clean and a corrupted prompt: the sweep at once, as a job, and
ready-made pairs for the loaded model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ..deps import Service
from ..explain import patch as explain_patch
from ..explain import patch_pairs
from ..job_kinds import PATCH
from ..jobs import Answered, JobRunner, analysis_routes
from ..patch_jobs import SWEEPS
from ..schemas.common import ERROR_RESPONSES
from ..schemas.patch import PatchJob, PatchPair, PatchRequest, PatchResponse
from ..wire import Binary, answer, responses

router = APIRouter(tags=["patching"])


get_jobs = PATCH.runner


Jobs = Annotated[JobRunner[Answered[PatchResponse]], Depends(get_jobs)]


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
    return show(SWEEPS.start(jobs, service, req))


show = analysis_routes(router, "/patch/jobs", get_jobs, PatchJob, "patching job", "patched runs")


@router.get(
    "/patch/pairs",
    response_model=list[PatchPair],
    summary="Ready-made clean/corrupted pairs that the loaded model's tokenizer cuts into equal token counts",
)
def pairs(service: Service) -> list[PatchPair]:
    return patch_pairs.pairs(service)
