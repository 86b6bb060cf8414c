"""FastAPI dependencies (used as Annotated types in the routers)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .models import ModelRegistry
from .runs import RunManager
from .service import ModelService


def get_service(request: Request) -> ModelService:
    """The model the app serves now (server/models.py)."""
    return request.app.state.models.served


def get_models(request: Request) -> ModelRegistry:
    return request.app.state.models


def get_runs(request: Request) -> RunManager:
    return request.app.state.jobs["training"]  # server/job_kinds.py's TRAINING


Service = Annotated[ModelService, Depends(get_service)]
Models = Annotated[ModelRegistry, Depends(get_models)]
Runs = Annotated[RunManager, Depends(get_runs)]
