"""The family tree the texts narrate (the /genealogy page's JSON twin). Pure data from
gptscope.model.genealogy; it takes no input."""

from __future__ import annotations

from fastapi import APIRouter

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
