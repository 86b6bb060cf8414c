"""Circuits from edges (POST /api/v1/circuits and its job form): every edge's score by attribution
patching (AtP), EAP with integrated gradients and exact edge patching, the estimates against the
exact scores, and the circuit that keeps the fewest edges for a chosen share of the metric."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .arrays import Vector
from .common import JobStatus, TokenPiece
from .patch import PairRequest, PatchMetric
from .stages import NextToken

Method = Literal["atp", "eap_ig", "exact"]
MAX_STEPS = 64
MAX_EXACT_EDGES = 256
METHODS: dict[str, str] = {
    "atp": "attribution patching: (the writer's corrupted output - its clean output) . the gradient of the metric "
    "with respect to the reader's input at the clean run, summed over positions (one forward and one backward pass)",
    "eap_ig": "edge attribution patching with integrated gradients: the same product with the reader's gradient "
    "averaged over `steps` runs whose token embeddings lie between the corrupted prompt's and the clean one's",
    "exact": "exact edge patching: the clean run with this one edge's writer output, as its reader reads it, "
    "taken from the corrupted run; the metric's change (one forward pass per edge)",
}


class CircuitRequest(PairRequest):
    methods: list[Literal["atp", "eap_ig"]] = Field(
        default_factory=lambda: ["atp", "eap_ig"],
        max_length=2,
        description="the gradient estimates to compute for every edge",
    )
    steps: int = Field(10, ge=1, le=MAX_STEPS, description="EAP-IG's interpolation steps (runs in its gradient pass)")
    exact: Literal["none", "top", "all"] = Field(
        "top",
        description="which edges get an exact score: none; the `exact_top` edges with the largest estimate (of "
        "`rank_by`, or EAP-IG's when rank_by is exact); or every edge (a small model, or the job form)",
    )
    exact_top: int = Field(64, ge=1, le=4096, description="with exact=top: how many edges")
    exact_edges: list[str] = Field(
        default_factory=list,
        max_length=MAX_EXACT_EDGES,
        description="edges that also get an exact score, by name ('a0.h1->m2', 'input->a1.h0<q>'; the names "
        "the answer lists)",
    )
    rank_by: Method = Field(
        "eap_ig",
        description="the score whose size (absolute value) orders the edges for the circuit; exact needs exact=all",
    )
    target: float = Field(
        0.8, gt=0.0, le=1.0, description="the share of the metric, clean against corrupted, the circuit must recover"
    )


class CircuitNode(BaseModel):
    name: str
    kind: Literal["input", "head", "mlp", "q", "k", "v", "logits"] = Field(
        description="writers: input (the embeddings), head, mlp; readers: q, k, v (a head's query input, a "
        "key/value head's key or value input), mlp (its input), logits (the final norm's input)"
    )
    layer: int = Field(description="the block; -1 for the input, n_layer for the logits")
    head: int | None = Field(description="the head (q: a query head; k, v: a key/value head); null otherwise")


class EdgeScores(BaseModel):
    method: Method
    description: str = Field(description="how this method computes an edge's score")
    steps: int | None = Field(description="EAP-IG's steps; null for the other methods")
    edges: list[int] | None = Field(description="the edges scored, by index into `edges`; null: every edge, in order")
    values: Vector = Field(
        description="per edge scored: the metric's change when that edge alone is patched to the corrupted run "
        "(estimated by atp and eap_ig, measured by exact), nats"
    )
    seconds: float = Field(description="wall-clock time of this method's computation (0 when it came from the cache)")


class LargestError(BaseModel):
    edge: int
    name: str
    estimate: float
    exact: float
    error: float = Field(description="estimate - exact")


class Comparison(BaseModel):
    method: Literal["atp", "eap_ig"]
    edges: int = Field(description="the edges with both an estimate and an exact score")
    pearson: float | None = Field(description="Pearson's r of estimate and exact; null under 3 edges or no spread")
    spearman: float | None = Field(description="Spearman's rank correlation; null likewise")
    largest_errors: list[LargestError] = Field(description="the edges whose estimate is furthest from the exact score")


class CurvePoint(BaseModel):
    edges: int = Field(description="the circuit's size: the first `edges` edges of the ranking")
    metric: float = Field(description="the metric with every other edge patched to the corrupted run")
    recovered: float = Field(
        description="(metric - corrupted) / (clean - corrupted): 0 = the corrupted run's, 1 = the clean run's"
    )


class Circuit(BaseModel):
    ranked_by: Method
    target: float
    curve: list[CurvePoint] = Field(description="faithfulness against the number of edges kept, from 0 to every edge")
    edges: list[int] = Field(
        description="the circuit: the fewest first edges of the ranking whose run recovers `target` of the metric "
        "(every edge if none does), by index into `edges`"
    )
    metric: float = Field(description="the circuit's metric")
    recovered: float = Field(description="the share it recovers")
    reached: bool = Field(description="whether it reaches the target")


class CircuitResponse(BaseModel):
    n_layer: int
    n_head: int
    n_kv_head: int
    clean_tokens: list[TokenPiece]
    corrupted_tokens: list[TokenPiece]
    differs: list[int] = Field(description="the positions where the two prompts' tokens differ")
    metric: PatchMetric
    clean_metric: float = Field(description="the metric on the clean run")
    corrupted_metric: float = Field(description="the metric on the corrupted run")
    clean_top: list[NextToken] = Field(description="the clean run's most likely next tokens")
    corrupted_top: list[NextToken] = Field(description="the corrupted run's most likely next tokens")
    writers: list[CircuitNode] = Field(description="the upstream nodes, in the model's order")
    readers: list[CircuitNode] = Field(description="the downstream nodes, in the model's order")
    edges: list[str] = Field(description="every edge's name, 'writer->reader', reader by reader")
    edge_writer: list[int] = Field(description="per edge: its writer, by index into `writers`")
    edge_reader: list[int] = Field(description="per edge: its reader, by index into `readers`")
    scores: list[EdgeScores] = Field(description="one per method computed: the estimates, then the exact scores")
    comparisons: list[Comparison] = Field(description="each estimate against the exact scores, where both exist")
    circuit: Circuit
    runs: int = Field(
        description="graph runs (forward passes) this answer computed, the gradient passes' rows included"
    )
    seconds: float = Field(description="wall-clock time of this answer's computation")


class CircuitJob(BaseModel):
    id: str
    status: JobStatus
    done: int = Field(description="graph runs finished so far")
    total: int = Field(description="graph runs the answer needs (about: the circuit's search may take a few fewer)")
    elapsed: float = Field(description="seconds since the job started")
    result: CircuitResponse | None = Field(description="the answer, once status is done")
    error: str | None = Field(description="what went wrong, when status is failed")
