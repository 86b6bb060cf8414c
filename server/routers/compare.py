from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Models, Runs
from ..explain import compare as explain_compare
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS, NOT_FOUND
from ..schemas.compare import CompareRequest, CompareResponse
from ..schemas.training import CHECKPOINT_PATTERN
from ..wire import Binary, responses
from .forward import held

router = APIRouter(tags=["compare"])


@router.post(
    "/compare",
    response_model=CompareResponse,
    responses={**ERROR_RESPONSES, **NOT_FOUND, **responses(CompareResponse)},
    summary="Two checkpoints on the same text: bits per character, next-token distributions (KL both ways), "
    "attention and its difference, logit lens, how far each weight moved",
)
def compare(req: CompareRequest, runs: Runs, models: Models, binary: Binary) -> CompareResponse:
    return _held(runs, models, req, binary)  # type: ignore[return-value]


def _held(runs, models, req: CompareRequest, binary: bool, where: str = "body"):
    """The comparison and its encoded answer with its memory held (explain/compare.py's need)."""
    svcs = explain_compare.services(runs, models, req)
    need = explain_compare.need(svcs, req, binary, where)
    return held(need, lambda: explain_compare.compare(runs, models, req, svcs), binary)


@router.get(
    "/compare",
    response_model=CompareResponse,
    responses={**ERROR_RESPONSES, **NOT_FOUND, **responses(CompareResponse)},
    summary="The same comparison with its fields in the URL (the /compare page's JSON twin)",
)
def compare_get(
    runs: Runs,
    models: Models,
    binary: Binary,
    a: Annotated[str, Query(pattern=CHECKPOINT_PATTERN)],
    b: Annotated[str, Query(pattern=CHECKPOINT_PATTERN)],
    text: Annotated[str, Query(min_length=1, max_length=MAX_PROMPT_CHARS)],
    char: Annotated[int | None, Query(ge=0)] = None,
    layer: Annotated[int, Query(ge=0)] = 0,
    head: Annotated[int, Query(ge=0)] = 0,
) -> CompareResponse:
    req = CompareRequest(a=a, b=b, text=text, char=char, layer=layer, head=head)
    return _held(runs, models, req, binary, where="query")  # type: ignore[return-value]
