"""Next-token distributions under temperature / top-k / top-p, and the generation stepper."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .common import (
    BOS_FIELD,
    GENERATION_PROMPT_FIELD,
    MAX_PROMPT_CHARS,
    TEXT_OR_MESSAGES,
    ChatMessage,
    StrictRequest,
    TokenId,
    TokenPiece,
    messages_field,
)
from .stages import NextToken

MAX_TEMPERATURE = 100.0


class SamplingSettings(StrictRequest):
    temperature: float = Field(
        1.0,
        gt=0,
        le=MAX_TEMPERATURE,
        allow_inf_nan=False,
        description=f"divide the logits by this before softmax: a finite number in (0, {MAX_TEMPERATURE:g}]; "
        "small values approach greedy decoding",
    )
    top_k: int | None = Field(None, ge=1, description="keep only the k most likely tokens (1..vocab size); null = off")
    top_p: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="keep the smallest set of most likely tokens whose mass reaches p, in (0, 1]; null = off",
    )


class NextTokenRequest(SamplingSettings):
    model_config = ConfigDict(json_schema_extra=TEXT_OR_MESSAGES)  # a prompt or a chat

    text: str = Field(
        "", max_length=MAX_PROMPT_CHARS, examples=["ROMEO:\nBut soft, what"], description="the prompt (or messages)"
    )
    messages: list[ChatMessage] | None = messages_field()
    add_generation_prompt: bool = GENERATION_PROMPT_FIELD
    show: int = Field(20, ge=1, le=200, description="how many of the most likely tokens (at temperature 1) to list")
    truncate: bool = False
    bos: bool | None = BOS_FIELD
    position: int | None = Field(
        None,
        ge=0,
        description="the distribution after this position of the prompt (0-based; default the last), what the "
        "model predicts there for the token that follows it; below the prompt's token count",
    )


class FilteredToken(BaseModel):
    id: int
    text: str
    logit: float
    p_raw: float = Field(description="softmax(logits), temperature 1")
    p_temperature: float = Field(description="softmax(logits / temperature)")
    in_top_k: bool
    kept: bool = Field(description="survives top-k and top-p")
    p_final: float = Field(description="renormalised over the kept tokens; 0 when filtered out")


class NextTokenResponse(BaseModel):
    tokens: list[TokenPiece]
    settings: SamplingSettings
    candidates: list[FilteredToken] = Field(description="the `show` most likely tokens at temperature 1, in that order")
    n_kept: int = Field(description="how many tokens of the whole vocabulary survive the filters")
    kept_mass: float = Field(
        description="probability mass (after temperature) of the kept tokens, before renormalising"
    )
    entropy_raw: float = Field(description="entropy in nats at temperature 1")
    entropy_temperature: float
    entropy_final: float
    vocab_size: int


class Steer(StrictRequest):
    sae: str | None = Field(None, max_length=64, description="by name from GET /api/v1/saes (default: the first)")
    feature: int = Field(ge=0, description="the feature whose decoder direction is added (below the SAE's d_sae)")
    scale: float = Field(
        ge=-1000, le=1000, allow_inf_nan=False, description="how much of it: the activation it is added at"
    )


class GenerateStepRequest(SamplingSettings):
    ids: list[TokenId] = Field(
        min_length=1,
        description="token ids so far: the prompt followed by the tokens generated; "
        "each below the loaded model's vocab_size, at most n_ctx of them",
    )
    step: int = Field(
        0,
        ge=0,
        le=100_000,
        description="how many tokens were generated before this one; with `seed` it picks the random stream, "
        "so a run of steps 0, 1, 2, ... equals `gptscope generate` with that seed",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)
    top: int = Field(10, ge=1, le=50, description="candidates to return")
    steer: Steer | None = Field(
        None, description="add an SAE feature's direction to the stream at every position while generating"
    )


class CacheSize(BaseModel):
    layers: int
    positions: int = Field(description="T: positions held in the cache after this step")
    kv_heads: int = Field(description="key/value heads cached per layer (fewer than n_head: grouped-query attention)")
    d_head: int = Field(description="numbers per head's key (and value) vector")
    n_head: int = Field(description="query heads, which share the kv_heads key/value heads")
    d_model: int
    numbers: int = Field(description="layers x 2 (K and V) x T x kv_heads x d_head")
    bytes_float32: int


class GenerateStepResponse(BaseModel):
    token: TokenPiece = Field(description="the sampled token (index = its position in the sequence)")
    prob: float = Field(description="its probability under the final (filtered) distribution")
    ids: list[int] = Field(description="the input ids with the new token appended")
    step: int
    seed: int
    candidates: list[NextToken] = Field(description="the most likely tokens after filtering (prob = final probability)")
    prefill_tokens: int = Field(
        description="positions in the KV cache before the last id is decoded (all ids but the last)"
    )
    reused_tokens: int = Field(
        description="of those, how many were reused from the previous step's cache (its ids "
        "repeated at the start of this request) instead of computed again"
    )
    attention: list[list[list[float]]] = Field(
        description="[layer][head][key]: the newest query's attention over the cache"
    )
    cache: CacheSize
    text: str = Field(description="the decoded text of all ids")
