"""Steering four ways on one concept (issue #66): the request, each method's points over the strength,
and the unsteered baseline, measured by the unsteered model (model/steering.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from gptscope.model.steering import METHODS

from .common import JobStatus, StrictRequest
from .probes import TASK_OR_EXAMPLES, LabelledText, ProbeTaskName

SteeringMethodName = Literal["diffmean", "probe", "sae", "prompt"]
SteeringJudgeName = Literal["probe", "likelihood"]
assert SteeringMethodName.__args__ == METHODS  # type: ignore[attr-defined]

MAX_STRENGTHS = 8
MAX_STRENGTH = 8.0
MAX_PREFIX_EXAMPLES = 16
MAX_STEER_PROMPTS = 32
MAX_STEER_EXAMPLES = 1_000
MAX_NEW_TOKENS = 128
Strength = Annotated[float, Field(gt=0, le=MAX_STRENGTH)]
PrefixSize = Annotated[int, Field(ge=1, le=MAX_PREFIX_EXAMPLES)]


class SteeringRequest(StrictRequest):
    model_config = ConfigDict(json_schema_extra=TASK_OR_EXAMPLES)  # a shipped task or examples, not both

    task: ProbeTaskName | None = Field(
        None, description="a shipped labelled task (as for POST /api/v1/probes); give this or examples"
    )
    examples: list[LabelledText] | None = Field(
        None,
        min_length=2,
        max_length=MAX_STEER_EXAMPLES,
        description="labelled texts, at least 2 different labels (one in five, by a hash of its text, is held "
        "out: the judge's test half and the default prompts); give this or task",
    )
    concept: str | None = Field(
        None,
        max_length=64,
        description="the label to steer towards (default: the task's second label, e.g. prose for form)",
    )
    layer: int | None = Field(
        None,
        ge=0,
        description="the block after which the vectors are added (default: the SAE's layer, if the "
        "served model has an SAE, else the middle block)",
    )
    sae: str | None = Field(
        None,
        max_length=200,
        description="the SAE whose feature is one method (default: the "
        "served model's first SAE at that layer; without one the method is left out)",
    )
    strengths: list[Strength] = Field(
        [0.25, 0.5, 1.0],
        min_length=1,
        max_length=MAX_STRENGTHS,
        description="the vectors' strengths, in multiples of the stream's mean norm at the layer (each > 0 "
        f"and at most {MAX_STRENGTH:g})",
    )
    prefix_examples: list[PrefixSize] = Field(
        [1, 2, 3],
        min_length=1,
        max_length=MAX_STRENGTHS,
        description="the prompt method's strengths: how many of the concept's training examples precede the "
        f"prompt (each 1 to {MAX_PREFIX_EXAMPLES})",
    )
    prompts: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_STEER_PROMPTS,
        description="the prompts to continue (default: the first line of held-out examples of the other labels, "
        "cut to prompt_tokens)",
    )
    n_prompts: int = Field(16, ge=1, le=MAX_STEER_PROMPTS, description="how many default prompts")
    prompt_tokens: int = Field(10, ge=2, le=64, description="the default prompts' length in tokens")
    new_tokens: int = Field(32, ge=4, le=MAX_NEW_TOKENS, description="tokens generated after each prompt")
    temperature: float = Field(1.0, ge=0, le=2, description="sampling temperature (0: greedy)")
    top_k: int | None = Field(None, ge=1, description="sample among the k most likely tokens only")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="prompt i draws with seed + i, the same for every method")
    judge: SteeringJudgeName = Field(
        "probe",
        description="the concept score's judge: probe (a logistic probe on the unsteered model's stream, at its most "
        "accurate layer) or likelihood (the unsteered model's own: the continuation's likelihood after a few "
        "examples of each label, the concept's share)",
    )


class SteeringPoint(BaseModel):
    strength: float = Field(description="a multiple of the stream's mean norm; for prompt, examples in the prefix")
    concept_score: float = Field(description="the judge's mean probability of the concept over the continuations")
    fluency: float = Field(
        description="the continuations' mean loss per token (nats) under the unsteered model, given the prompt "
        "alone: lower is more fluent"
    )
    concept_scores: list[float] = Field(description="per prompt")
    losses: list[float] = Field(description="per prompt")
    generations: list[str] = Field(description="each prompt's continuation")


class SteeringMethod(BaseModel):
    method: SteeringMethodName
    title: str
    description: str = Field(description="what is added (or prefixed), in words")
    available: bool
    reason: str | None = Field(None, description="why the method was left out, if it was")
    cosine_with_diffmean: float | None = Field(
        None, description="the cosine between this method's vector and DiffMean's (vector methods)"
    )
    sae_feature: int | None = Field(None, description="sae: the feature chosen")
    sae_feature_difference: float | None = Field(
        None, description="sae: its mean activation on the concept's examples minus on the others'"
    )
    prefix_tokens: list[int] | None = Field(None, description="prompt: the prefix's length at each strength")
    points: list[SteeringPoint]


class SteeringJudge(BaseModel):
    kind: SteeringJudgeName
    layer: int | None = Field(description="probe: the layer it reads")
    hook_name: str | None = Field(description="probe: the hook point it reads")
    accuracy: float = Field(
        description="the judge's accuracy on the held-out examples (likelihood: on up to 20 of each label)"
    )
    stage: str | None
    pool: str | None
    prefix_tokens: list[int] | None = Field(None, description="likelihood: each label's prefix, in tokens")
    description: str


class SteeringResponse(BaseModel):
    task: str
    description: str
    labels: list[str]
    concept: str
    layer: int
    hook_name: str = Field(description="where the vectors are added, e.g. blocks.3.hook_resid_post")
    stream_norm: float = Field(description="the stream's mean norm there over the training examples: strength 1")
    sae: str | None = Field(description="the SAE whose feature steers, if any")
    judge: SteeringJudge
    prompts: list[str]
    unsteered: SteeringPoint
    methods: list[SteeringMethod]
    n_train: int
    n_test: int
    method: str = Field(description="how the concept score and fluency are measured, in words")
    seconds: float


class SteeringJob(BaseModel):
    id: str
    status: JobStatus
    error: str | None
    elapsed: float
    done: int = Field(description="decode steps made (reading the examples counts as two generations' steps)")
    total: int = Field(description="decode steps needed: (1 + 3 x strengths + prefix sizes + 2) x new_tokens")
    result: SteeringResponse | None = Field(description="the answer, once done")
