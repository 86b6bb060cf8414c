"""Hostile requests: foreign Host and Origin, wrong content types, huge bodies, overload.

Each row names the exact status the server must answer with; every refusal is JSON {"detail": ...}.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json

import pytest

from gptscope.server.security import GuardMiddleware, host_name

PROMPT = {"text": "ROMEO:"}


@pytest.mark.parametrize(
    "method, path, kwargs, status",
    [
        # Host header (DNS rebinding)
        ("GET", "/api/v1/health", {"headers": {"Host": "evil.example"}}, 400),
        ("GET", "/", {"headers": {"Host": "localhost.evil.example"}}, 400),
        ("POST", "/api/v1/forward", {"json": PROMPT, "headers": {"Host": "evil.example:8000"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "127.0.0.1:8000"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "localhost"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "[::1]:8000"}}, 200),
        # Origin on state-changing requests
        ("POST", "/api/v1/forward", {"json": PROMPT, "headers": {"Origin": "https://evil.example"}}, 403),
        ("POST", "/api/v1/training", {"json": {"max_steps": 1}, "headers": {"Origin": "http://127.0.0.1:9999"}}, 403),
        ("DELETE", "/api/v1/training/0123456789ab", {"headers": {"Origin": "null"}}, 403),
        (
            "POST",
            "/api/v1/model",
            {"json": {"checkpoint": "builtin"}, "headers": {"Sec-Fetch-Site": "cross-site"}},
            403,
        ),
        ("POST", "/api/v1/forward", {"json": PROMPT, "headers": {"Origin": "http://testserver"}}, 200),
        # bodies that are not JSON where JSON is expected
        ("POST", "/api/v1/forward", {"content": b"text=ROMEO", "headers": {"Content-Type": "text/plain"}}, 415),
        (
            "POST",
            "/api/v1/training",
            {"content": b"max_steps=1", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
            415,
        ),
        ("POST", "/api/v1/forward", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 422),
        ("POST", "/api/v1/corpora", {"json": {"name": "x"}}, 415),
        # sizes
        ("POST", "/api/v1/tokenize", {"json": {"text": "a" * (3 * 1024 * 1024)}}, 413),
        ("POST", "/api/v1/tokenize", {"json": {"text": "a" * 100_001}}, 422),
        # empty, invalid Unicode, out-of-range values
        ("POST", "/api/v1/forward", {"json": {"text": ""}}, 422),
        (
            "POST",
            "/api/v1/forward",
            {"content": b'{"text": "\\udc00"}', "headers": {"Content-Type": "application/json"}},
            422,
        ),
        ("POST", "/api/v1/forward", {"json": {"text": "hi", "layer": 10**9}}, 422),
        ("POST", "/api/v1/generate/step", {"json": {"ids": [-1]}}, 422),
        (
            "POST",
            "/api/v1/next-token",
            {"content": b'{"text": "hi", "temperature": NaN}', "headers": {"Content-Type": "application/json"}},
            422,
        ),
        ("POST", "/api/v1/next-token", {"json": {"text": "hi", "temperature": -1}}, 422),
        ("POST", "/api/v1/next-token", {"json": {"text": "hi", "top_k": 0}}, 422),
        ("POST", "/api/v1/next-token", {"json": {"text": "hi", "top_p": 2}}, 422),
        ("GET", "/api/v1/embeddings/neighbours?id=999999999", {}, 422),
        # path-like names are never paths
        ("POST", "/api/v1/model", {"json": {"checkpoint": "../builtin"}}, 422),
        ("POST", "/api/v1/model", {"json": {"checkpoint": "/etc/passwd"}}, 422),
        ("POST", "/api/v1/model", {"json": {"checkpoint": "..\\x"}}, 422),
        ("POST", "/api/v1/training", {"json": {"corpus": "../../etc/passwd", "max_steps": 1}}, 422),
        ("GET", "/api/v1/training/..%2F..%2Fetc/replay?step=0", {}, 404),
        ("GET", "/static/../server/config.py", {}, 404),
    ],
)
def test_hostile_requests(client, method, path, kwargs, status):
    r = client.request(method, path, **kwargs)
    assert r.status_code == status, r.text[:300]
    if status >= 400:
        assert "detail" in r.json()


def test_no_permissive_cors(client):
    r = client.options(
        "/api/v1/forward", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in {k.lower() for k in r.headers}
    r = client.get("/api/v1/health", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in {k.lower() for k in r.headers}


def test_host_name_parsing():
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("LOCALHOST") == "localhost"
    assert host_name("::1") == "::1"


def test_overload_answers_503_instead_of_queueing():
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_app(scope, receive, send):
        started.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard = GuardMiddleware(
        slow_app, allowed_hosts=["testserver"], json_limit=1000, upload_limit=1000, max_concurrent=1
    )

    async def call():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(msg):
            sent.append(msg)

        scope = {"type": "http", "method": "GET", "path": "/api/v1/health", "headers": [(b"host", b"testserver")]}
        await guard(scope, receive, send)
        return sent

    async def main():
        first = asyncio.create_task(call())
        await started.wait()
        second = await call()
        release.set()
        return await first, second

    # in a thread of its own: Playwright's sync API may own this thread's event loop in a full run
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first, second = pool.submit(asyncio.run, main()).result()
    assert first[0]["status"] == 200
    assert second[0]["status"] == 503
    assert (b"retry-after", b"1") in second[0]["headers"]
    assert "busy" in json.loads(second[1]["body"])["detail"]


def test_exposed_server_settings():
    from gptscope.server.config import Settings

    assert Settings().allowed_hosts() == ["127.0.0.1", "::1", "localhost"]
    assert Settings(host="0.0.0.0").allowed_hosts() is None
    assert "gptscope.lan" in Settings(host="0.0.0.0", allow_hosts=["gptscope.lan"]).allowed_hosts()
    assert "192.168.1.5" in Settings(host="192.168.1.5").allowed_hosts()


def test_a_server_error_is_json_without_a_stack_trace(service, tmp_path, caplog):
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    app = create_app(
        Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path, allow_hosts=["testserver"]), service=service
    )

    @app.get("/api/v1/boom")
    def boom():
        raise RuntimeError("secret internals at /home/user/model.py line 42")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/api/v1/boom")
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error; the server log has the details"}
    assert "secret" not in r.text and "Traceback" not in r.text
    assert "secret internals" in caplog.text  # the server logs it
