"""API calls the browser tests make from a Playwright context (not through a page)."""

from __future__ import annotations

import re
import time

TERMINAL = ("done", "cancelled", "failed")


def api_json(ctx, url: str, method: str, path: str, **kw) -> dict:
    """A /api/v1 call that must succeed; its JSON."""
    resp = ctx.request.fetch(f"{url}/api/v1{path}", method=method, **kw)
    assert resp.status < 300, f"{method} {path}: {resp.status} {resp.text()}"
    return resp.json()


def finished_run(ctx, url: str, corpus: str, text: str, run: dict, timeout: float = 300) -> dict:
    """Upload `text` as corpus `corpus`, start `run` on it, wait until it ends; its final status (done)."""
    api_json(
        ctx,
        url,
        "POST",
        "/corpora",
        multipart={"file": {"name": "small.txt", "mimeType": "text/plain", "buffer": text.encode()}, "name": corpus},
    )
    run_id = api_json(ctx, url, "POST", "/training", data=run)["id"]
    deadline = time.monotonic() + timeout  # the CPU may be shared: generous
    while (body := api_json(ctx, url, "GET", f"/training/{run_id}"))["status"] not in TERMINAL:
        assert time.monotonic() < deadline, f"run {run_id} did not end: {body['status']} at step {body['step']}"
        time.sleep(0.3)
    assert body["status"] == "done", body
    return body


def decimal(x: float, digits: int = 3) -> str:
    """static/js/lib/format.js's decimal (JavaScript's toExponential writes e-4 where Python writes e-04)."""
    if x and not 1e-3 <= abs(x) < 1e5:
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.2e}")
    return f"{x:.{digits}f}"


def pct(p: float, digits: int = 1) -> str:
    """format.js's pct."""
    return f"{100 * p:.{digits}f}%"
