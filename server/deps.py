"""FastAPI dependencies (used as Annotated types in the routers)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .runs import RunManager
from .service import ModelService


def get_service(request: Request) -> ModelService:
    return request.app.state.service


def get_runs(request: Request) -> RunManager:
    return request.app.state.runs


Service = Annotated[ModelService, Depends(get_service)]
Runs = Annotated[RunManager, Depends(get_runs)]
