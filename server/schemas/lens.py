"""Tuned lenses: the served model's lenses with their held-out figures beside the logit lens's,
training jobs, and the forward trace's `tuned_lens` part."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import JobStatus, StrictRequest
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


class LensTrainRequest(StrictRequest):
    lr: float = Field(1e-2, gt=0, le=0.1, allow_inf_nan=False, description="Adam's learning rate")
    batch_tokens: int = Field(4096, ge=64, le=65536, description="positions per update")
    max_tokens: int = Field(20_000_000, ge=1, le=1_000_000_000, description="positions to train on at most")
    time_budget: float = Field(
        120, ge=1, le=3600, allow_inf_nan=False, description="seconds of training at most (evaluation comes after)"
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)
    eval_sequences: int = Field(32, ge=1, le=1024, description="held-out sequences of n_ctx tokens to measure on")
    name: str | None = Field(None, pattern=SAE_NAME, description="default tuned-s<seed>")
    corpus: str | None = Field(
        None, description="training text by name from /api/v1/corpora (default: the model's own built-in corpus)"
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
