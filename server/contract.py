"""The JSON API as a contract: /openapi.json lists every answer an operation can give, and a 405's
`Allow` header names every method of the path.

Both are worked out from the routes when the app is built, so an endpoint added later is covered
without declaring anything:

- every /api/ operation documents 400 (a Host that is not allowed, a body that is not JSON),
  422 (a field that fails the schema or a limit that depends on another field or on the loaded
  model) and 503 (busy: more than `max_concurrent` requests at once, with Retry-After);
- a POST, PUT, PATCH or DELETE also documents 413 (a body over the size limit) and 415 (a body
  that is not JSON; multipart for the uploads);
- an operation with a path parameter also documents 404 (no such run, checkpoint, token, ...).

All of them have the one error shape, `ErrorResponse`: `{"detail": ...}`. What an endpoint answers
beyond these (409, or a 404 without a path parameter) it declares itself with `responses=`.
"""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException

from .schemas.common import ErrorResponse
from .wire import MSGPACK

METHODS = ("get", "put", "post", "delete", "patch")
REF = {"$ref": "#/components/schemas/ErrorResponse"}
GUARD = {
    "400": "the Host header is not allowed (DNS-rebinding guard), or the body is not valid JSON",
    "413": "the request body is over its size limit (2 MiB of JSON; 50 MiB for a corpus upload)",
    "415": "the body's Content-Type is not application/json (multipart/form-data for POST /api/v1/corpora)",
    "422": "a field fails the schema, or a limit that depends on another field or on the loaded model "
    "(each field's description says which); `detail` is a list of {loc, msg, type} naming the field and the limit",
    "503": "busy: too many requests at once; retry after the Retry-After header's seconds",
    "404": "no such resource (run, checkpoint, snapshot, token, ...)",
}


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": REF}}}


def errors_for(path: str, method: str, operation: dict) -> list[str]:
    """The statuses every operation of this kind can answer, whatever its router declared."""
    codes = ["400", "503"]
    if method in ("post", "put", "patch", "delete") or "requestBody" in operation:  # the guard reads any such body
        codes += ["413", "415"]
    if operation.get("parameters") or "requestBody" in operation:
        codes.append("422")
    if "{" in path:
        codes.append("404")
    return codes


def document_errors(schema: dict) -> dict:
    """Add the error answers to every /api/ operation of an OpenAPI document (in place)."""
    schema.setdefault("components", {}).setdefault("schemas", {}).setdefault(
        "ErrorResponse", ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    )
    for path, item in schema.get("paths", {}).items():
        if not path.startswith("/api/"):
            continue
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for code in errors_for(path, method, operation):
                responses.setdefault(code, _error(GUARD[code]))
            content = responses.get("200", {}).get("content", {})
            if MSGPACK in content and "application/json" in content:  # the binary form: the same tree
                content[MSGPACK]["schema"] = content["application/json"]["schema"]
    return schema


def allowed_methods(schema: dict, path: str) -> list[str]:
    """Every method the OpenAPI document lists for this request path (with HEAD where GET is)."""
    methods: set[str] = set()
    for template, item in schema.get("paths", {}).items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {m.upper() for m in item if m in METHODS}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def routes_key(app: FastAPI) -> tuple:
    """What an app's OpenAPI document is made from: its title and version, and the routes it documents. An
    included router is named by the router itself: every app of a process includes the API modules' own
    routers, so apps built alike give the same key; a route added anywhere since changes FastAPI's count
    of the routes, and the key with it."""
    parts: list[tuple] = []
    for r in app.routes:
        inner = getattr(r, "original_router", None)  # a router included whole
        if inner is not None:
            context = getattr(r, "include_context", None)
            parts.append(("router", id(inner), getattr(context, "prefix", None)))
        elif getattr(r, "include_in_schema", False):
            parts.append(("route", getattr(r, "path", None), id(getattr(r, "endpoint", None))))
    meta = (app.title, app.version, app.summary, app.description, app.openapi_version)
    count = getattr(app.router, "_get_routes_version", None)  # FastAPI 0.16x's count of route changes
    return (meta, count() if count else None, tuple(parts))


# The document of the last routes asked for, shared by every app of the process built alike (the tests'
# many apps, each test module's served app): made, it takes 1-3 s of CPU, and one process made it some
# twenty times in a test run. One slot: a process serves one kind of app.
_DOCUMENT: list[tuple[tuple, dict]] = []


def install(app: FastAPI) -> None:
    original = app.openapi

    def openapi() -> dict:
        key = routes_key(app)
        if _DOCUMENT and _DOCUMENT[0][0] == key:
            return _DOCUMENT[0][1]
        doc = document_errors(original())  # FastAPI rebuilds it when the routes change; adding is idempotent
        _DOCUMENT[:] = [(key, doc)]
        return doc

    app.openapi = openapi

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        if exc.status_code == 405:  # Starlette names only the first route's methods; a path may have several
            methods = allowed_methods(app.openapi(), request.url.path)
            if methods:
                exc.headers = {**(exc.headers or {}), "Allow": ", ".join(methods)}
        return await http_exception_handler(request, exc)
