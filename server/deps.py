"""FastAPI dependencies (used as Annotated types in the routers)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .config import Settings
from .service import ModelService


def get_service(request: Request) -> ModelService:
    return request.app.state.service


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


Service = Annotated[ModelService, Depends(get_service)]
AppSettings = Annotated[Settings, Depends(get_settings)]
