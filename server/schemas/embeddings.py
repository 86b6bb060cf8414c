from __future__ import annotations

from pydantic import BaseModel, Field


class ProjectedToken(BaseModel):
    id: int
    text: str
    x: float
    y: float


class ProjectionResponse(BaseModel):
    method: str = "pca"
    explained_variance_ratio: list[float] = Field(
        description="share of the variance of W_E's rows along each of the 2 axes"
    )
    tokens: list[ProjectedToken]


class Neighbour(BaseModel):
    id: int
    text: str
    cosine: float


class NeighboursResponse(BaseModel):
    token: ProjectedToken | None = None
    id: int
    text: str
    neighbours: list[Neighbour]


class PositionsResponse(BaseModel):
    positions: list[int]
    learned_similarity: list[list[float]] = Field(description="cosine similarity between rows of the learned W_P")
    sinusoidal_similarity: list[list[float]] = Field(
        description="the same for the original Transformer's sinusoidal encoding at the same width"
    )
