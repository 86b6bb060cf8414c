"""A run's timeline (POST /api/v1/timeline/jobs): every snapshot of a training run read the same way
(its held-out loss and the loss per kind of token, the in-context-learning score, every head's role
scores, the logit and tuned lenses' KL per stage, an SAE's features and a shipped pair's edge circuit),
then followed across the snapshots: the jumps found, the circuit's edges as they grow, the features
matched from one snapshot to the next with their births and deaths."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gptscope.model.timeline import TOKEN_KINDS

from .common import JobStatus, StrictRequest
from .heads import IclScore, InContext, PhaseChange, RoleDefinition, RoleName

SOURCE_PATTERN = r"^(models/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_SAE_TOKENS = 1_000_000
MAX_LENS_TOKENS = 1_000_000


class TimelineRequest(StrictRequest):
    run: str = Field(
        pattern=SOURCE_PATTERN,
        description="a training run's id (GET /api/v1/training), or models/NAME: a run imported with "
        "`gptscope import --series` (a command-line run's folder, or a folder of step checkpoints)",
    )
    pair: str | None = Field(
        "",
        max_length=64,
        description="the shipped clean/corrupted pair (GET /api/v1/patch/pairs) whose edge circuit is found "
        "at every snapshot; empty: the first that fits the run's tokenizer; null: no circuit",
    )
    sae_layer: int | None = Field(
        None, ge=0, le=255, description="the block whose output the SAEs read; default the middle one (n_layer // 2)"
    )
    sae_tokens: int = Field(
        65_536,
        ge=0,
        le=MAX_SAE_TOKENS,
        description="activations each snapshot's SAE trains on (0: no SAEs and no features over time)",
    )
    lens_tokens: int = Field(
        8192,
        ge=0,
        le=MAX_LENS_TOKENS,
        description="positions each snapshot's tuned lens trains on (0: the logit lens alone)",
    )
    min_cosine: float = Field(
        0.7,
        ge=0.3,
        le=0.99,
        allow_inf_nan=False,
        description="two snapshots' SAE features are the same feature when their decoder rows' cosine is at least this",
    )
    circuit_target: float = Field(
        0.8, gt=0, le=1, allow_inf_nan=False, description="the share of the pair's metric each snapshot's circuit keeps"
    )


class KindLoss(BaseModel):
    kind: Literal[TOKEN_KINDS]  # type: ignore[valid-type]
    loss: float | None = Field(description="mean loss (nats) of predicting tokens of this kind; null: none in the text")
    share: float = Field(description="the share of the predicted tokens that are of this kind")


class LensStage(BaseModel):
    stage: str
    logit_kl: float = Field(
        description="KL (nats) from the model's final distribution to the logit lens's at this stage"
    )
    tuned_kl: float | None = Field(description="the same for this snapshot's own tuned lens; null with lens_tokens 0")


class SnapshotSAE(BaseModel):
    alive: int = Field(description="features that fire on the held-out windows")
    features: int = Field(description="the SAE's width")
    fvu: float = Field(description="the share of the stream's variance its reconstruction misses (held out)")
    born: int = Field(description="alive features with no match in the snapshot before")
    died: int = Field(description="alive features of the snapshot before with no match in this one")
    kept: int = Field(description="alive features matched to one of the snapshot before")


class SnapshotCircuit(BaseModel):
    metric: float = Field(description="the pair's metric (logit difference) on the clean prompt at this snapshot")
    effect: float = Field(description="clean metric - corrupted metric: what the circuit must explain")
    edges: int = Field(description="edges in the smallest circuit keeping circuit_target of the effect")
    total_edges: int
    recovered: float | None = Field(description="the share of the effect that circuit keeps")
    top: list[str] = Field(description="the circuit's edges, largest EAP-IG score first (at most 24)")


class TimelineSnapshot(BaseModel):
    step: int
    val_loss: float | None = Field(description="the trainer's last validation loss at or before this step")
    loss: float = Field(description="mean loss on the timeline's held-out windows")
    loss_by_kind: list[KindLoss]
    icl: IclScore
    in_context: InContext
    scores: dict[RoleName, list[list[float]]] = Field(description="role -> [layer][head] score")
    best: dict[RoleName, float]
    role_counts: dict[RoleName, int] = Field(description="role -> how many heads pass its threshold")
    lens: list[LensStage]
    sae: SnapshotSAE | None
    circuit: SnapshotCircuit | None = Field(
        description="null: no pair, or the pair's effect is under min_effect here (pair_effect says how large it is)"
    )
    pair_effect: float | None = Field(
        description="the pair's clean metric minus its corrupted one at this snapshot (nats); null with no pair, or "
        "where the two are equal"
    )
    seconds: float = Field(description="what reading this snapshot took (0 when it was kept from before)")


class Jump(BaseModel):
    series: str = Field(description="what jumped: a role's best score, the ICL score, the loss, an edge")
    step: int
    from_step: int
    before: float
    after: float
    share: float = Field(description="the jump / the series' range over the run")


class EdgeSeries(BaseModel):
    name: str
    scores: list[float | None] = Field(description="its EAP-IG score at each snapshot (null: no circuit there)")
    in_circuit: list[bool] = Field(description="whether it is in that snapshot's circuit")
    appears: int | None = Field(description="the first step from which it stays in the circuit")


class Lineage(BaseModel):
    features: list[int | None] = Field(description="its feature number at each snapshot; null where it is not alive")
    born: int = Field(description="the step it first appears at")
    died: int | None = Field(description="the first step it is gone at (null: alive at the end)")


class FeatureTimeline(BaseModel):
    layer: int
    min_cosine: float
    lineages: list[Lineage] = Field(description="the longest-lived lineages first (at most 64)")
    count: int = Field(description="all lineages")
    same_snapshot_share: float | None = Field(
        description="the share of the last snapshot's alive features that a second SAE, trained on the same snapshot "
        "from another seed, also learns (matched at min_cosine): how far a match between snapshots can be trusted, "
        "since SAEs from different seeds differ even on one model"
    )


class TimelineResponse(BaseModel):
    run: str
    steps: list[int]
    n_layer: int
    n_head: int
    roles: list[RoleDefinition]
    pair: str | None = Field(description="the pair whose circuit is followed")
    pairs: list[str] = Field(description="the shipped pairs that fit this run's tokenizer (what `pair` may name)")
    min_effect: float = Field(description="a snapshot whose pair effect is smaller (nats) has no circuit")
    snapshots: list[TimelineSnapshot]
    phase_change: PhaseChange | None = Field(description="the induction score's largest jump, the ICL score around it")
    jumps: list[Jump] = Field(description="each series' largest jump, the largest share first")
    edges: list[EdgeSeries] = Field(description="edges in the last snapshot's circuit, and others in any circuit")
    features: FeatureTimeline | None
    summary: str = Field(description="the findings in words")


class TimelineJob(BaseModel):
    id: str
    status: JobStatus
    error: str | None
    elapsed: float
    done: int = Field(description="snapshots read")
    total: int = Field(description="snapshots to read")
    current: int | None = Field(description="the step of the snapshot being read")
    partial: TimelineResponse | None = Field(description="the timeline of the snapshots read so far (in order)")
    result: TimelineResponse | None
