"""`gptscope serve --host 0.0.0.0`, as a user starts it to reach the app from another machine: the
URL it prints (with its token) opens the app in a real browser, which then works on the cookie the
token left; without the token no page, file or endpoint answers, and the export still works for
the token's holder. Only loopback is ever sent a request (the server is bound to every address)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

START_S = 90


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def exposed_server(tmp_path_factory):
    """(the printed loopback URL with its token, the base URL): the real `gptscope serve` in its own
    process, its data in a temporary folder."""
    port = _free_port()
    env = {**os.environ, "GPTSCOPE_DATA_DIR": str(tmp_path_factory.mktemp("door-data")), "PYTHONUNBUFFERED": "1"}
    env.pop("GPTSCOPE_TOKEN", None)
    log = Path(tmp_path_factory.mktemp("door-log")) / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gptscope", "serve", "--host", "0.0.0.0", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, printed = time.monotonic() + START_S, None
        while printed is None:
            assert proc.poll() is None, f"gptscope serve exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"no URL printed in {START_S} s: {log.read_text()}"
            found = re.search(rf"open ({re.escape(base)}/\?token=[\w-]+)", log.read_text())
            printed = found.group(1) if found else None
            time.sleep(0.1)
        token = printed.split("token=")[1]
        with httpx.Client(trust_env=False) as poll:  # one client: a bare httpx.get builds an SSL context each time
            while True:  # the URL is printed before uvicorn listens
                try:
                    if (
                        poll.get(f"{base}/api/v1/health", headers={"Authorization": f"Bearer {token}"}).status_code
                        == 200
                    ):
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield printed, base
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_printed_url_opens_the_app_and_nothing_answers_without_the_token(browser, exposed_server, screenshot):
    printed, base = exposed_server
    token = printed.split("token=")[1]

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(printed)
        page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
        assert page.url.startswith(f"{base}/") and "token" not in page.url, "the token leaves the address bar"
        (cookie,) = context.cookies()
        assert cookie["value"] == token and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        # the page's own fetches and a reload run on the cookie
        assert page.evaluate("fetch('/api/v1/health').then(r => r.status)") == 200
        assert page.evaluate("() => document.cookie") == ""  # HttpOnly: no script reads it
        page.goto(f"{base}/tokenizer")
        page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
        assert not errors, errors
        screenshot(page, "token-door-tokenizer", full_page=False)
    finally:
        context.close()

    stranger = browser.new_context()
    try:
        page = stranger.new_page()
        for path in ("/", "/static/css/gptscope.css", "/vendor/plotly.min.js", "/docs", "/api/v1/health"):
            r = page.goto(base + path)
            assert r.status == 401, path
            assert "Authorization: Bearer" in r.json()["detail"]
        assert page.goto(f"{base}/?token=not-the-token-at-all").status == 401
        assert stranger.cookies() == []
    finally:
        stranger.close()


def test_the_export_works_for_the_tokens_holder_only(exposed_server):
    """GET /api/v1/export on the exposed server: the server's Chromium opens its own loopback address
    with the token, and the file is made; without the token, 401 before any render."""
    printed, base = exposed_server
    token = printed.split("token=")[1]
    params = {"page": "learn", "panel": "gelu", "x_max": 3}
    assert httpx.get(f"{base}/api/v1/export", params=params, timeout=30).status_code == 401
    r = httpx.get(f"{base}/api/v1/export", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=300)
    assert r.status_code == 200, r.text[:300]
    assert r.text.startswith("<!doctype html>") and 'id="gptscope-plotly"' in r.text
    assert token not in r.text  # the file carries no secret of the server's
