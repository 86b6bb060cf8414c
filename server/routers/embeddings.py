from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Service
from ..explain import embeddings
from ..schemas.common import ERROR_RESPONSES
from ..schemas.embeddings import NeighboursResponse, PositionsResponse, ProjectionResponse

router = APIRouter(prefix="/embeddings", tags=["embeddings"])


@router.get(
    "/projection",
    response_model=ProjectionResponse,
    responses=ERROR_RESPONSES,
    summary="2D PCA of the token embedding matrix W_E",
)
def projection(
    service: Service, limit: Annotated[int, Query(ge=1, le=200_000, description="first N token ids")] = 4096
) -> ProjectionResponse:
    return embeddings.projection(service, limit)


@router.get(
    "/neighbours",
    response_model=NeighboursResponse,
    responses=ERROR_RESPONSES,
    summary="Nearest tokens to one token by cosine similarity of their embeddings",
)
def neighbours(
    service: Service,
    token: Annotated[str | None, Query(max_length=200, description="the token's text (must be one token)")] = None,
    id: Annotated[int | None, Query(description="or the token's id")] = None,
    k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> NeighboursResponse:
    return embeddings.neighbours(service, token, id, k)


@router.get(
    "/positions",
    response_model=PositionsResponse,
    responses=ERROR_RESPONSES,
    summary="Cosine similarity between learned position embeddings, beside the sinusoidal encoding's",
)
def positions(
    service: Service,
    limit: Annotated[int, Query(ge=2, le=1024, description="at most this many positions (evenly spaced)")] = 128,
) -> PositionsResponse:
    return embeddings.positions(service, limit)
