from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Models, Runs, Service
from ..explain import heads as head_roles
from ..schemas.common import ERROR_RESPONSES, MAX_PROMPT_CHARS
from ..schemas.heads import HeadsResponse, TrainingHeads
from ..wire import Binary, answer, responses

router = APIRouter(tags=["heads"])


@router.get(
    "/heads",
    response_model=HeadsResponse,
    responses={**ERROR_RESPONSES, **responses(HeadsResponse)},
    summary="What each head does: role scores against random-weight baselines, and what switching it off costs",
)
def heads(
    service: Service,
    binary: Binary,
    text: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_PROMPT_CHARS,
            description="prompt the prompt roles are scored on (default: the start of the "
            "built-in corpus's held-out text), truncated to the context window",
        ),
    ] = None,
    ablate: Annotated[bool, Query(description="run the ablation check for heads with a role")] = True,
) -> HeadsResponse:
    return answer(head_roles.heads(service, text, ablate), binary)


@router.get(
    "/training/{run_id}/heads",
    response_model=TrainingHeads,
    responses=ERROR_RESPONSES,
    summary="Head role scores and the in-context score at every snapshot of a run (watch roles appear)",
)
def training_heads(run_id: str, runs: Runs, models: Models) -> TrainingHeads:
    return head_roles.training_heads(runs, models, run_id)
