"""One APIRouter per area. JSON routers live under /api/v1; `pages` serves the HTML shells and
`docs` the OpenAPI page.

A new area is a module here with a `router`, named once in API_AREAS; create_app includes them
in this order, which is the order of their paths in /openapi.json.
"""

from __future__ import annotations

from importlib import import_module

from fastapi import APIRouter

API_AREAS = (
    "health",
    "tokenize",
    "forward",
    "overview",
    "sampling",
    "embeddings",
    "intervene",
    "training",
    "learn",
    "lessons",
    "heads",
    "timeline",
    "compare",
    "finetune",
    "genealogy",
    "sae",
    "lens",
    "probes",
    "steering",
    "patch",
    "circuits",
    "attribution",
    "token_attribution",
    "export",
    "export_model",
)


def api_routers() -> list[APIRouter]:
    """Each area's router, in API_AREAS' order."""
    return [import_module(f"{__name__}.{area}").router for area in API_AREAS]
