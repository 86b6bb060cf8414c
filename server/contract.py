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


def install(app: FastAPI) -> None:
    original = app.openapi

    def openapi() -> dict:
        return document_errors(original())  # FastAPI rebuilds it when the routes change; adding is idempotent

    app.openapi = openapi

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        if exc.status_code == 405:  # Starlette names only the first route's methods; a path may have several
            methods = allowed_methods(app.openapi(), request.url.path)
            if methods:
                exc.headers = {**(exc.headers or {}), "Allow": ", ".join(methods)}
        return await http_exception_handler(request, exc)
