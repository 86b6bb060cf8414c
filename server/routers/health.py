from __future__ import annotations

from fastapi import APIRouter

from .. import __version__
from ..deps import Service
from ..explain.model_info import model_info
from ..schemas.health import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, summary="Is the app up, and which model is loaded")
def health(service: Service) -> Health:
    return Health(version=__version__, model=service.name, device=str(service.device), info=model_info(service))
