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


class SnapshotHeads(BaseModel):
    step: int
    val_loss: float | None
    scores: dict[RoleName, list[list[float]]] = Field(description="role -> [layer][head] score")
    best: dict[RoleName, float] = Field(description="role -> the best head's score")
    role_counts: dict[RoleName, int] = Field(description="role -> how many heads pass it")
    in_context: InContext


class TrainingHeads(BaseModel):
    run: str
    roles: list[RoleDefinition]
    margin: float
    min_score: float
    snapshots: list[SnapshotHeads] = Field(description="one entry per snapshot, in step order")
