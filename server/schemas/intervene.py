from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .common import (
    BOS_FIELD,
    GENERATION_PROMPT_FIELD,
    MAX_PROMPT_CHARS,
    TEXT_OR_MESSAGES,
    ChatMessage,
    StrictRequest,
    TokenPiece,
    messages_field,
)
from .stages import NextToken


class HeadRef(StrictRequest):
    layer: int = Field(ge=0)
    head: int = Field(ge=0)


class TokenEdit(StrictRequest):
    position: int = Field(ge=0)
    id: int = Field(ge=0, description="the token id to put at that position")


class InterveneRequest(StrictRequest):
    model_config = ConfigDict(json_schema_extra=TEXT_OR_MESSAGES)  # a prompt or a chat

    text: str = Field("", max_length=MAX_PROMPT_CHARS, description="the prompt (or messages)")
    messages: list[ChatMessage] | None = messages_field()
    add_generation_prompt: bool = GENERATION_PROMPT_FIELD
    ablate_heads: list[HeadRef] = Field(default_factory=list, description="heads whose output is set to zero")
    ablate_mlps: list[int] = Field(default_factory=list, description="layers whose MLP output is set to zero")
    edits: list[TokenEdit] = Field(default_factory=list, description="replace prompt tokens before running")
    top_k: int = Field(10, ge=1, le=50)
    bos: bool | None = BOS_FIELD


class Compared(BaseModel):
    id: int
    text: str
    clean: float = Field(description="probability in the unaltered run")
    altered: float = Field(description="probability with the interventions")


class RunSummary(BaseModel):
    tokens: list[TokenPiece]
    loss: float | None = Field(description="mean next-token loss over the prompt (nats); null for a one-token prompt")
    top: list[NextToken] = Field(description="the most likely next tokens of this run")


class InterveneResponse(BaseModel):
    clean: RunSummary
    altered: RunSummary
    kl_divergence: float = Field(description="KL(clean || altered) of the next-token distributions, nats")
    compared: list[Compared] = Field(description="the union of both runs' top tokens with both probabilities")
