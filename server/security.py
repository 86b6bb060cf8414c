"""A local server that other sites cannot drive.

gptscope listens on 127.0.0.1 by default. A web page on another site can still make the user's
browser send requests to it, so every request passes these checks first (pure ASGI middleware, so
it also covers static files and the docs):

- Host: must be one of the allowed names (loopback by default). A DNS-rebinding page reaches the
  server under its own host name and gets 400.
- Origin: a POST / PUT / PATCH / DELETE that carries an Origin (browsers always send one on
  cross-site requests) must come from the page's own origin, else 403. So must Sec-Fetch-Site.
- Content-Type: a body sent to /api/ must be JSON (multipart only for the corpus and task uploads), else 415.
  This also stops "simple" cross-site form posts, which cannot send application/json.
- Size: a body larger than the limit gets 413 before the app sees any of it.
- Load: at most `max_concurrent` API requests are worked on at once; past that the answer is an
  immediate 503 with Retry-After, rather than a queue that grows without bound.

Every refusal is JSON: {"detail": "..."}.
"""

from __future__ import annotations

import json
import threading
from urllib.parse import urlsplit

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
UPLOAD_PATHS = ("/api/v1/corpora", "/api/v1/finetune/tasks")


def host_name(value: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1'; '[::1]:8000' -> '::1'."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class GuardMiddleware:
    def __init__(
        self, app, allowed_hosts: list[str] | None, json_limit: int, upload_limit: int, max_concurrent: int
    ) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        self.json_limit, self.upload_limit = json_limit, upload_limit
        self.max_concurrent = max_concurrent
        self._active = 0
        self._lock = threading.Lock()

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

    def _who_refused(self, headers: dict[str, str], method: str) -> tuple[int, str] | None:
        """A request from a name or a site this server does not answer: (status, why), else None."""
        host = headers.get("host", "")
        if self.allowed is not None and host_name(host) not in self.allowed:
            return 400, (
                f"Host header {host!r} is not allowed; gptscope answers only to "
                f"{', '.join(sorted(self.allowed))} (see gptscope serve --allow-host)"
            )
        if method in UNSAFE:
            origin = headers.get("origin")
            if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
                return 403, f"cross-site request refused: Origin {origin!r} is not this server"
            if headers.get("sec-fetch-site") == "cross-site":
                return 403, "cross-site request refused (Sec-Fetch-Site: cross-site)"
        return None

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

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method, path = scope["method"], scope["path"]
        refused = self._who_refused(headers, method)
        if refused is not None:
            return await self._refuse(send, *refused)

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
