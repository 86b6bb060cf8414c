"""Linear probes on the residual stream: a probe per layer against the majority and a random-model baseline."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain.probes import probes as run_probes
from ..schemas.common import ERROR_RESPONSES
from ..schemas.probes import ProbeRequest, ProbeResponse

router = APIRouter(tags=["probes"])


@router.post(
    "/probes",
    response_model=ProbeResponse,
    responses=ERROR_RESPONSES,
    summary="Train a linear probe per layer on labelled texts; held-out accuracy against the majority "
    "baseline and the same probe on a random model",
)
def probes(req: ProbeRequest, service: Service) -> ProbeResponse:
    return run_probes(service, req)
