"""The OpenAPI page, offline: Swagger UI's files come from the `swagger-ui-bundle` package."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

router = APIRouter(include_in_schema=False)
ASSETS = "/vendor/swagger-ui"


@router.get("/docs", response_class=HTMLResponse)
def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="gptscope API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
    )


def mount_assets(app: FastAPI) -> None:
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
