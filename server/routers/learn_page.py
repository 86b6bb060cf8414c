"""The learning page (/learn): a shell whose panels fetch /api/v1/schedules/lr, /api/v1/curves/*
and /api/v1/params. Its JSON twin is GET /api/v1/curves, the index of those endpoints."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..deps import Service
from .pages import render

router = APIRouter(include_in_schema=False)


@router.get("/learn", response_class=HTMLResponse)
def learn_page(request: Request, service: Service) -> Response:
    return render(request, service, "learn.html", "learn", "/api/v1/curves")
