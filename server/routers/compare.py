from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Models, Runs
from ..explain.compare import compare as comparison
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS, NOT_FOUND
from ..schemas.compare import CompareRequest, CompareResponse
from ..schemas.training import CHECKPOINT_PATTERN
from ..wire import Binary, answer, responses

router = APIRouter(tags=["compare"])


@router.post(
    "/compare",
    response_model=CompareResponse,
    responses={**ERROR_RESPONSES, **NOT_FOUND, **responses(CompareResponse)},
    summary="Two checkpoints on the same text: bits per character, next-token distributions (KL both ways), "
    "attention and its difference, logit lens, how far each weight moved",
)
def compare(req: CompareRequest, runs: Runs, models: Models, binary: Binary) -> CompareResponse:
    return answer(comparison(runs, models, req), binary)


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
    return answer(
        comparison(runs, models, CompareRequest(a=a, b=b, text=text, char=char, layer=layer, head=head)), binary
    )
