"""The family tree the texts narrate (the /genealogy page's JSON twin). Pure data from
gptscope.model.genealogy. /genealogy/worked recomputes the texts' worked examples at other numbers;
the defaults are the texts'."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..explain import genealogy as ex
from ..schemas import genealogy as schemas
from ..schemas.common import ERROR_RESPONSES

router = APIRouter(tags=["genealogy"])


@router.get(
    "/genealogy",
    response_model=schemas.GenealogyResponse,
    responses=ERROR_RESPONSES,
    summary="The texts' models from the 2017 Transformer to InstructGPT: changes, configs, counted parameters, "
    "data, results and worked examples, each fact with its source text",
)
def genealogy() -> schemas.GenealogyResponse:
    return ex.genealogy()


@router.get(
    "/genealogy/worked",
    response_model=schemas.WorkedExamples,
    responses=ERROR_RESPONSES,
    summary="The texts' worked examples at your numbers: uniform loss to perplexity, float32 underflow against "
    "the log-sum, one LayerNorm entry, the loss at a probability",
)
def worked(
    vocab: Annotated[int, Query(ge=2, le=10_000_000, description="vocabulary size (GPT-1: 40,478)")] = 40_478,
    perplexity: Annotated[
        float,
        Query(
            ge=1,
            le=10_000_000,
            description="perplexity after training (GPT-1: 18.4); above vocab, the drop is negative",
        ),
    ] = 18.4,
    n: Annotated[int, Query(ge=1, le=100_000, description="tokens multiplied together (the text: 100)")] = 100,
    p: Annotated[float, Query(gt=0, le=1, description="the probability of each of them (the text: 0.1)")] = 0.1,
    x: Annotated[float, Query(ge=-1e6, le=1e6, description="one feature before LayerNorm (the text: 0.099)")] = 0.099,
    mean: Annotated[float, Query(ge=-1e6, le=1e6, description="its vector's mean (the text: -0.005)")] = -0.005,
    var: Annotated[float, Query(ge=0, le=1e12, description="its vector's variance (the text: 0.137)")] = 0.137,
    loss_p: Annotated[
        float, Query(gt=0, le=1, description="a probability on the right token, to mark on -ln p (0.9)")
    ] = 0.9,
) -> schemas.WorkedExamples:
    return ex.worked(vocab, perplexity, n, p, x, mean, var, loss_p)
