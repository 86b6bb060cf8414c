from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain.intervene import intervene as run_intervention
from ..schemas.common import ERROR_RESPONSES
from ..schemas.intervene import InterveneRequest, InterveneResponse

router = APIRouter(tags=["interventions"])


@router.post(
    "/intervene",
    response_model=InterveneResponse,
    responses=ERROR_RESPONSES,
    summary="Zero heads or MLPs, or edit prompt tokens, and compare with the unaltered run",
)
def intervene(req: InterveneRequest, service: Service) -> InterveneResponse:
    return run_intervention(service, req)
