"""Hostile requests: foreign Host and Origin, wrong content types, huge bodies, overload.

Each row names the exact status the server must answer with; every refusal is JSON {"detail": ...}.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re

import pytest

from gptscope.server.security import GuardMiddleware, host_name, is_loopback, parse_host

PROMPT = {"text": "ROMEO:"}


@pytest.mark.parametrize(
    "method, path, kwargs, status",
    [
        # Host header (DNS rebinding)
        ("GET", "/api/v1/health", {"headers": {"Host": "evil.example"}}, 400),
        ("GET", "/", {"headers": {"Host": "localhost.evil.example"}}, 400),
        ("POST", "/api/v1/forward", {"json": PROMPT, "headers": {"Host": "evil.example:8000"}}, 400),
        # the test client's server is on port 80: a loopback name on another port is another server
        ("GET", "/api/v1/health", {"headers": {"Host": "127.0.0.1:80"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "127.0.0.1"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "localhost"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "[::1]:80"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Host": "127.0.0.1:8000"}}, 400),
        ("GET", "/api/v1/export?page=learn&panel=gelu", {"headers": {"Host": "127.0.0.1:6379"}}, 400),
        ("GET", "/", {"headers": {"Host": "localhost:3000"}}, 400),
        # userinfo and other odd forms (older Starlette read localhost:80@evil.example as evil.example)
        ("GET", "/api/v1/export?page=learn&panel=gelu", {"headers": {"Host": "localhost:80@evil.example"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "user@localhost"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "localhost:"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "localhost:99999"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "localhost/evil"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "::1"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": ""}}, 400),
        # IP literals that are loopback to some parsers but not the names this server answers to
        ("GET", "/api/v1/health", {"headers": {"Host": "2130706433"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "0x7f.0.0.1"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "127.1"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "[::ffff:127.0.0.1]"}}, 400),
        ("GET", "/api/v1/health", {"headers": {"Host": "192.168.1.5"}}, 400),
        # cross-site GETs of the API (an export starts a headless Chromium); a page itself may be linked to
        ("GET", "/api/v1/export?page=learn&panel=gelu", {"headers": {"Sec-Fetch-Site": "cross-site"}}, 403),
        ("GET", "/api/v1/export?page=learn&panel=gelu", {"headers": {"Sec-Fetch-Site": "same-site"}}, 403),
        ("GET", "/api/v1/export?page=learn&panel=gelu", {"headers": {"Origin": "https://evil.example"}}, 403),
        ("GET", "/api/v1/curves/gelu", {"headers": {"Origin": "null"}}, 403),
        ("GET", "/api/v1/health", {"headers": {"Sec-Fetch-Site": "same-origin"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Sec-Fetch-Site": "none"}}, 200),
        ("GET", "/api/v1/health", {"headers": {"Origin": "http://testserver"}}, 200),
        ("GET", "/", {"headers": {"Sec-Fetch-Site": "cross-site"}}, 200),
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
    assert parse_host("[0:0::1]:8000") == ("::1", 8000)
    assert parse_host("gptscope.lan") == ("gptscope.lan", None)
    for odd in ("::1", "a@b", "localhost:80@evil.example", "host:0", "host:65536", "-x", "a b", "[zz::1]", "x:8:9"):
        assert parse_host(odd) is None, odd
    assert [is_loopback(h) for h in ("127.0.0.1", "127.2.3.4", "::1", "[::1]", "localhost")] == [True] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "gptscope.lan")] == [False] * 4


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


# ---- the export opens only the server's own address, one render at a time ------------------------

TOKEN = "test-door-token-0123456789"


@pytest.fixture(scope="module")
def exposed(service, tmp_path_factory):
    """The app as `gptscope serve --host 0.0.0.0 --token ...` builds it (every Host accepted, the
    token required), in process."""
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    settings = Settings(
        host="0.0.0.0", token=TOKEN, checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path_factory.mktemp("exposed")
    )
    with TestClient(create_app(settings, service=service)) as c:
        yield c


class Renders:
    """export_panel stood in for: records the URLs and headers Chromium would get, and can hold a
    render until released."""

    def __init__(self) -> None:
        import threading

        self.calls: list[tuple[str, dict | None]] = []
        self.started, self.release = threading.Event(), threading.Event()
        self.release.set()

    def __call__(self, url, panel, *, headers=None, **_):
        self.calls.append((url, headers))
        self.started.set()
        assert self.release.wait(30)
        return "<!doctype html><p>panel</p>"


@pytest.fixture
def renders(monkeypatch):
    from gptscope.server.routers import export

    fake = Renders()
    monkeypatch.setattr(export, "export_panel", fake)
    return fake


def test_the_export_opens_the_servers_own_address_whatever_the_host_header_says(exposed, renders):
    """Bound to 0.0.0.0 every Host is accepted (the token guards the door), yet Chromium is sent to
    loopback on the server's own port with the token as a header, never to the Host's address."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for host in ("127.0.0.1:6379", "evil.example", "10.0.0.1:22"):
        r = exposed.get("/api/v1/export?page=learn&panel=gelu&x_max=3", headers={**auth, "Host": host})
        assert r.status_code == 200, r.text
    for url, headers in renders.calls:
        assert url == "http://127.0.0.1:80/learn?x_max=3&embed=gelu"
        assert headers == auth


def test_a_burst_of_exports_gets_503_with_retry_after_not_a_queue(client, renders):
    """One render at a time: while one is being made, every other export is answered at once."""
    import concurrent.futures

    renders.release.clear()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.get, "/api/v1/export", params={"page": "learn", "panel": "gelu"})
        assert renders.started.wait(30)
        burst = [client.get("/api/v1/export", params={"page": "learn", "panel": "gelu"}) for _ in range(5)]
        renders.release.set()
        assert first.result().status_code == 200
    assert [r.status_code for r in burst] == [503] * 5
    assert all(r.headers["retry-after"] == "5" and "one is made at a time" in r.json()["detail"] for r in burst)
    assert len(renders.calls) == 1
    assert renders.calls[0] == ("http://127.0.0.1:80/learn?embed=gelu", None)  # no token on loopback
    assert client.get("/api/v1/export", params={"page": "learn", "panel": "gelu"}).status_code == 200


# ---- the door beyond loopback: a token ------------------------------------------------------------

EVERY_KIND = [
    ("GET", "/"),  # a page
    ("GET", "/patch"),
    ("GET", "/static/css/compare.css"),  # a static file
    ("GET", "/vendor/plotly.min.js"),
    ("GET", "/docs"),  # the API's docs and schema
    ("GET", "/openapi.json"),
    ("GET", "/api/v1/health"),  # the API
    ("GET", "/api/v1/export?page=learn&panel=gelu"),
    ("POST", "/api/v1/forward"),
    ("POST", "/api/v1/training"),
    ("DELETE", "/api/v1/training/0123456789ab"),
]


@pytest.mark.parametrize("method, path", EVERY_KIND)
@pytest.mark.parametrize(
    "how",
    [
        {},
        {"headers": {"Authorization": "Bearer wrong-token-000000000"}},
        {"headers": {"Authorization": f"Basic {TOKEN}"}},
        {"headers": {"Cookie": "gptscope-token-80=wrong-token-000000000"}},
        {"headers": {"Cookie": f"gptscope-token-8000={TOKEN}"}},  # another port's server's cookie
        {"params": {"token": "wrong-token-000000000"}},
    ],
    ids=["none", "wrong-bearer", "not-bearer", "wrong-cookie", "other-port-cookie", "wrong-query"],
)
def test_exposed_no_page_file_or_endpoint_answers_without_the_token(exposed, renders, method, path, how):
    kwargs = {"json": {"text": "hi"}} if method == "POST" else {}
    r = exposed.request(method, path, **kwargs, **how)
    assert r.status_code == 401, r.text[:200]
    assert "Authorization: Bearer" in r.json()["detail"]
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "set-cookie" not in r.headers
    assert not renders.calls


def test_the_token_as_a_bearer_header_opens_every_door(exposed):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for method, path in EVERY_KIND[:7]:
        assert exposed.request(method, path, headers=auth).status_code == 200, path
    r = exposed.post("/api/v1/forward", json={"text": "ROMEO:"}, headers=auth)
    assert r.status_code == 200 and "set-cookie" not in r.headers


def test_the_token_in_a_url_becomes_a_strict_httponly_cookie_and_leaves_the_url(service, tmp_path, renders):
    """As Jupyter: ?token= once, then a cookie (HttpOnly, SameSite=Strict, one per port); a page's URL
    is redirected to itself without the token, its other query fields kept."""
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    app = create_app(Settings(host="0.0.0.0", token=TOKEN, data_dir=tmp_path), service=service)
    with TestClient(app, follow_redirects=False) as c:
        r = c.get("/", params={"text": "ROMEO:", "token": TOKEN, "stage": "attention"})
        assert r.status_code == 303
        assert r.headers["location"] == "/?text=ROMEO%3A&stage=attention"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"gptscope-token-80={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        # the client keeps the cookie: pages, files and the API answer from now on
        for path in ("/?text=ROMEO%3A", "/static/css/compare.css", "/api/v1/health", "/docs"):
            assert c.get(path).status_code == 200, path
    with TestClient(app) as c:  # an API call with ?token: answered, the cookie set, the app never sees it
        r = c.get("/api/v1/export", params={"page": "learn", "panel": "gelu", "token": TOKEN, "x_max": 3})
        assert r.status_code == 200
        assert r.headers["set-cookie"].startswith(f"gptscope-token-80={TOKEN};")
        assert renders.calls == [("http://127.0.0.1:80/learn?x_max=3&embed=gelu", {"Authorization": f"Bearer {TOKEN}"})]
        assert c.get("/api/v1/health").status_code == 200


def test_the_token_cookie_is_found_whatever_other_cookies_the_browser_sends(exposed):
    """Another local app's cookies come along (the browser sends every cookie of the host): a JSON value,
    a value with spaces or a comma stopped http.cookies.SimpleCookie before it reached the token's."""
    from gptscope.server.security import cookie_value

    for others in ('prefs={"theme":"dark"}', "note=a b c", "list=1,2,3", "x", '"odd"=1', "a=\\"):
        for header in (f"{others}; gptscope-token-80={TOKEN}", f'gptscope-token-80="{TOKEN}"; {others}'):
            assert cookie_value(header, "gptscope-token-80") == TOKEN, header
            r = exposed.get("/api/v1/health", headers={"Cookie": header})
            assert r.status_code == 200, (header, r.text[:200])
        r = exposed.get("/api/v1/health", headers={"Cookie": f"{others}; gptscope-token-8000={TOKEN}"})
        assert r.status_code == 401  # another port's cookie still opens nothing
    assert cookie_value("gptscope-token-80x=1; gptscope-token-8=2", "gptscope-token-80") is None


def test_a_token_in_the_url_always_leaves_it_even_with_the_cookie_set(service, tmp_path, renders):
    """?token= is answered with the redirect that takes it out of the address bar even when the cookie
    already lets the request in (it was checked first, and the URL kept the token); a wrong ?token=
    beside a good cookie leaves the URL too, without setting a cookie."""
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    app = create_app(Settings(host="0.0.0.0", token=TOKEN, data_dir=tmp_path), service=service)
    with TestClient(app, follow_redirects=False) as c:
        c.cookies.set("gptscope-token-80", TOKEN)
        for token, cookie_set in ((TOKEN, True), ("wrong-token-000000000", False)):
            r = c.get("/", params={"text": "ROMEO:", "token": token})
            assert r.status_code == 303, r.text[:200]
            assert r.headers["location"] == "/?text=ROMEO%3A"
            assert ("set-cookie" in r.headers) == cookie_set
        r = c.get("/api/v1/health", params={"token": "wrong-token-000000000"})  # the API: taken off, answered
        assert r.status_code == 200 and "set-cookie" not in r.headers
    with TestClient(app, follow_redirects=False) as c:  # no cookie: a wrong ?token= opens nothing
        assert c.get("/", params={"token": "wrong-token-000000000"}).status_code == 401


def test_loopback_needs_no_token_and_an_exposed_server_must_have_one(service, tmp_path, client):
    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    assert client.get("/api/v1/health").status_code == 200  # the tests' loopback app: no token
    for host in ("0.0.0.0", "::", "192.168.1.5", "gptscope.lan"):
        with pytest.raises(ValueError, match="needs a token"):
            create_app(Settings(host=host, data_dir=tmp_path), service=service)
    with pytest.raises(ValueError, match="at least 8"):
        create_app(Settings(host="0.0.0.0", token="short", data_dir=tmp_path), service=service)
    # going without, said loudly: then every Host is answered, as before
    from fastapi.testclient import TestClient

    app = create_app(Settings(host="0.0.0.0", insecure_no_token=True, data_dir=tmp_path), service=service)
    with TestClient(app) as c:
        assert c.get("/api/v1/health", headers={"Host": "mybox.lan:8000"}).status_code == 200


def test_gptscope_serve_beyond_loopback_makes_prints_and_requires_a_token(capsys, tmp_path, monkeypatch):
    from unittest import mock

    from fastapi.testclient import TestClient

    from gptscope.server import cli

    monkeypatch.delenv("GPTSCOPE_TOKEN", raising=False)
    monkeypatch.setenv("GPTSCOPE_DATA_DIR", str(tmp_path))
    with mock.patch("uvicorn.run") as run, mock.patch("gc.freeze"):
        assert cli.main(["serve", "--host", "0.0.0.0", "--port", "8123"]) == 0
    err = capsys.readouterr().err
    urls = re.findall(r"open (http://\S+)", err)
    assert len(urls) == 2 and urls[1].startswith("http://127.0.0.1:8123/?token=")
    token = urls[1].split("token=")[1]
    assert len(token) >= 24 and urls[0].endswith(f":8123/?token={token}")
    app = run.call_args.args[0]
    with TestClient(app) as c:
        assert c.get("/api/v1/health").status_code == 401
        assert c.get("/api/v1/health", headers={"Authorization": f"Bearer {token}"}).status_code == 200

    with mock.patch("uvicorn.run") as run, mock.patch("gc.freeze"):
        assert cli.main(["serve", "--host", "0.0.0.0", "--token", "my-own-token-1234"]) == 0
        assert cli.main(["serve", "--host", "0.0.0.0", "--insecure-no-token"]) == 0
        assert cli.main(["serve", "--host", "0.0.0.0", "--token", "short"]) == 2
        assert cli.main(["serve"]) == 0  # loopback: no token, a plain URL
    err = capsys.readouterr().err
    assert "?token=my-own-token-1234" in err and "WITHOUT A TOKEN" in err and "at least 8" in err
    assert "open http://127.0.0.1:8000\n" in err
