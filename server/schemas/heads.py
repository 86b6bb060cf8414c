"""Head roles: scores, random-weight baselines, ablation costs; and the same over a run's snapshots."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import TokenPiece

RoleName = Literal["previous-token", "first-token", "current-token", "local", "duplicate-token", "induction"]


class RoleDefinition(BaseModel):
    name: RoleName
    definition: str
    input: Literal["prompt", "repeated random tokens"] = Field(description="what the score is measured on")
    baseline_max: float = Field(
        description="the highest score of any head of the same architecture with random "
        "(untrained) weights, on the same input"
    )
    baseline_mean: float = Field(description="the mean score of those random heads")
    threshold: float = Field(
        description="a head needs at least this score for the role: max(min_score, baseline_max + margin)"
    )


class RepeatedTokensInput(BaseModel):
    """The standard seeded test input: random token ids, each row repeated twice."""

    seed: int
    n: int = Field(description="length of one copy; each row is 2n tokens")
    ids: list[list[int]] = Field(description="[row][position] token ids (rows are scored together)")
    tokens: list[str] = Field(description="the first row's tokens as text")


class Ablation(BaseModel):
    task: Literal["prompt", "repeated-second-copy"]
    task_description: str
    clean_loss: float = Field(description="the task's loss with every head on (nats per token)")
    zero_cost: float = Field(description="loss increase with this head's output z set to zero")
    mean_cost: float = Field(
        description="loss increase with this head's output z replaced by its mean over the input's positions"
    )
    needed: float = Field(
        description="the cost that confirms a role: max(0.01, twice the mean cost of zeroing heads without a role)"
    )
    confirmed: bool


class HeadRole(BaseModel):
    layer: int
    head: int
    scores: dict[RoleName, float] = Field(description="every role's score in [0, 1]")
    roles: list[RoleName] = Field(description="roles this head passes, the most decisive first")
    status: Literal["confirmed", "not confirmed", "untested", "no clear role"] = Field(
        description="untested: a role head past the ablation limit of a large model (the 12 clearest are tested), or "
        "ablate=false"
    )
    ablation: Ablation | None = Field(None, description="what switching the head off costs (heads with a role only)")


class InContext(BaseModel):
    first_copy_loss: float = Field(description="loss on tokens 2..n of the first copy (random: unpredictable)")
    second_copy_loss: float = Field(description="loss on the same tokens in the second copy")
    in_context_score: float = Field(description="second minus first: negative when the model reuses what it has seen")


class HeadsResponse(BaseModel):
    model: str
    n_layer: int
    n_head: int
    margin: float
    min_score: float
    roles: list[RoleDefinition]
    prompt: list[TokenPiece] = Field(description="the tokens the prompt roles were scored on")
    test_input: RepeatedTokensInput
    heads: list[HeadRole] = Field(description="every head, layer-major")
    in_context: InContext
    reference_cost: dict[str, float] = Field(
        description="mean loss increase from zeroing heads with no role, per task "
        "(the yardstick a role's cost must clearly beat)"
    )
    summary: str


class IclScore(BaseModel):
    """The in-context-learning score of Olsson et al. (2022), scaled to the model's context: the mean loss
    on tokens late in a window of natural held-out text minus on tokens early in it."""

    score: float = Field(description="late_loss - early_loss: below 0 when the model uses what it has read")
    early_loss: float = Field(description="mean loss (nats per token) at the second tenth of the positions")
    late_loss: float = Field(description="mean loss at the last tenth of the positions")
    early: list[int] = Field(description="the early band of positions, [start, stop)")
    late: list[int] = Field(description="the late band of positions, [start, stop)")
    loss: float = Field(description="mean loss over every position of the windows: the snapshot's held-out loss")
    windows: int = Field(description="how many windows of n_ctx + 1 tokens it is measured on")
    text: Literal["run", "builtin"] = Field(
        description="run: windows of the held-out part of the run's own corpus; builtin: of the built-in "
        "corpus's (the run's corpus is no longer there as it was)"
    )


class SnapshotHeads(BaseModel):
    step: int
    val_loss: float | None = Field(description="the trainer's last validation loss at or before this step")
    scores: dict[RoleName, list[list[float]]] = Field(description="role -> [layer][head] score")
    best: dict[RoleName, float] = Field(description="role -> the best head's score")
    role_counts: dict[RoleName, int] = Field(description="role -> how many heads pass it")
    in_context: InContext
    icl: IclScore | None = Field(description="the in-context-learning score on held-out text; null when too short")


class PhaseChange(BaseModel):
    """Where the best induction score jumps most between two consecutive snapshots (model.timeline)."""

    step: int = Field(description="the snapshot after the jump")
    from_step: int = Field(description="the snapshot before it")
    induction_before: float
    induction_after: float
    share: float = Field(description="the jump / the range of the best induction score over the run (0..1)")
    clear: bool = Field(description="the jump is at least 0.05: a phase change, not a wobble")
    threshold: float = Field(description="the induction role's threshold")
    icl_before: float | None = Field(description="the in-context-learning score at from_step")
    icl_after: float | None = Field(description="the in-context-learning score at step")
    icl_drop_step: int | None = Field(
        description="the snapshot after the largest fall of the in-context-learning score (null: it never falls)"
    )
    summary: str = Field(description="the finding in words")


class TrainingHeads(BaseModel):
    run: str
    roles: list[RoleDefinition]
    margin: float
    min_score: float
    snapshots: list[SnapshotHeads] = Field(description="one entry per snapshot, in step order")
    phase_change: PhaseChange | None = Field(
        None,
        description="the step where the best induction score jumps most; null with under two snapshots "
        "or when it never rises",
    )
