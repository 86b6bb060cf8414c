from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Service
from ..explain import forward as fwd
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS
from ..schemas.forward import ForwardRequest, ForwardResponse, PartsResponse
from ..schemas.stages import LogitLensBlock
from ..wire import Binary, answer, responses

router = APIRouter(tags=["forward"])


@router.post(
    "/forward",
    response_model=ForwardResponse,
    responses={**ERROR_RESPONSES, **responses(ForwardResponse)},
    summary="Run the model on a prompt: tokens, attention [layer][head][query][key], next-token probabilities",
)
def forward(req: ForwardRequest, service: Service, binary: Binary) -> ForwardResponse:
    return answer(fwd.forward(service, req), binary)


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
    responses={**ERROR_RESPONSES, **responses(ForwardResponse)},
    summary="The same trace for a prompt given in the URL (the main page's JSON twin)",
)
def forward_get(
    service: Service,
    binary: Binary,
    text: Annotated[str, Query(min_length=1, max_length=MAX_PROMPT_CHARS)],
    top_k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> ForwardResponse:
    return answer(fwd.forward(service, ForwardRequest(text=text, top_k=top_k)), binary)


@router.post(
    "/logit-lens",
    response_model=LogitLensBlock,
    responses={**ERROR_RESPONSES, **responses(LogitLensBlock)},
    summary="What each layer would predict: the final norm (a post-norm model has none) and unembedding applied "
    "after every block",
)
def logit_lens(req: ForwardRequest, service: Service, binary: Binary) -> LogitLensBlock:
    return answer(fwd.forward(service, req.model_copy(update={"include": ["logit_lens"]})).logit_lens, binary)
