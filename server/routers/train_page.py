"""The training page (/train): a shell whose panels start, watch and cancel runs through
/api/v1/training, replay snapshots, switch the served checkpoint and run the seed experiments.
Its JSON twin is GET /api/v1/checkpoints."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..deps import Service
from .pages import render

router = APIRouter(include_in_schema=False)


@router.get("/train", response_class=HTMLResponse)
def train_page(request: Request, service: Service) -> Response:
    return render(request, service, "train.html", "train", "/api/v1/checkpoints")
