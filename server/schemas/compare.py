"""Two models on the same text: losses per character, next-token distributions, attention, logit
lens, and how far the weights moved."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .common import MAX_PROMPT_CHARS, StrictRequest, TokenPiece
from .stages import LogitLensBlock, Matrix, NextToken
from .training import CHECKPOINT_PATTERN


class CompareRequest(StrictRequest):
    a: str = Field(pattern=CHECKPOINT_PATTERN, description="a checkpoint name from GET /api/v1/checkpoints")
    b: str = Field(pattern=CHECKPOINT_PATTERN, description="the checkpoint to compare it with")
    text: str = Field(
        min_length=1,
        max_length=MAX_PROMPT_CHARS,
        description="the text both models read; its tokens must fit both context windows",
    )
    char: int | None = Field(
        None,
        ge=0,
        description="compare the next-token distributions after the token that holds this "
        "character (default: the last character)",
    )
    layer: int = Field(0, ge=0, description="the attention layer shown")
    head: int = Field(0, ge=0, description="the attention head shown")
    top_k: int = Field(10, ge=1, le=100)
    bos: bool | None = Field(
        None,
        description="start each side's prompt with its model's beginning-of-text token: null (default) as each "
        "model's tokenizer config says, true or false to choose for both",
    )


class CompareSide(BaseModel):
    checkpoint: str
    model: str
    params: int
    n_layer: int
    n_head: int
    d_model: int
    vocab_size: int
    tokenizer: str
    tokens: list[TokenPiece]
    token_loss: list[float | None] = Field(
        description="nats for each token given the ones before (null for the first: nothing predicts it)"
    )
    total_bits: float = Field(description="the text's loss in bits: every token but the first")
    scored_chars: int = Field(description="characters whose tokens were predicted (all but the first token's)")
    bits_per_char: float | None
    position: int = Field(description="the token whose next-token distribution is shown (the one holding `char`)")
    next_token: list[NextToken]
    attention: Matrix = Field(
        description="[query][key] weights of the chosen layer and head (causal rows end at the query)"
    )
    logit_lens: LogitLensBlock


class ParamChange(BaseModel):
    name: str
    shape: list[int]
    a_norm: float
    b_norm: float
    relative_change: float | None = Field(
        description="||b - a|| / ||a|| (Frobenius): how far the weights moved (null "
        "when a is all zeros, as biases start: see b_norm)"
    )


class ParamComparison(BaseModel):
    same_architecture: bool = Field(description="identical shapes, so each weight can be compared")
    a_params: int
    b_params: int
    changes: list[ParamChange] = Field(description="every tensor, when the architectures match (else empty)")


class CompareResponse(BaseModel):
    text: str
    char: int
    layer: int
    head: int
    a: CompareSide
    b: CompareSide
    same_tokenizer: bool = Field(
        description="same vocabulary and split: per-token losses, KL and attention differences are then defined"
    )
    char_bits_a: list[float | None] = Field(
        description="bits each character costs model a: a token's loss spread evenly "
        "over the characters it covers (null where unscored)"
    )
    char_bits_b: list[float | None]
    char_bits_diff: list[float | None] = Field(description="b minus a, where both scored the character")
    common_chars: int = Field(description="characters both models scored")
    common_bits_a: float = Field(description="a's bits over those characters")
    common_bits_b: float
    kl_ab: float | None = Field(description="KL(a || b) of the next-token distributions, nats (same tokenizer only)")
    kl_ba: float | None = Field(description="KL(b || a), nats")
    attention_diff: Matrix | None = Field(
        description="b minus a for the chosen head, when both tokenized the text alike"
    )
    params: ParamComparison
