from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain import overview
from ..schemas.overview import Architecture

router = APIRouter(tags=["overview"])


@router.get(
    "/architecture",
    response_model=Architecture,
    summary="The loaded model at a glance: its family, sizes and every node of the forward pass, from the "
    "tokens through each block's norms, attention and MLP to sampling, as the forward page's diagram draws it",
)
def architecture(service: Service) -> Architecture:
    return overview.architecture(service)
