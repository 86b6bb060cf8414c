"""Token attribution: which input tokens a prediction came from (integrated gradients on the input
embeddings, with gradient x input, occlusion and attention rollout beside it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import BOS_FIELD, MAX_PROMPT_CHARS, JobStatus, StrictRequest, TokenId, TokenPiece

MAX_STEPS = 1024
Baseline = Literal["zero", "mean"]
Rule = Literal["gauss_legendre", "midpoint"]
Method = Literal["integrated_gradients", "gradient_x_input", "occlusion", "rollout"]


class TokenAttributionRequest(StrictRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["text"], "properties": {"text": {"minLength": 1}}},
                {"required": ["ids"], "properties": {"ids": {"type": "array"}}},
            ]
        }
    )

    text: str = Field(
        "",
        max_length=MAX_PROMPT_CHARS,
        description="the prompt (give it or `ids`); its tokens must fit the loaded model's context window "
        "unless `truncate` is true",
        examples=["First Lord: What news of Caesar?\nSecond Lord: My lord, Caesar is dead.\nFirst Lord: Alas, poor"],
    )
    ids: list[TokenId] | None = Field(
        None, min_length=1, max_length=4096, description="token ids to run instead of a text (`text` is then ignored)"
    )
    truncate: bool = Field(False, description="keep the last n_ctx tokens of a longer prompt instead of refusing it")
    bos: bool | None = BOS_FIELD
    position: int | None = Field(
        None,
        ge=0,
        description="the position whose prediction is explained (default: the last); ignored with every_position",
    )
    every_position: bool = Field(
        False, description="explain the prediction at every position (a matrix: one row per position)"
    )
    target: TokenId | None = Field(
        None, description="the token whose logit is explained (default: the model's top prediction at each position)"
    )
    contrast: TokenId | None = Field(
        None, description="explain the logit difference target - contrast instead of the target's logit alone"
    )
    steps: int = Field(
        32,
        ge=1,
        le=MAX_STEPS,
        description="integrated gradients: points on the path, up to 1,024 (more work than this endpoint computes "
        "runs as a job, POST /api/v1/token-attribution/jobs, with its progress)",
    )
    rule: Rule = Field(
        "gauss_legendre",
        description="how the path integral is computed: gauss_legendre (Gauss-Legendre quadrature; its error falls "
        "far faster where f is smooth along the path) or midpoint (the midpoint rule)",
    )
    baseline: Baseline | None = Field(
        None,
        description="what the input embeddings are compared with: zero (every token's row zeroed) or mean (every "
        "row replaced by the mean row of W_E); a learned position embedding is kept either way. null: the model's "
        "default (zero with a learned position embedding, else mean: the zero path does not converge there), "
        "named with its reason in baseline_reason",
    )


class TokenRef(BaseModel):
    id: int
    text: str = Field(description="the token's text (bytes decoded as UTF-8)")


class Completeness(BaseModel):
    """Integrated gradients' check: the attributions add up to f(x) - f(baseline), up to the rule's error."""

    attribution_sum: float = Field(description="the integrated gradients, added up over the tokens")
    difference: float = Field(description="f(x) - f(baseline)")
    error: float = Field(description="attribution_sum - difference")
    relative_error: float | None = Field(description="|error| / |difference| (null when the difference is 0)")


class AttributionRow(BaseModel):
    position: int = Field(description="the position whose prediction this row explains")
    target: TokenRef
    contrast: TokenRef | None
    f_input: float = Field(description="f(x): the target's logit (minus the contrast's) at this position")
    f_baseline: float = Field(description="f(x'): the same with every input row the baseline's")
    integrated_gradients: list[float | None] = Field(description="[token] attribution (null: a token it cannot read)")
    gradient_x_input: list[float | None] = Field(description="[token] (x - x') . df/dx at the input")
    occlusion: list[float | None] = Field(description="[token] f(x) - f(x with that token's row the baseline's)")
    rollout: list[float | None] = Field(description="[token] attention rollout's share (a row sums to 1)")
    completeness: Completeness


class MethodNote(BaseModel):
    name: Method
    description: str


class TokenAttributionResponse(BaseModel):
    model: str
    tokens: list[TokenPiece]
    truncated: int = Field(0, description="tokens dropped from the front when truncate was asked for")
    causal: bool = Field(description="each position reads only itself and earlier ones (later tokens: null)")
    metric: Literal["logit", "logit_difference"]
    baseline: Baseline = Field(description="the baseline used (the request's, or the model's default)")
    baseline_description: str = Field(description="the baseline x' in words")
    baseline_reason: str = Field(description="why this baseline: the model's default and what makes it converge")
    steps: int
    quadrature: Rule = Field(description="the rule that computed the path integral (the request's `rule`)")
    rule: str = Field(description="how the path integral is computed, in words")
    methods: list[MethodNote]
    rows: list[AttributionRow] = Field(description="one per explained position, in order")
    worst_relative_error: float | None = Field(description="the largest relative completeness error of the rows")


class TokenAttributionJob(BaseModel):
    id: str
    status: JobStatus
    error: str | None
    elapsed: float
    done: int = Field(description="runs of the prompt made so far (each occluded token, each point of a path)")
    total: int = Field(description="runs of the prompt it needs: T + 2, then steps + 1 per explained position")
    result: TokenAttributionResponse | None = Field(description="the answer, once done")
