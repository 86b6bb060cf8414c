"""Linear probes on the residual stream (issue #66): the request and the curve over the depth."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gptscope.model.probes import MAX_EXAMPLES, POOLS, STAGES
from gptscope.model.tasks import BUILTIN_TASKS

from .common import StrictRequest

ProbeTaskName = Literal["genre", "speaker", "form"]
ProbeStage = Literal["resid_pre", "resid_post"]
ProbePool = Literal["mean", "last"]
assert (ProbeStage.__args__, ProbePool.__args__) == (STAGES, POOLS)  # type: ignore[attr-defined]
assert ProbeTaskName.__args__ == tuple(BUILTIN_TASKS)  # type: ignore[attr-defined]

MAX_PROBE_TEXT_CHARS = 2_000
MAX_LABEL_CHARS = 64
MAX_PROBE_LABELS = 32

# exactly one of a shipped task and the user's examples
TASK_OR_EXAMPLES = {
    "oneOf": [
        {"required": ["task"], "properties": {"task": {"type": "string"}, "examples": {"type": "null"}}},
        {"required": ["examples"], "properties": {"examples": {"type": "array"}, "task": {"type": "null"}}},
    ]
}


class LabelledText(StrictRequest):
    text: str = Field(min_length=1, max_length=MAX_PROBE_TEXT_CHARS, description="the example (cut to n_ctx tokens)")
    label: str = Field(min_length=1, max_length=MAX_LABEL_CHARS, description="its label")


class ProbeRequest(StrictRequest):
    model_config = ConfigDict(json_schema_extra=TASK_OR_EXAMPLES)  # a shipped task or examples, not both

    task: ProbeTaskName | None = Field(
        None,
        description="a shipped task (model/tasks.py): genre (comedy, history or tragedy; whole plays held out) "
        "speaker (four speakers of Hamlet) or form (verse or prose, told from the line breaks); give this "
        "or examples",
    )
    examples: list[LabelledText] | None = Field(
        None,
        min_length=2,
        max_length=MAX_EXAMPLES,
        description="labelled texts, at least 2 different labels and at most "
        f"{MAX_PROBE_LABELS}; one in five (chosen by a hash of its text) is held out for the test half, "
        "a repeated text is kept once; give this or task",
    )
    stage: ProbeStage = Field("resid_post", description="where in each block the stream is read")
    pool: ProbePool = Field(
        "mean", description="mean: the stream averaged over the text's tokens; last: its last token's"
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="the random model's weights (the control)")
    include_directions: bool = Field(
        False, description="add each layer's probe and DiffMean directions (d_model numbers per label)"
    )


class ProbeDirections(BaseModel):
    probe: list[list[float]] = Field(
        description="in the stream's units: for two labels one row, w_1 - w_0 (towards the second label); "
        "for more, one row per label"
    )
    diffmean: list[list[float]] = Field(
        description="for two labels one row, mean(second) - mean(first); for more, each label's mean minus "
        "the mean of the other labels' examples"
    )


class ProbeLayer(BaseModel):
    layer: int
    hook_name: str = Field(description="the hook point read, e.g. blocks.3.hook_resid_post")
    accuracy: float = Field(description="the probe's accuracy on the test half")
    train_accuracy: float = Field(description="its accuracy on the training half")
    control_accuracy: float = Field(
        description="the same probe's test accuracy on the stream of a randomly initialised model of the same config"
    )
    directions: ProbeDirections | None = Field(None, description="only with include_directions")


class ProbeResponse(BaseModel):
    task: str = Field(description="the shipped task's name, or 'examples'")
    description: str
    stage: ProbeStage
    pool: ProbePool
    seed: int
    labels: list[str]
    n_train: int
    n_test: int
    train_counts: dict[str, int] = Field(description="examples per label in the training half")
    test_counts: dict[str, int] = Field(description="examples per label in the test half")
    majority_label: str = Field(description="the training half's most common label")
    majority_baseline: float = Field(description="test accuracy of always answering majority_label")
    best_layer: int = Field(description="the layer whose probe scores highest on the test half")
    layers: list[ProbeLayer]
    examples_cut: int = Field(description="examples cut to the model's n_ctx tokens")
    method: str = Field(description="how each probe is trained, in words")
    seconds: float = Field(description="time taken to read the streams and fit the probes")
