"""What several areas share, and what a NEW ENDPOINT MUST USE so /openapi.json stays a true contract
(issue #17; tests/test_fuzz.py runs schemathesis with every check over every operation):

- a JSON request body subclasses `StrictRequest`, not BaseModel (no 0 taken as false, no "1" as 1;
  tests/test_fuzz.py checks every body model); nested models in it too;
- a fixed set of values is a `Literal[...]`, so the schema lists them (a str that the endpoint
  checks against a list is a schema-valid request it rejects);
- a limit that depends on another field or on the loaded model (a token id below vocab_size, a
  prompt within n_ctx, x_max above x_min) is said in that field's `description`, and the check
  raises `errors.InputError(field, message)` naming the field and the limit (a 422);
- error answers: 400, 413/415 (with a body), 422, 503, and 404 on a path with a parameter are added
  to every /api/ operation by server/contract.py; declare only others (409, a 404 on a path without
  a parameter) with `responses=`, each with `"model": ErrorResponse`;
- an answer is JSON: raise InputError / NotFound / Conflict (server/errors.py), never return a
  bare status.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from gptscope.model.settings import declared

# A background job's status, every kind alike (server/jobs.py): "queued" while the memory budget
# has no room for it yet (server/memory.py), "starting" before a training run's first step.
JobStatus = Literal["queued", "starting", "running", "done", "cancelled", "failed"]
MAX_PROMPT_CHARS = 20_000  # the longest prompt text any endpoint takes


def _is_int(annotation) -> bool:
    """int, or Annotated[int, ...] (an int with constraints)."""
    return annotation is int or (
        typing.get_origin(annotation) is typing.Annotated and typing.get_args(annotation)[0] is int
    )


def _integral(value, annotation):
    """JSON Schema's "integer" includes 3.0: an integral float becomes an int where an int (or a
    list of ints) is asked; everything else is left for strict validation to judge."""
    arms = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    if isinstance(value, float) and value.is_integer() and any(_is_int(a) for a in arms):
        return int(value)
    if isinstance(value, list) and any(typing.get_origin(a) is list and _is_int(typing.get_args(a)[0]) for a in arms):
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in value]
    return value


class StrictRequest(BaseModel):
    """A JSON request body, validated as its schema says: a boolean is true or false, a number is a
    JSON number (no "1", no 0 for false); an integer may be given where a float is asked, and an
    integral float (3.0) where an integer is."""

    model_config = ConfigDict(strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral_floats(cls, data):
        if isinstance(data, dict):
            fields = cls.model_fields
            return {k: _integral(v, fields[k].annotation) if k in fields else v for k, v in data.items()}
        return data


def request_from(
    config: type,
    name: str,
    extra: dict[str, Any],
    *,
    exclude: tuple[str, ...] = (),
    overrides: dict[str, dict[str, Any]] | None = None,
    module: str = __name__,
) -> type[StrictRequest]:
    """The JSON request of a trainable add-on, made from its config dataclass (model/settings.py): each
    setting of `config` but `exclude` becomes a field of the same name and type, with its default, its
    bounds and its help as description (floats refuse NaN and infinities), in the dataclass's order;
    then `extra`, the fields the API has beyond it ({name: (type, FieldInfo)}). `overrides` are the
    API's deliberate differences ({field: Field keywords}), each kept in the schema module that calls
    this. The model is named `name` (its OpenAPI component)."""
    overrides = overrides or {}
    hints = typing.get_type_hints(config)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        meta = declared(config).get(f.name)
        if meta is None or f.name in exclude:
            continue
        kw: dict[str, Any] = {b: meta[b] for b in ("ge", "gt", "le") if meta[b] is not None}
        if meta["help"]:
            kw["description"] = meta["help"]
        if hints[f.name] is float:
            kw["allow_inf_nan"] = False
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        kw.update(overrides.get(f.name, {}))
        fields[f.name] = (hints[f.name], Field(**kw))
    unknown = set(overrides) - set(fields)
    if unknown:
        raise TypeError(f"{name}: overrides name no field of {config.__name__}: {sorted(unknown)}")
    return create_model(name, __base__=StrictRequest, __module__=module, **fields, **extra)


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer: `detail` says what was wrong, naming the field and the limit."""

    detail: str | list = Field(description="a message, or FastAPI's list of {loc, msg, type} for invalid fields")


TokenId = typing.Annotated[int, Field(ge=0)]  # an id in a request; below vocab_size is checked against the model


class TokenPiece(BaseModel):
    """One token of a text: its id, the exact bytes, and the characters it covers."""

    index: int = Field(description="position of the token in the sequence (0-based)")
    id: int = Field(description="token id in the encoding's vocabulary")
    text: str = Field(
        description="the token's bytes decoded as UTF-8; U+FFFD stands in for bytes that are not valid UTF-8 on their own"
    )
    bytes_hex: str = Field(description="the token's exact bytes, hex")
    valid_utf8: bool = Field(description="false when the token's bytes are only part of a character")
    start: int = Field(description="first character (code point) of the text this token covers")
    end: int = Field(description="one past the last character it covers")
    special: bool = Field(False, description="a special token such as <|endoftext|>")


MAX_MESSAGES = 64  # the most chat messages a request takes


class ChatMessage(StrictRequest):
    """One message of a chat, as a chat template reads it."""

    role: str = Field(
        min_length=1,
        max_length=32,
        examples=["user"],
        description="system, user or assistant (as the template knows them)",
    )
    content: str = Field(max_length=MAX_PROMPT_CHARS, description="what the message says")


def messages_field():
    return Field(
        None,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="a chat to run instead of a text: rendered by the model's chat template (tokenizer_config.json's "
        "chat_template, in Jinja2's sandbox), its special tokens read as tokens; a 422 for a model without a template, "
        "or a template the sandbox refuses",
    )


GENERATION_PROMPT_FIELD = Field(
    True, description="messages: end with the start of the assistant's turn (the template's generation prompt)"
)
# a request that takes a prompt as text or as a chat: one of them must be there (the schema says so)
TEXT_OR_MESSAGES = {
    "anyOf": [
        {"required": ["text"], "properties": {"text": {"minLength": 1}}},
        {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
    ]
}


BOS_FIELD = Field(
    None,
    description="start the prompt with the model's beginning-of-text token: null (default) as its tokenizer "
    "runs under transformers 5 (tokenizer.json's post-processor: Llama 3, Phi-3, Mistral, TinyLlama, Gemma) or, for "
    "a nanochat model, always (<|bos|>, as nanochat's own code does), true or false to choose; a chat's template "
    "writes its own. The token plays the empty beginning before the first real token (the texts' bos_empty_prefix "
    "fact, GET /api/v1/genealogy/texts): the first position then has something to attend to and a prefix to "
    "predict from",
)


ERROR_RESPONSES = {
    413: {"model": ErrorResponse, "description": "request body or text over a documented limit"},
    422: {"model": ErrorResponse, "description": "invalid field; detail names it and the limit"},
}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "no such run, checkpoint or snapshot"}}
