"""GPT-1's second stage: labelled tasks, fine-tuning jobs, and a served classifier's prediction."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from .common import JobStatus, StrictRequest, TokenPiece
from .stages import ClassifierBlock

Method = Literal["finetune", "finetune_no_lm", "scratch", "probe"]
ALL_METHODS: tuple[str, ...] = Method.__args__  # type: ignore[attr-defined]
TASK_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_SIZES = 8
MAX_CSV_BYTES = 5 * 1024 * 1024


class TaskExample(BaseModel):
    text: str
    label: str
    text_b: str | None = Field(None, description="a second text (pair tasks from a CSV's text_b column)")


class TaskInfo(BaseModel):
    """A labelled task: fixed train and test halves, never sharing a text."""

    name: str
    source: Literal["builtin", "csv"]
    description: str
    labels: list[str]
    n_train: int = Field(description="labelled examples in the training half")
    n_test: int = Field(description="examples in the test half (accuracy is measured on all of them)")
    train_counts: dict[str, int] = Field(description="training examples per label")
    test_counts: dict[str, int] = Field(description="test examples per label")
    chance: float = Field(description="accuracy of always guessing the test half's most common label")
    train_plays: list[str] = Field(
        default_factory=list, description="built-in tasks: plays the training half comes from"
    )
    test_plays: list[str] = Field(default_factory=list, description="built-in tasks: plays the test half comes from")
    excluded_plays: list[str] = Field(
        default_factory=list, description="plays in the corpus's held-out 10%: never in a task's training half"
    )
    examples: list[TaskExample] = Field(description="a few training examples")


class TasksResponse(BaseModel):
    tasks: list[TaskInfo]


class FinetuneRequest(StrictRequest):
    task: str = Field(pattern=TASK_PATTERN, description="a name from GET /api/v1/finetune/tasks", examples=["genre"])
    checkpoint: str | None = Field(
        None,
        description="the pretrained model, by name from /api/v1/checkpoints "
        "(default: the one being served); it must not be a classifier",
    )
    methods: list[Method] = Field(
        default_factory=lambda: list(ALL_METHODS),
        min_length=1,
        max_length=4,
        json_schema_extra={"uniqueItems": True},
        description="finetune: pretrained, all weights trained, loss = label CE + lm_weight * LM loss; "
        "finetune_no_lm: the same with lm_weight 0; scratch: the same architecture "
        "from random weights, labels only; probe: pretrained and frozen, only W_y trained",
    )
    sizes: list[Annotated[int, Field(ge=0, le=100_000)]] = Field(
        default_factory=lambda: [16, 64, 256, 1024, 0],
        min_length=1,
        max_length=MAX_SIZES,
        json_schema_extra={"uniqueItems": True},
        description="labelled training examples per run, each 1..100000 or 0 for the whole training half (no size twice); "
        "a size above the training half's is run as the whole half",
    )
    lm_weight: float = Field(0.5, ge=0, le=10, description="lambda: weight of the auxiliary LM loss in `finetune`")
    seed: int = Field(
        0, ge=0, le=2**31 - 1, description="picks the subset of examples, the head's init and the batches"
    )
    steps: int | None = Field(
        None, ge=1, le=5000, description="updates per run (default: 3 epochs, at least 60, at most 400)"
    )
    save_as: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="save the `finetune` classifier of the largest size as models/<save_as>, "
        "servable with POST /api/v1/model (needs `finetune` in methods)",
    )


class CellResult(BaseModel):
    """One fine-tuning run: a method at one number of labelled examples."""

    method: Method
    lm_weight: float
    size: int = Field(description="the size asked for (0: all)")
    n_train: int = Field(description="labelled examples it was trained on")
    steps: int
    accuracy: float = Field(description="fraction of the test half labelled correctly")
    test_loss: float = Field(description="mean label cross-entropy on the test half, nats")
    train_loss: float = Field(description="label cross-entropy of the last 10 updates")
    seconds: float
    cached: bool = Field(description="read from the cache of an identical earlier run")


class Progress(BaseModel):
    method: Method
    n_train: int
    step: int
    steps: int


class FinetuneJob(BaseModel):
    id: str
    status: JobStatus
    task: str
    checkpoint: str = Field(description="the pretrained model")
    labels: list[str]
    chance: float
    methods: list[Method]
    sizes: list[int]
    lm_weight: float
    seed: int
    cells: list[CellResult] = Field(description="finished runs, in the order run")
    total_cells: int
    current: Progress | None
    saved_as: str | None = Field(description="checkpoint name of the saved classifier (models/NAME), once saved")
    error: str | None
    elapsed: float


class ClassifyRequest(StrictRequest):
    text: str = Field(
        min_length=1,
        max_length=20_000,
        description="the text to label; with the special tokens added it must fit the model's context window",
    )
    text_b: str | None = Field(None, max_length=20_000, description="a second text, after the delimiter token")
    truncate: bool = Field(
        True, description="cut a text too long for the context window, keeping its start (false: refuse it with a 422)"
    )


class ClassifyResponse(BaseModel):
    text: str = Field(description="the sequence the model read, special tokens written out")
    tokens: list[TokenPiece]
    truncated: int = Field(description="tokens cut from the start of the text to fit the context window")
    result: ClassifierBlock
