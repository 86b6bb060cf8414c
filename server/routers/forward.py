"""The forward trace (POST and GET /api/v1/forward), its parts, and the logit lens alone.

A trace's memory grows with its tokens (the attention maps as T^2 x heads): each endpoint estimates
its peak first (explain/forward.py's `need`) and holds it in the process' memory budget
(server/memory.py) while the answer is built and encoded (`held`), so a trace too big for the budget
is a 422 naming the field to change and one that waits too long for room a 503."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel

from .. import memory
from ..deps import Service
from ..explain import forward as fwd
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS
from ..schemas.forward import ForwardRequest, ForwardResponse, PartsResponse
from ..schemas.stages import LogitLensBlock
from ..wire import Binary, answer, responses

router = APIRouter(tags=["forward"])


def encoded(model: BaseModel, binary: bool) -> Response:
    """The answer's bytes, made now: MessagePack (wire.answer) or the JSON FastAPI would send for it."""
    if binary:
        return answer(model, True)
    return Response(model.model_dump_json(by_alias=True), media_type="application/json", headers={"Vary": "Accept"})


def held(need: memory.Need | None, make: Callable[[], BaseModel], binary: bool) -> Response:
    """make() and its encoded answer with `need`'s bytes held in the memory budget (a 422 when they
    could never fit, a 503 when other work holds them too long): an answer's lists and text are
    most of a trace's peak, so they are made inside the hold, not by FastAPI after it."""
    with memory.hold(need):
        return encoded(make(), binary)


def trace(service, req: ForwardRequest, binary: bool, where: str = "body", pick=None) -> Response:
    plan = fwd.prepare(service, req)
    pick = pick or (lambda r: r)
    return held(fwd.need(service, plan, binary, where), lambda: pick(fwd.build(service, plan)), binary)


@router.post(
    "/forward",
    response_model=ForwardResponse,
    responses={**ERROR_RESPONSES, **responses(ForwardResponse)},
    summary="Run the model on a prompt: tokens, attention [layer][head][query][key], next-token probabilities",
)
def forward(req: ForwardRequest, service: Service, binary: Binary) -> ForwardResponse:
    return trace(service, req, binary)  # type: ignore[return-value]


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
    return trace(service, ForwardRequest(text=text, top_k=top_k), binary, where="query")  # type: ignore[return-value]


@router.post(
    "/logit-lens",
    response_model=LogitLensBlock,
    responses={**ERROR_RESPONSES, **responses(LogitLensBlock)},
    summary="What each layer would predict: the final norm (a post-norm model has none) and unembedding applied "
    "after every block",
)
def logit_lens(req: ForwardRequest, service: Service, binary: Binary) -> LogitLensBlock:
    lens = req.model_copy(update={"include": ["logit_lens"]})
    return trace(service, lens, binary, pick=lambda r: r.logit_lens)  # type: ignore[return-value]
