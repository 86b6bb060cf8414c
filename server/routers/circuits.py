"""Circuits from edges: every edge's score (AtP, EAP-IG, exact edge patching), the estimates against
the exact scores, and the smallest circuit that recovers a share of the metric; at once or as a job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ..circuit_jobs import SEARCHES
from ..deps import Service
from ..explain import circuits as explain_circuits
from ..job_kinds import CIRCUITS
from ..jobs import Answered, JobRunner, analysis_routes
from ..schemas.circuits import CircuitJob, CircuitRequest, CircuitResponse
from ..schemas.common import ERROR_RESPONSES
from ..wire import Binary, answer, responses

router = APIRouter(tags=["circuits"])


get_jobs = CIRCUITS.runner


Jobs = Annotated[JobRunner[Answered[CircuitResponse]], Depends(get_jobs)]


@router.post(
    "/circuits",
    response_model=CircuitResponse,
    responses={**ERROR_RESPONSES, **responses(CircuitResponse)},
    summary="Edge circuits: every edge of the model's graph (embeddings, each head's query, key and value "
    "inputs, each MLP, the logits) scored by attribution patching, EAP-IG and exact edge patching, the estimates "
    "against the exact scores, and the fewest edges that recover a share of the metric",
)
def circuits(req: CircuitRequest, service: Service, binary: Binary) -> CircuitResponse:
    return answer(explain_circuits.circuits(service, req), binary)


@router.post(
    "/circuits/jobs",
    status_code=202,
    response_model=CircuitJob,
    responses=ERROR_RESPONSES,
    summary="The same in the background, for exact scores of many edges or a large model: poll "
    "GET /api/v1/circuits/jobs/{id} for its progress and answer (a newer job cancels one still going)",
)
def start_job(req: CircuitRequest, service: Service, jobs: Jobs) -> CircuitJob:
    return show(SEARCHES.start(jobs, service, req))


show = analysis_routes(router, "/circuits/jobs", get_jobs, CircuitJob, "circuit job", "graph runs")
