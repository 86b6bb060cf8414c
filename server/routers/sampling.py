from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain import sampling
from ..schemas.common import ERROR_RESPONSES
from ..schemas.sampling import GenerateStepRequest, GenerateStepResponse, NextTokenRequest, NextTokenResponse

router = APIRouter(tags=["sampling"])


@router.post(
    "/next-token",
    response_model=NextTokenResponse,
    responses=ERROR_RESPONSES,
    summary="The next-token distribution before and after temperature, top-k and top-p",
)
def next_token(req: NextTokenRequest, service: Service) -> NextTokenResponse:
    return sampling.next_token(service, req)


@router.post(
    "/generate/step",
    response_model=GenerateStepResponse,
    responses=ERROR_RESPONSES,
    summary="One generation step: prefill the ids into the KV cache, decode, sample with (seed, step)",
)
def generate_step(req: GenerateStepRequest, service: Service) -> GenerateStepResponse:
    return sampling.generate_step(service, req)
