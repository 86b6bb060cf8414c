"""One JSON error shape for every failure: {"detail": ...}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gptscope.model.tokenizers import TokenizerFailed

log = logging.getLogger("gptscope")


class InputError(ValueError):
    """Bad input that passed the schema but not the model's limits; becomes a 422 naming the field."""

    def __init__(self, field: str, message: str, status: int = 422, where: str = "body") -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status, self.where = field, message, status, where


class NotFound(LookupError):
    """A named run, checkpoint or snapshot that does not exist; becomes a 404."""


class Busy(Exception):
    """The work's memory is held by other work going now (server/memory.py); becomes a 503 with
    Retry-After naming what holds it."""


class Conflict(Exception):
    """The request clashes with the app's state (a run is already going); becomes a 409 whose JSON
    carries `extra` beside the detail."""

    def __init__(self, message: str, **extra) -> None:
        super().__init__(message)
        self.extra = extra


def _safe(value):
    """JSON-safe copy: strings with lone surrogates are repaired, so an error can always be sent."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes each bad `input` back; a 100,000-character text (or one with a
        # lone surrogate, which cannot be encoded) does not belong in an error, so it is left out.
        errs = [{k: v for k, v in e.items() if k not in ("input", "url")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": _safe(jsonable_encoder(errs))})

    @app.exception_handler(InputError)
    async def _input_error(_request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(
            status_code=exc.status,
            content={
                "detail": [{"loc": [exc.where, *exc.field.split(".")], "msg": exc.message, "type": "value_error"}]
            },
        )

    @app.exception_handler(TokenizerFailed)
    async def _tokenizer_failed(_request: Request, exc: TokenizerFailed) -> JSONResponse:
        # a model's own tokenizer.json at fault on this text (a Rust panic in `tokenizers`): the text's
        # field, and the message names the tokenizer
        return JSONResponse(
            status_code=422,
            content={"detail": [{"loc": ["body", "text"], "msg": _safe(str(exc)), "type": "value_error"}]},
        )

    @app.exception_handler(Busy)
    async def _busy(_request: Request, exc: Busy) -> JSONResponse:
        # the memory budget is held by other work (server/memory.py): a transient refusal, retried later
        return JSONResponse(status_code=503, content={"detail": _safe(str(exc))}, headers={"Retry-After": "10"})

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": _safe(str(exc.args[0]))})

    @app.exception_handler(Conflict)
    async def _conflict(_request: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc), **exc.extra})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(status_code=500, content={"detail": "internal error; the server log has the details"})
