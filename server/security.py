"""A local server that other sites cannot drive, and a door for one that the network can reach.

gptscope listens on 127.0.0.1 by default. A web page on another site can still make the user's
browser send requests to it, so every request passes these checks first (pure ASGI middleware, so
it also covers static files and the docs):

- Host: must be a well-formed `name[:port]` (no userinfo, no odd forms), one of the allowed names
  (loopback by default), on the port the request came in on (a name given as `name:port` in
  --allow-host: that port). A DNS-rebinding page reaches the server under its own host name, or a
  page names another local port, and gets 400.
- Token: when the server has one (it must, bound to an address beyond loopback), every request
  carries it: `Authorization: Bearer <token>`, or the cookie that `?token=<token>` on any URL sets
  (HttpOnly, SameSite=Strict; a page's URL is then redirected to itself without the token). Else
  401, naming the header.
- Origin: a POST / PUT / PATCH / DELETE, and any request to /api/ (a GET can start work too: an
  export's headless Chromium, a live run), that carries an Origin (browsers send one on cross-site
  requests) must come from the page's own origin, else 403; so must Sec-Fetch-Site (cross-site and
  same-site, i.e. another port of the same host, are refused).
- Content-Type: a body sent to /api/ must be JSON (multipart only for the corpus and task uploads), else 415.
  This also stops "simple" cross-site form posts, which cannot send application/json.
- Size: a body larger than the limit gets 413 before the app sees any of it.
- Load: at most `max_concurrent` API requests are worked on at once; past that the answer is an
  immediate 503 with Retry-After, rather than a queue that grows without bound.

Every refusal is JSON: {"detail": "..."}. docs/security.md lists each threat and the test that
tries it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import threading
from urllib.parse import parse_qsl, urlencode, urlsplit

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
UPLOAD_PATHS = ("/api/v1/corpora", "/api/v1/finetune/tasks")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
TOKEN_PARAM = "token"
TOKEN_HEADER = "Authorization"
# a Host header: a DNS name or IPv4 address, or an IPv6 literal in brackets, and an optional port
_HOST = re.compile(
    r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*)"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: an address that only this machine reaches."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_host(value: str) -> tuple[str, int | None] | None:
    """'127.0.0.1:8000' -> ('127.0.0.1', 8000); '[::1]' -> ('::1', None); None when the value is not
    a plain host[:port] (userinfo, spaces, a path, an unbracketed IPv6 address, a port over 65535)."""
    m = _HOST.fullmatch(value.strip().lower())
    if m is None:
        return None
    port = m["port"]
    if port is not None and not 0 < int(port) < 65536:
        return None
    name = m["name"]
    if name.startswith("["):
        try:
            name = str(ipaddress.IPv6Address(name[1:-1]))
        except ValueError:
            return None
    return name, None if port is None else int(port)


def host_name(value: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1'; '[::1]:8000' -> '::1' (the value itself when it is no host)."""
    parsed = parse_host(value)
    return value.strip().lower() if parsed is None else parsed[0]


def served_port(scope) -> int | None:
    """The port the request came in on, from the socket (None over a Unix socket)."""
    server = scope.get("server")
    return server[1] if server else None


def own_origin(host: str, scope) -> str:
    """The server's own origin, for the requests it makes to itself (the export's headless Chromium):
    the address it was bound to (loopback when bound to every address) and the port the connection
    came in on, from the socket; never anything a request says."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    port = served_port(scope) or 80
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def cookie_value(header: str, name: str) -> str | None:
    """The value of cookie `name` in a Cookie header, whatever the other cookies hold: the browser
    sends every cookie of the host, another local app's too, and http.cookies.SimpleCookie stops at
    the first it cannot parse (a JSON or spaced value), which would lock the reader out."""
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key.strip() == name:
            value = value.strip()
            return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    return None


def _cookie_name(scope) -> str:
    """One cookie per port: cookies do not tell ports apart, and two servers on one machine have two
    tokens (as Jupyter names its cookie)."""
    return f"gptscope-token-{served_port(scope) or 0}"


class GuardMiddleware:
    def __init__(
        self,
        app,
        allowed_hosts: list[str] | None,
        json_limit: int,
        upload_limit: int,
        max_concurrent: int,
        token: str | None = None,
    ) -> None:
        self.app = app
        # (name, port): port None means the port the request came in on
        self.allowed = None if allowed_hosts is None else {self._entry(h) for h in allowed_hosts}
        self.json_limit, self.upload_limit = json_limit, upload_limit
        self.max_concurrent = max_concurrent
        self.token = token
        self._active = 0
        self._lock = threading.Lock()

    @staticmethod
    def _entry(allowed: str) -> tuple[str, int | None]:
        try:  # a bare IPv6 address (::1) as well as host[:port] forms
            return str(ipaddress.ip_address(allowed)), None
        except ValueError:
            parsed = parse_host(allowed)
        if parsed is None:
            raise ValueError(f"--allow-host {allowed!r} is not a host name, address or name:port")
        return parsed

    async def _refuse(self, send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _bad_host(self, host: str, scope) -> str | None:
        """Why the Host header is refused, or None."""
        parsed = parse_host(host)
        if parsed is None:
            return f"Host header {host!r} is not a plain host[:port]; gptscope refuses it"
        if self.allowed is None:
            return None
        name, port = parsed
        if port is None:
            port = DEFAULT_PORTS.get(scope.get("scheme", "http"), 80)
        served = served_port(scope)
        if served is None:  # no port to hold it to over a Unix socket
            served = port
        if (name, port) in self.allowed or (port == served and (name, None) in self.allowed):
            return None
        names = sorted({n for n, _ in self.allowed})
        return (
            f"Host header {host!r} is not allowed; gptscope answers only to "
            f"{', '.join(names)} on port {served} (see gptscope serve --allow-host)"
        )

    def _who_refused(self, headers: dict[str, str], method: str, path: str, scope) -> tuple[int, str] | None:
        """A request from a name or a site this server does not answer: (status, why), else None."""
        host = headers.get("host", "")
        bad = self._bad_host(host, scope)
        if bad is not None:
            return 400, bad
        if method in UNSAFE or path.startswith("/api/"):
            origin = headers.get("origin")
            if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
                return 403, f"cross-site request refused: Origin {origin!r} is not this server"
            site = headers.get("sec-fetch-site")
            if site in ("cross-site", "same-site"):
                return 403, f"cross-site request refused (Sec-Fetch-Site: {site})"
        return None

    def _token_given(self, headers: dict[str, str], scope) -> tuple[bool, bool, bool]:
        """(the request carries the right token, it has a ?token= parameter, that parameter is the right
        token). The parameter is looked at first: whatever else came with it, it leaves the URL."""
        assert self.token is not None
        right = self.token.encode()
        params = [v for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")) if k == TOKEN_PARAM]
        in_query = bool(params) and any(hmac.compare_digest(v.encode(), right) for v in params)
        if in_query:
            return True, True, True
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and hmac.compare_digest(auth[7:].strip().encode(), right):
            return True, bool(params), False
        kept = cookie_value(headers.get("cookie", ""), _cookie_name(scope))
        if kept is not None and hmac.compare_digest(kept.encode(), right):
            return True, bool(params), False
        return False, bool(params), False

    def _set_cookie(self, scope) -> tuple[bytes, bytes]:
        return b"set-cookie", f"{_cookie_name(scope)}={self.token}; Path=/; HttpOnly; SameSite=Strict".encode()

    async def _read_body(self, headers: dict[str, str], path: str, receive) -> bytes | tuple[int, str] | None:
        """The whole body within its limit and of the right type; (status, why) when it is not; None
        when the client went away."""
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        upload = path in UPLOAD_PATHS
        limit = self.upload_limit if upload else self.json_limit
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return 413, f"request body is {int(declared):,} bytes; the limit is {limit:,} bytes"
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return 413, f"request body is over the limit of {limit:,} bytes"
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if path.startswith("/api/") and body:
            wanted = "multipart/form-data" if upload else "application/json"
            if ctype != wanted:
                return 415, f"Content-Type must be {wanted}, not {ctype or 'missing'!r}"
        return body

    def _admit(self) -> bool:
        """Take one of the max_concurrent places for an API request, if one is free."""
        with self._lock:
            if self._active >= self.max_concurrent:
                return False
            self._active += 1
            return True

    async def _door(self, scope, headers: dict[str, str], send):
        """With a token: None when the request may go on (scope then without ?token, and a send that
        sets the cookie where the token came in the URL), or False once it has been answered."""
        ok, in_query, query_right = self._token_given(headers, scope)
        if not ok:
            await self._refuse(
                send,
                401,
                f"this server needs its token: send the header '{TOKEN_HEADER}: Bearer <token>', or open the "
                f"URL gptscope serve printed (?{TOKEN_PARAM}=<token> once, then a cookie keeps it)",
                [(b"www-authenticate", b'Bearer realm="gptscope"')],
            )
            return False
        if not in_query:
            return scope, send
        rest = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), True)]
        rest = [(k, v) for k, v in rest if k != TOKEN_PARAM]
        query = urlencode(rest)
        # the cookie only for the right token (a wrong ?token= beside a good cookie just leaves the URL)
        cookie = self._set_cookie(scope) if query_right else None
        if scope["method"] in ("GET", "HEAD") and not scope["path"].startswith("/api/"):
            # a page: to itself without the token (out of the address bar, history and Referer)
            location = (scope.get("root_path", "") + scope["path"]) + (f"?{query}" if query else "")
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", location.encode("latin-1")),
                        (b"content-length", b"0"),
                        *([cookie] if cookie else []),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return False

        async def send_with_cookie(message):
            if message["type"] == "http.response.start" and cookie:
                message = {**message, "headers": [*message.get("headers", []), cookie]}
            await send(message)

        return {**scope, "query_string": query.encode("latin-1")}, send_with_cookie

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method, path = scope["method"], scope["path"]
        refused = self._who_refused(headers, method, path, scope)
        if refused is not None:
            return await self._refuse(send, *refused)
        if self.token is not None:
            passed = await self._door(scope, headers, send)
            if passed is False:
                return None
            scope, send = passed

        inner_receive = receive
        if method in UNSAFE:
            body = await self._read_body(headers, path, receive)
            if body is None:
                return None
            if isinstance(body, tuple):
                return await self._refuse(send, *body)
            sent = False

            async def resend_body():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            inner_receive = resend_body

        if not path.startswith("/api/"):
            return await self.app(scope, inner_receive, send)
        if not self._admit():
            return await self._refuse(
                send,
                503,
                f"server busy: {self.max_concurrent} requests are being worked on; retry shortly",
                [(b"retry-after", b"1")],
            )
        try:
            await self.app(scope, inner_receive, send)
        finally:
            with self._lock:
                self._active -= 1
