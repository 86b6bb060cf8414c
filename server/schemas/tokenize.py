from __future__ import annotations

from pydantic import BaseModel, Field

from ..config import MAX_TEXT_CHARS
from .common import TokenPiece


class TokenizeRequest(BaseModel):
    text: str = Field(max_length=MAX_TEXT_CHARS, description=f"any text, at most {MAX_TEXT_CHARS:,} characters; empty gives zero tokens",
                      examples=["Every effort moves you"])
    encoding: str = Field("gpt2", description="gpt2, cl100k_base, o200k_base, or 'model' for the loaded model's own tokenizer")
    allow_special: bool = Field(False, description="treat '<|endoftext|>' and other special-token strings as special tokens; otherwise they are ordinary text")


class PreToken(BaseModel):
    text: str
    start: int
    end: int


class TokenCounts(BaseModel):
    characters: int
    bytes: int
    tokens: int
    characters_per_token: float | None = Field(description="null for an empty text")


class TokenizeResponse(BaseModel):
    encoding: str
    tokens: list[TokenPiece]
    pretokens: list[PreToken] = Field(description="the regex split that BPE never merges across")
    counts: TokenCounts
