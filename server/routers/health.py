from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain.model_info import health as health_of
from ..schemas.health import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, summary="Is the app up, and which model is loaded")
def health(service: Service) -> Health:
    return health_of(service)
