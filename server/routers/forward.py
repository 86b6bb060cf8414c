from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Service
from ..explain import forward as fwd
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS
from ..schemas.forward import ForwardRequest, ForwardResponse, PartsResponse
from ..schemas.stages import LogitLensBlock

router = APIRouter(tags=["forward"])


@router.post(
    "/forward",
    response_model=ForwardResponse,
    responses=ERROR_RESPONSES,
    summary="Run the model on a prompt: tokens, attention [layer][head][query][key], next-token probabilities",
)
def forward(req: ForwardRequest, service: Service) -> ForwardResponse:
    return fwd.forward(service, req)


@router.get(
    "/forward/parts",
    response_model=PartsResponse,
    summary="The parts a trace can include, which the loaded model has, and what makes each stale",
)
def forward_parts(service: Service) -> PartsResponse:
    return fwd.part_list(service)


@router.get(
    "/forward",
    response_model=ForwardResponse,
    responses=ERROR_RESPONSES,
    summary="The same trace for a prompt given in the URL (the main page's JSON twin)",
)
def forward_get(
    service: Service,
    text: Annotated[str, Query(min_length=1, max_length=MAX_PROMPT_CHARS)],
    top_k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> ForwardResponse:
    return fwd.forward(service, ForwardRequest(text=text, top_k=top_k))


@router.post(
    "/logit-lens",
    response_model=LogitLensBlock,
    responses=ERROR_RESPONSES,
    summary="What each layer would predict: the final LayerNorm and unembedding applied after every block",
)
def logit_lens(req: ForwardRequest, service: Service) -> LogitLensBlock:
    return fwd.forward(service, req.model_copy(update={"include": ["logit_lens"]})).logit_lens
