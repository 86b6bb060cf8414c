"""Tuned lenses: the served model's lenses with their held-out figures beside the logit lens's,
training jobs, and the forward trace's `tuned_lens` part."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gptscope.model.tuned_lens import LensTrainConfig

from .common import JobStatus, request_from
from .sae import SAE_NAME
from .stages import LogitLensBlock


class LensStageFigures(BaseModel):
    stage: str = Field(description="the stream after this stage: embed, block i (nanochat: backout last)")
    logit_kl: float = Field(description="logit lens: mean KL(p_final || p_lens) over the held-out tokens, nats")
    tuned_kl: float = Field(description="tuned lens: the same on the same tokens")
    logit_top1: float = Field(description="logit lens: share of the tokens where its top token is the model's")
    tuned_top1: float = Field(description="tuned lens: the same")


class LensFigures(BaseModel):
    """Both lenses measured on the same held-out tokens (the last 10% of the corpus), stage by stage; at the
    last stage both read the model's own final stream, so KL is 0 and top-1 agreement 1."""

    tokens: int = Field(description="held-out tokens the figures are measured on")
    sequences: int = Field(description="held-out sequences of n_ctx tokens those tokens come in")
    stages: list[LensStageFigures]


class LensInfo(BaseModel):
    name: str
    stages: list[str] = Field(description="the stages whose streams it reads, in order")
    translators: int = Field(description="learned affine maps, one per stage but the last")
    d_model: int
    corpus: str
    steps: int
    tokens: int = Field(description="positions it was trained on")
    train_seconds: float
    eval_seconds: float
    command: str = Field(description="the command or request that trained it")
    created: str
    quality: LensFigures


class LensList(BaseModel):
    lenses: list[LensInfo]


# The API's deliberate differences from the dataclass (the command line has none): a page's job always has
# a time budget and trains on at least one position (0, a lens that is the logit lens, is the command line's)
LENS_API_OVERRIDES: dict[str, dict] = {
    "max_tokens": {"ge": 1},
    "time_budget": {"ge": 1, "description": "seconds of training at most (evaluation comes after)"},
}
LensTrainRequest = request_from(
    LensTrainConfig,
    "LensTrainRequest",
    {
        "name": (str | None, Field(None, pattern=SAE_NAME, description="default tuned-s<seed>")),
        "corpus": (
            str | None,
            Field(
                None,
                description="training text by name from /api/v1/corpora (default: the model's own built-in corpus)",
            ),
        ),
    },
    overrides=LENS_API_OVERRIDES,
    module=__name__,
)


class LensJob(BaseModel):
    id: str
    status: JobStatus
    phase: Literal["training", "evaluating"]
    lens: str = Field(description="the name of the lens it writes (listed in GET /api/v1/lenses once done)")
    progress: float = Field(description="0..1: of the token count or the time budget, whichever ends it first")
    step: int
    tokens: int
    kl: list[float] | None = Field(
        description="each translated stage's KL to the final distribution on the latest batch"
    )
    history: list[dict] = Field(description="training records so far")
    quality: LensFigures | None = Field(description="the figures, once done")
    error: str | None
    elapsed: float


class TunedLensBlock(LogitLensBlock):
    """The logit lens's answer, read through a tuned lens's translators, with its held-out figures."""

    lens: str = Field(description="the tuned lens, by name from GET /api/v1/lenses")
    held_out: LensFigures = Field(description="both lenses on held-out text, stage by stage")
