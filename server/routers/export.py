"""GET /api/v1/export: one panel of a page as a self-contained HTML file, for tools.

    curl -o attention.html 'localhost:8000/api/v1/export?page=forward&panel=attention&text=ROMEO:&layer=1'

The same file as the panel's "HTML" download (static/js/lib/export_html.js): the page is opened in
embed mode by a headless Chromium on this machine (gptscope.export), with the other query fields as
its URL state, and exported once it has drawn. Chromium opens the server's own address (the one it
was bound to, loopback for every address, and its port), never one a request names. One export runs
at a time: another asked for meanwhile gets 503 with Retry-After, never a queue.
"""

from __future__ import annotations

import threading
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from gptscope.export import ExportFailed, ExportUnavailable, export_panel

from ..errors import InputError
from ..pages import BY_NAME, PAGE_NAMES, panels
from ..schemas.common import ERROR_RESPONSES
from ..security import own_origin

ERROR_REF = "#/components/schemas/ErrorResponse"

router = APIRouter(tags=["export"])

# the pages (server/pages.py: PAGES); each panel is a section `<name>-panel` of its page
PageName = Literal[PAGE_NAMES]  # type: ignore[valid-type]
_one = threading.Lock()
RETRY_AFTER_S = 5  # a render takes a few seconds


@router.get(
    "/export",
    response_class=HTMLResponse,
    summary="One panel as a self-contained, interactive HTML file (no network needed to open it)",
    responses={  # errors are JSON, though the answer is HTML (so not FastAPI's text/html for them)
        code: {"description": d, "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}}
        for code, d in (
            (413, ERROR_RESPONSES[413]["description"]),
            (422, ERROR_RESPONSES[422]["description"]),
            (503, "no headless Chromium on the server to make the file with, or another export is being made"),
        )
    },
)
def export(
    request: Request,
    page: Annotated[PageName, Query(description="the page")],
    panel: Annotated[
        str, Query(description="the panel: the name of a section PANEL-panel of that page (as ?embed=PANEL)")
    ],
) -> Response:
    if panel not in panels(page):
        known = ", ".join(panels(page))
        raise InputError("panel", f"page {page!r} has no panel {panel!r}; its panels: {known}", where="query")
    state = [(k, v) for k, v in request.query_params.multi_items() if k not in ("page", "panel", "embed")]
    settings = request.app.state.settings
    # the server's own address, never the request's Host: Chromium opens only this app's page
    url = own_origin(settings.host, request.scope) + BY_NAME[page].path + "?" + urlencode([*state, ("embed", panel)])
    token = request.app.state.door_token
    if not _one.acquire(blocking=False):
        return JSONResponse(
            status_code=503,
            content={"detail": f"an export is being made; one is made at a time: retry in {RETRY_AFTER_S} s"},
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    try:
        html = export_panel(url, panel, headers={"Authorization": f"Bearer {token}"} if token else None)
    except ExportUnavailable as e:
        return JSONResponse(status_code=503, content={"detail": str(e)})
    except ExportFailed as e:  # the page would not draw it (a panel this model lacks, say)
        raise InputError("panel", str(e), where="query") from None
    finally:
        _one.release()
    return HTMLResponse(html, headers={"Content-Disposition": f'inline; filename="{page}-{panel}.html"'})
