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

`trace`, `api` and the other data functions return the same JSON the API gives, as Python objects.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlencode

from .background_server import BackgroundServer

# page -> its path on the server; each panel is the section `<name>-panel` of that page
PAGES = {
    "forward": "/",
    "tokenizer": "/tokenizer",
    "learn": "/learn",
    "train": "/train",
    "compare": "/compare",
    "features": "/features",
    "patch": "/patch",
}

_base_url: str | None = None
_server: BackgroundServer | None = None


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

        _server = BackgroundServer(create_app()).start()
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


def url(page: str, stage: str | None = None, **state) -> str:
    """The page's URL with `state` as its query; with `stage`, in embed mode showing that panel."""
    if page not in PAGES:
        raise ValueError(f"unknown page {page!r}; choose one of {', '.join(PAGES)}")
    query = {k: _state(v) for k, v in state.items() if v is not None}
    if stage is not None:
        known = panels(page)
        if stage not in known:
            raise ValueError(f"page {page!r} has no panel {stage!r}; its panels: {', '.join(known)}")
        query["embed"] = stage
    return base_url() + PAGES[page] + ("?" + urlencode(query) if query else "")


def show(page: str, stage: str | None = None, *, width: str | int = "100%", height: int = 620, **state):
    """Display one panel of a page in the notebook (an IFrame of the live page), and return its URL.

    show("forward", text=..., stage="attention", layer=1, head=2); show("tokenizer", text=...,
    encoding="gpt2", stage="merges"); show("learn", stage="gelu"); show("train", run=ID,
    stage="progress"); show("compare", a="builtin", b=RUN_ID, text=..., stage="chars").
    Without `stage` the whole page is shown.
    """
    from IPython.display import IFrame, display

    src = url(page, stage, **state)
    display(IFrame(src, width=width, height=height))
    return src
