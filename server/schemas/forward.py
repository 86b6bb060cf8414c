from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import TokenPiece

MAX_PROMPT_CHARS = 20_000

ForwardPart = Literal["attention", "next_token"]


class ForwardRequest(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS,
                      description="the prompt; its tokens must fit the model's context window",
                      examples=["ROMEO:\nBut soft, what light"])
    include: list[ForwardPart] = Field(default_factory=lambda: ["attention", "next_token"],
                                       description="which parts of the trace to return")
    layers: list[int] | None = Field(None, description="only these layers' attention (default all)")
    heads: list[int] | None = Field(None, description="only these heads' attention (default all)")
    top_k: int = Field(10, ge=1, le=100, description="how many next-token candidates to return")
    truncate: bool = Field(False, description="keep the last n_ctx tokens of a longer prompt instead of refusing it")


class NextToken(BaseModel):
    id: int
    text: str
    prob: float
    logit: float


class AttentionBlock(BaseModel):
    layers: list[int] = Field(description="layer index of each entry of `pattern`")
    heads: list[int] = Field(description="head index of each entry of `pattern[l]`")
    pattern: list[list[list[list[float]]]] = Field(
        description="[layer][head][query][key]: softmax weights; each row sums to 1; zero above the diagonal")


class ForwardResponse(BaseModel):
    model: str
    tokens: list[TokenPiece]
    truncated: int = Field(0, description="tokens dropped from the front when truncate was asked for")
    attention: AttentionBlock | None = None
    next_token: list[NextToken] | None = Field(None, description="top-k next tokens after the last position")
