from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer: `detail` says what was wrong, naming the field and the limit."""

    detail: str | list = Field(description="a message, or FastAPI's list of {loc, msg, type} for invalid fields")


class TokenPiece(BaseModel):
    """One token of a text: its id, the exact bytes, and the characters it covers."""

    index: int = Field(description="position of the token in the sequence (0-based)")
    id: int = Field(description="token id in the encoding's vocabulary")
    text: str = Field(description="the token's bytes decoded as UTF-8; U+FFFD stands in for bytes that are not valid UTF-8 on their own")
    bytes_hex: str = Field(description="the token's exact bytes, hex")
    valid_utf8: bool = Field(description="false when the token's bytes are only part of a character")
    start: int = Field(description="first character (code point) of the text this token covers")
    end: int = Field(description="one past the last character it covers")
    special: bool = Field(False, description="a special token such as <|endoftext|>")


ERROR_RESPONSES = {
    413: {"model": ErrorResponse, "description": "request body or text over a documented limit"},
    422: {"model": ErrorResponse, "description": "invalid field; detail names it and the limit"},
}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "no such run, checkpoint or snapshot"}}
