"""gptscope inside Jupyter.

    from gptscope.notebook import patch, show, trace
    show("forward", text="ROMEO:\\nBut soft", stage="attention", layer=1, head=2)
    data = trace("ROMEO:\\nBut soft", include=["attention", "next_token"])
    sweep = patch(clean, corrupted)          # activation patching between two prompts

`show` puts one panel of the real page in the notebook: an IFrame of the page in embed mode
(`?embed=PANEL`: that panel alone, no header), with the rest of the keyword arguments as the
page's URL state, so the panel is as interactive as on the page. The pages are served by the app
in a background thread on a free loopback port, started on first use (the built-in model, data in
~/.gptscope; GPTSCOPE_* variables as for `gptscope serve`), or by a server you already run:
`connect("http://127.0.0.1:8000")`.

`show(..., embed="static")` puts the panel itself in the cell instead: one self-contained HTML
file (gptscope.export: the page's own exporter, run by a headless Chromium) in a frame, with its
data, code and styles, so the saved notebook shows it with no kernel and no server; Plotly comes
with the notebook's first static panel and the later ones share it. `embed="auto"` (the default)
is static where the browser cannot reach the kernel's loopback address (Colab, JupyterHub, a
remote machine over SSH or VS Code's remote kernels; GPTSCOPE_EMBED=static|live decides instead),
and live otherwise.

`trace`, `api` and the other data functions return the same JSON the API gives, as Python objects.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import urllib.error
import urllib.request
from urllib.parse import urlencode

from .background_server import BackgroundServer
from .server import pages

# page -> its path on the server; each panel is the section `<name>-panel` of that page
PAGES = {p.name: p.path for p in pages.PAGES}  # every page the app declares (server/pages.py), by name

_base_url: str | None = None
_server: BackgroundServer | None = None
_plotly_shown = False  # a static panel carrying Plotly is in this notebook already

EMBEDS = ("auto", "live", "static")
# where the browser showing the notebook is not the kernel's machine, so 127.0.0.1 is not the app
REMOTE_ENV = (
    "JUPYTERHUB_API_URL",
    "JUPYTERHUB_SERVICE_PREFIX",
    "SSH_CONNECTION",
    "SSH_CLIENT",
    "CODESPACES",
    "REMOTE_CONTAINERS",
    "VSCODE_AGENT_FOLDER",
    "BINDER_SERVICE_HOST",
    "KAGGLE_KERNEL_RUN_TYPE",
)


class ApiError(RuntimeError):
    """A 4xx/5xx answer: `status`, and the API's `detail` (a message, or a list naming the fields)."""

    def __init__(self, status: int, detail) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


def connect(url: str) -> str:
    """Use a gptscope server that is already running (for example `gptscope serve`) instead of starting one."""
    global _base_url
    _base_url = url.rstrip("/")
    return _base_url


def base_url() -> str:
    """The server's URL: the one connected to, or a background server started now (once per kernel)."""
    global _base_url, _server
    if _base_url is None:
        from gptscope.server.app import create_app
        from gptscope.server.config import Settings

        # the kernel's own server answers loopback only, so it needs no token (GPTSCOPE_TOKEN or
        # GPTSCOPE_HOST set for `gptscope serve` would leave the notebook's frames and exports at a 401)
        _server = BackgroundServer(create_app(Settings(host="127.0.0.1", token=None))).start()
        _base_url = _server.url
    return _base_url


def api(method: str, path: str, payload: dict | None = None, **query):
    """Call /api/v1/PATH and return its JSON as Python objects; a 4xx/5xx raises ApiError."""
    url = f"{base_url()}/api/v1/{path.lstrip('/')}"
    if query:
        url += "?" + urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        url, data=data, method=method.upper(), headers={"Content-Type": "application/json"} if data is not None else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            detail = json.loads(raw)["detail"]
        except (ValueError, KeyError, TypeError):
            detail = raw.decode("utf-8", "replace")
        raise ApiError(e.code, detail) from None
    return json.loads(body) if body else None


def trace(text: str, include: list[str] | None = None, **fields) -> dict:
    """POST /api/v1/forward: the trace of a prompt (`include` picks the stages; layer, head,
    position, target, top_k, truncate as in the API)."""
    payload = {"text": text, **fields}
    if include is not None:
        payload["include"] = include
    return api("POST", "/forward", payload)


def tokenize(text: str, encoding: str = "gpt2", **fields) -> dict:
    """POST /api/v1/tokenize."""
    return api("POST", "/tokenize", {"text": text, "encoding": encoding, **fields})


def next_token(text: str, **fields) -> dict:
    """POST /api/v1/next-token (temperature, top_k, top_p, show)."""
    return api("POST", "/next-token", {"text": text, **fields})


def patch(clean: str, corrupted: str, wait: float = 600.0, **fields) -> dict:
    """Activation patching (POST /api/v1/patch): metric, answer, wrong, direction, kinds, heads,
    cell and top_k as in the API. A sweep too big to answer at once runs as a job
    (POST /api/v1/patch/jobs), followed until it ends (at most `wait` seconds); the answer is the same."""
    import time

    payload = {"clean": clean, "corrupted": corrupted, **fields}
    try:
        return api("POST", "/patch", payload)
    except ApiError as e:
        if e.status != 422 or "/api/v1/patch/jobs" not in str(e.detail):
            raise
    job = api("POST", "/patch/jobs", payload)
    deadline = time.monotonic() + wait
    while job["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
        job = api("GET", f"/patch/jobs/{job['id']}")
    if job["status"] != "done":
        raise ApiError(500 if job["status"] == "failed" else 504, job.get("error") or f"the sweep {job['status']}")
    return job["result"]


def health() -> dict:
    """GET /api/v1/health: the loaded model's name, shape and provenance."""
    return api("GET", "/health")


def _state(value) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def panels(page: str) -> list[str]:
    """The panel names of a page, read from the page itself."""
    if page not in PAGES:
        raise ValueError(f"unknown page {page!r}; choose one of {', '.join(PAGES)}")
    with urllib.request.urlopen(base_url() + PAGES[page], timeout=120) as resp:
        html = resp.read().decode("utf-8")
    return re.findall(r'<section[^>]*\bid="([a-z0-9-]+)-panel"', html)


# panels shown by their own name: show("overview", text=...) is show("forward", stage="overview", text=...)
BY_PANEL = {"overview": ("forward", "overview")}


def _page_and_panel(page: str, stage: str | None) -> tuple[str, str | None]:
    return BY_PANEL[page] if page in BY_PANEL and stage is None else (page, stage)


def url(page: str, stage: str | None = None, **state) -> str:
    """The page's URL with `state` as its query; with `stage`, in embed mode showing that panel
    ("overview" alone: the forward page's first screen, the model at a glance)."""
    page, stage = _page_and_panel(page, stage)
    if page not in PAGES:
        raise ValueError(f"unknown page {page!r}; choose one of {', '.join(PAGES)}")
    query = {k: _state(v) for k, v in state.items() if v is not None}
    if stage is not None:
        known = panels(page)
        if stage not in known:
            raise ValueError(f"page {page!r} has no panel {stage!r}; its panels: {', '.join(known)}")
        query["embed"] = stage
    return base_url() + PAGES[page] + ("?" + urlencode(query) if query else "")


def _colab() -> bool:
    return "google.colab" in sys.modules


def embed_mode(embed: str = "auto") -> str:
    """ "live" (an IFrame of the app) or "static" (the panel's self-contained file): `embed` as
    asked, or for "auto" GPTSCOPE_EMBED, else static where the browser cannot reach the kernel's
    loopback address (Colab, JupyterHub, Binder, Kaggle, SSH, VS Code's remote kernels)."""
    if embed not in EMBEDS:
        raise ValueError(f"embed must be one of {', '.join(EMBEDS)}, not {embed!r}")
    if embed == "auto":
        embed = os.environ.get("GPTSCOPE_EMBED") or "auto"
        if embed not in EMBEDS:
            raise ValueError(f"GPTSCOPE_EMBED must be one of {', '.join(EMBEDS)}, not {embed!r}")
    if embed == "auto":
        embed = "static" if _colab() or any(os.environ.get(k) for k in REMOTE_ENV) else "live"
    return embed


def static_html(src: str, stage: str, height: int = 620) -> str:
    """The cell output of a static panel: a frame holding the panel's exported file (made from the
    page at `src`). Plotly travels with the notebook's first one only (in Colab, where every
    output is a frame of its own, with each)."""
    from .export import export_panel, without_plotly

    global _plotly_shown
    doc = export_panel(src, stage)
    if _plotly_shown and not _colab():
        doc = without_plotly(doc)
    _plotly_shown = True
    return (
        f'<iframe class="gptscope-static" title="gptscope: {html.escape(stage)}" data-src="{html.escape(src)}" '
        f'style="width: 100%; height: {int(height)}px; border: 0" srcdoc="{html.escape(doc)}"></iframe>'
    )


def show(
    page: str,
    stage: str | None = None,
    *,
    embed: str = "auto",
    width: str | int = "100%",
    height: int = 620,
    **state,
):
    """Display one panel of a page in the notebook, and return its URL.

    show("overview", text=...) (the whole model at a glance, the forward page's first screen);
    show("forward", text=..., stage="attention", layer=1, head=2); show("tokenizer", text=...,
    encoding="gpt2", stage="merges"); show("learn", stage="gelu"); show("train", run=ID,
    stage="progress"); show("compare", a="builtin", b=RUN_ID, text=..., stage="chars").
    Without `stage` the whole page is shown (live only). `embed`: "live" is an IFrame of the app
    (the browser must reach the kernel's 127.0.0.1); "static" the panel's self-contained HTML, which
    a saved notebook keeps; "auto" picks (see embed_mode).
    """
    from IPython.display import HTML, IFrame, display

    page, stage = _page_and_panel(page, stage)
    mode = embed_mode(embed)
    if mode == "static" and stage is None:
        if embed == "static":
            raise ValueError("a static panel needs stage=PANEL (a whole page is shown live only)")
        mode = "live"
    src = url(page, stage, **state)
    display(HTML(static_html(src, stage, height)) if mode == "static" else IFrame(src, width=width, height=height))
    return src
