"""Attribution graphs through transcoders (GET /api/v1/transcoders, POST /api/v1/attribution and its job
form, POST /api/v1/attribution/intervene, a transcoder feature's page)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gptscope.model.transcoders import TranscoderTrainConfig

from .common import BOS_FIELD, MAX_PROMPT_CHARS, JobStatus, StrictRequest, TokenId, TokenPiece, request_from
from .patch import TokenRef
from .sae import SAE_NAME, FeatureDetail
from .stages import NextToken

MAX_INTERVENTIONS = 16


class TranscoderLayer(BaseModel):
    layer: int
    fve: float = Field(description="share of the MLP output's variance (around its mean) the transcoder explains")
    fve_at_init: float = Field(description="the same for the transcoder as it started (the baseline)")
    l0: float = Field(description="features firing per token, on average")
    dead: int = Field(description="features that never fire on the held-out tokens")
    dead_at_init: int
    d_sae: int = Field(description="the transcoder's features")


class TranscoderQuality(BaseModel):
    tokens: int = Field(description="held-out tokens the figures were measured on")
    sequences: int
    ce_sequences: int = Field(description="of those sequences, how many the losses were measured on")
    layers: list[TranscoderLayer]
    loss_clean: float = Field(description="next-token loss of the model itself, nats")
    loss_replaced: float = Field(description="the loss with every MLP replaced by its transcoder at once")
    loss_zero_ablation: float = Field(description="the loss with every MLP's output zeroed (the baseline)")
    loss_recovered: float | None = Field(
        description="1 - (replaced - clean) / (zeroed - clean): the share of what the MLPs are worth that the "
        "transcoders keep"
    )


class TranscoderSet(BaseModel):
    name: str
    kind: Literal["per_layer", "clt"] = Field(
        "per_layer",
        description="per_layer: one transcoder per MLP; clt: a cross-layer transcoder, each block's features "
        "writing to its own MLP's output and every later one's",
    )
    d_model: int
    d_transcoder: int = Field(description="features per transcoder")
    activation: Literal["topk", "relu"]
    k: int = Field(description="TopK's features per token (0 for ReLU)")
    input_hook: str = Field(description="what each transcoder reads, {layer} for the block")
    output_hook: str = Field(description="what it writes in place of the MLP")
    corpus: str
    steps: int
    tokens: int = Field(description="MLP input/output pairs each transcoder trained on")
    train_seconds: float
    command: str = Field(description="how it was trained")
    created: str
    quality: TranscoderQuality


class TranscoderList(BaseModel):
    sets: list[TranscoderSet]
    write_folder: str = Field(description="where new sets of the served model are written")


class PromptOnSet(StrictRequest):
    """A prompt read by the replacement model of a transcoder set (the fields every attribution request starts with)."""

    text: str | None = Field(
        None, min_length=1, max_length=MAX_PROMPT_CHARS, description="the prompt; give it or ids; within n_ctx tokens"
    )
    ids: list[TokenId] | None = Field(
        None, min_length=1, max_length=4096, description="token ids instead of text; each below vocab_size"
    )
    bos: bool | None = BOS_FIELD
    transcoders: str | None = Field(None, description="the transcoder set's name (default: the served model's first)")


class AttributionRequest(PromptOnSet):
    token: TokenId | None = Field(
        None, description="the target: this token's logit at the last position (default: the most likely next token)"
    )
    wrong: TokenId | None = Field(
        None, description="with it the target is logit[token] - logit[wrong], a logit difference (below vocab_size)"
    )
    node_threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="keep the features that carry this share of all features' influence"
    )
    edge_threshold: float = Field(
        0.98, gt=0.0, le=1.0, description="keep the edges that carry this share of the kept nodes' edge influence"
    )
    max_rows: int = Field(
        1024,
        ge=1,
        le=8192,
        description="at most this many active features get their own incoming edges computed (those of largest "
        "influence); the rest are sources only",
    )
    max_edges: int = Field(2000, ge=1, le=50000, description="at most this many of the kept edges in the answer")


class GraphNode(BaseModel):
    kind: Literal["token", "feature", "error", "logit"]
    layer: int | None = Field(description="the block (feature, error); null for a token and the logit")
    position: int
    feature: int | None = Field(description="the feature's index in its block's transcoder; null otherwise")
    label: str = Field(description="a token's text, a feature's top tokens, 'error', the target in words")
    activation: float | None = Field(description="a feature's activation on the prompt; null otherwise")
    influence: float = Field(description="its share of all influence on the target, through every path (the logit: 1)")
    value: float | None = Field(
        description="a node whose inputs were computed: its value (a feature's pre-activation, the target's logit or "
        "difference) in the frozen replacement model; null otherwise"
    )
    constant: float | None = Field(
        description="what the biases and the norms' shifts add to it: its incoming edges, every one of them, plus "
        "this make its value"
    )


class GraphEdge(BaseModel):
    source: int = Field(description="index into nodes")
    target: int = Field(description="index into nodes")
    weight: float = Field(description="the source's direct effect on the target's value")


class AttributionResponse(BaseModel):
    tokens: list[TokenPiece]
    transcoders: str
    target: TokenRef
    wrong: TokenRef | None
    target_value: float = Field(description="the target's value in the frozen replacement model")
    model_value: float = Field(description="the same target read from the real model's logits (equal, errors kept)")
    nodes: list[GraphNode] = Field(
        description="the logit first, then the kept features (by block, then position), the error nodes and the "
        "tokens that have a kept edge"
    )
    edges: list[GraphEdge] = Field(description="the kept edges, largest influence first")
    active_features: int = Field(description="features active on the prompt, all blocks and positions")
    rows: int = Field(description="active features whose incoming edges were computed")
    kept_features: int
    kept_share: float = Field(description="the kept features' share of all features' influence")
    edge_share: float = Field(description="the kept edges' share of the kept nodes' edge influence")
    edges_cut: int = Field(description="kept edges beyond max_edges, not in the answer")
    error_influence: float = Field(description="the error nodes' share of all influence: what the transcoders miss")
    token_influence: float = Field(description="the tokens' direct share")
    seconds: float


class AttributionJob(BaseModel):
    id: str
    status: JobStatus
    done: int = Field(description="features whose incoming edges are computed so far")
    total: int = Field(description="features whose incoming edges the graph needs (at most)")
    elapsed: float
    result: AttributionResponse | None
    error: str | None


class Intervention(StrictRequest):
    layer: int = Field(ge=0, description="the feature's block")
    position: int = Field(ge=0, description="the position it acts at")
    feature: int = Field(ge=0, description="its index in the block's transcoder")
    scale: float = Field(0.0, ge=-10.0, le=10.0, description="0 takes it out, 1 leaves it, 2 doubles it, -1 flips it")


class SteerRequest(PromptOnSet):
    interventions: list[Intervention] = Field(min_length=1, max_length=MAX_INTERVENTIONS)
    token: TokenId | None = Field(None, description="a token whose logit before and after is reported")
    top_k: int = Field(10, ge=1, le=50)


class Compared(BaseModel):
    id: int
    text: str
    before: float = Field(description="probability in the model as it is")
    after: float = Field(description="probability with the interventions")


class SteerResponse(BaseModel):
    before: list[NextToken]
    after: list[NextToken]
    compared: list[Compared] = Field(description="the union of both top lists, by probability before")
    token: TokenRef | None
    logit_before: float | None
    logit_after: float | None
    kl_divergence: float = Field(description="KL(before || after) of the next-token distributions, nats")


class TranscoderFeature(FeatureDetail):
    layer: int


# The API's deliberate differences from the dataclass (the command line has none): a page's job always has
# a time budget, and a shorter one than the command line's
TRANSCODER_API_OVERRIDES: dict[str, dict] = {
    "time_budget": {
        "default": 300,
        "ge": 1,
        "description": "seconds of training at most (evaluation comes after)",
    },
}
TranscoderTrainRequest = request_from(
    TranscoderTrainConfig,
    "TranscoderTrainRequest",
    {
        "name": (
            str | None,
            Field(
                None, pattern=SAE_NAME, description="default x<expansion>-<activation><k>-s<seed> (clt-x... for a CLT)"
            ),
        ),
        "corpus": (
            str | None,
            Field(
                None,
                description="training text by name from /api/v1/corpora (default: the model's own built-in corpus)",
            ),
        ),
    },
    exclude=("l1_coefficient", "dead_after_tokens", "aux_coefficient"),
    overrides=TRANSCODER_API_OVERRIDES,
    module=__name__,
)


class TranscoderJob(BaseModel):
    id: str
    status: JobStatus
    phase: Literal["training", "evaluating"]
    transcoders: str = Field(description="the set it writes (listed in GET /api/v1/transcoders once done)")
    progress: float = Field(description="0..1: of the token count or the time budget, whichever ends it first")
    step: int
    tokens: int
    fvu: list[float] | None = Field(
        description="per block, the fraction of the MLP output's variance unexplained on the latest batch"
    )
    history: list[dict] = Field(description="training records so far")
    quality: TranscoderQuality | None = Field(description="the set's figures, once done")
    error: str | None
    elapsed: float


# ---- attention inside the graph (issue #64) ---------------------------------------------------------------


class SourceRef(BaseModel):
    kind: Literal["token", "feature", "error", "constant"]
    layer: int | None = Field(description="a feature's or error node's block")
    position: int | None = Field(description="where it wrote (null for the constant)")
    feature: int | None = Field(description="a feature's index in its block's transcoder")
    label: str = Field(description="a token's text, a feature's top tokens, 'error L3', or the biases")


class HeadsRequest(PromptOnSet):
    token: TokenId | None = Field(
        None, description="as in POST /attribution: the logit target's token (default: the likeliest)"
    )
    wrong: TokenId | None = Field(None, description="as in POST /attribution: a logit difference's other token")
    layer: int | None = Field(
        None, ge=0, description="the target node: a feature of this block (with position and feature); null: the logit"
    )
    position: int | None = Field(None, ge=0, description="the target feature's position")
    feature: int | None = Field(None, ge=0, description="the target feature's index in its block's transcoder")
    top: int = Field(20, ge=1, le=200, description="the incoming edges split, largest |weight| first")


class HeadPart(BaseModel):
    layer: int = Field(description="a block whose attention the edge may pass")
    bypass: float = Field(description="the part that skips this block's attention (every head of it taken out)")
    heads: list[float] = Field(
        description="each head's part: the edge with only that head of the block kept, minus the bypass"
    )


class LoadedEdge(BaseModel):
    source: SourceRef
    weight: float = Field(description="the edge's weight, as in the graph")
    blocks: list[HeadPart] = Field(description="for each block on the path, bypass + heads adds up to the weight")


class HeadsResponse(BaseModel):
    target: str = Field(description="the target node in words")
    value: float = Field(description="its value in the replacement model")
    layers: list[int] = Field(description="the blocks an edge into the target may pass")
    n_head: int
    edges: list[LoadedEdge]
    carried: list[list[float]] = Field(
        description="per block on the path and head: the sum of |part| over every incoming edge (not only those "
        "listed), against bypass_carried: which heads carry the target's inputs"
    )
    bypass_carried: list[float]
    max_error: float = Field(description="the largest |bypass + heads - weight| over the listed edges and blocks")
    method: str
    seconds: float


class QKRequest(PromptOnSet):
    layer: int = Field(ge=0, description="the head's block")
    head: int = Field(ge=0, description="the head (a query head; under grouped-query attention its key head is shared)")
    query: int | None = Field(None, ge=0, description="the query position (default: the last)")
    key: int = Field(ge=0, description="the key position, at or before the query")
    top: int = Field(20, ge=1, le=200, description="sources and pairs listed, largest |term| first")


class QKSource(BaseModel):
    source: SourceRef
    value: float = Field(description="its terms added up: with every source at the other end")


class QKPair(BaseModel):
    query: SourceRef
    key: SourceRef
    value: float = Field(description="scale x (its part of the query) . (the other's part of the key)")


class QKKinds(BaseModel):
    query_kind: str
    key_kind: str
    value: float


class QKResponse(BaseModel):
    layer: int
    head: int
    query: int
    key: int
    score: float = Field(description="the head's pre-softmax score at (query, key) in the real model")
    terms_sum: float = Field(description="every term added up: the score, to float rounding")
    attention: float = Field(description="the attention weight there (after the softmax)")
    scale: float = Field(description="what q . k is multiplied by (1 / sqrt(d_head))")
    n_sources: int = Field(
        description="sources at each end: tokens, features and error nodes before the block, and the constant"
    )
    query_sources: list[QKSource]
    key_sources: list[QKSource]
    pairs: list[QKPair]
    kinds: list[QKKinds] = Field(description="the terms added up by the kinds of their two sources")
    method: str
    seconds: float


SupernodeSignal = Literal["auto", "decoder", "coactivation", "targets"]


class SupernodesRequest(AttributionRequest):
    signal: SupernodeSignal = Field(
        "auto",
        description="how features are grouped: decoder (cosine of decoder rows), coactivation (Jaccard of the "
        "held-out tokens they fire on), targets (cosine of their outgoing edges in the graph), or auto: each "
        "tried and the best-scoring one proposed",
    )
    candidates: int = Field(40, ge=2, le=120, description="the graph's most influential features considered")
    decoder_threshold: float = Field(0.4, gt=0, le=1, description="link two features whose decoder cosine reaches this")
    coactivation_threshold: float = Field(
        0.3, gt=0, le=1, description="... whose firing overlap (Jaccard) reaches this"
    )
    targets_threshold: float = Field(0.8, gt=0, le=1, description="... whose outgoing edges' cosine reaches this")


class SupernodeMember(BaseModel):
    source: SourceRef
    influence: float = Field(description="its share of all influence on the target")
    effect: float = Field(description="the real model's target with this feature alone taken out, minus as it is")


class Supernode(BaseModel):
    name: str = Field(description="a proposed name: the top token most of its members share")
    members: list[SupernodeMember]
    effect: float = Field(description="the real model's target with every member taken out at once, minus as it is")
    members_effect: float = Field(description="the members' own effects added up (equal to effect if they add)")


class SignalScore(BaseModel):
    signal: str
    available: bool
    reason: str | None = None
    threshold: float
    groups: int
    score: float = Field(
        description="the share of the candidates' |effect| in groups whose members agree in sign with their group"
    )
    agreement: float = Field(description="of the grouped members' |effect|, the share agreeing in sign with its group")
    coverage: float = Field(description="the share of the candidates' |effect| that is in a group")


class SupernodesResponse(BaseModel):
    target: str
    target_value: float = Field(description="the target in the real model")
    signal: str = Field(description="the signal whose groups are proposed")
    signals: list[SignalScore]
    groups: list[Supernode]
    candidates: int
    method: str
    seconds: float


class CheckedFeature(BaseModel):
    source: SourceRef
    influence: float
    edge: float = Field(
        description="its direct edge into the target in the graph (frozen attention, other features fixed)"
    )
    effect: float = Field(description="the real model's target with it taken out, minus as it is")


class CheckedEdge(BaseModel):
    weight: float = Field(
        description="the edge's weight in the graph: taking its source out of the frozen model moves its target by -weight"
    )
    real: float = Field(description="the real model's change in the edge's target node when its source is taken out")


class CheckedPath(BaseModel):
    source: SourceRef
    via: SourceRef = Field(description="the feature between the source and the target")
    influence: float = Field(description="the product of each edge's share of its target's inputs")
    edges: list[CheckedEdge] = Field(description="source -> via (via's pre-activation), then via -> the target")


class TrustResponse(BaseModel):
    target: str
    kl: float = Field(
        description="KL(real || replacement) of the next-token distributions, nats; the replacement: "
        "every MLP replaced by its transcoder, no error nodes, attention computed as usual"
    )
    top1_real: str
    top1_replaced: str
    target_real: float
    target_replaced: float = Field(description="the target in the replacement without error nodes")
    error_share: float = Field(description="the error nodes' share of all influence on the target in the graph")
    token_share: float
    checked: list[CheckedFeature] = Field(
        description="the graph's most influential features, each taken out of the real model"
    )
    rank_correlation: float = Field(description="Spearman's, between the checked features' edges and real effects")
    sign_agreement: float = Field(description="the share of checked features whose real effect has their edge's sign")
    paths: list[CheckedPath] = Field(
        description="the graph's top paths feature -> feature -> target, every edge checked"
    )
    path_agreement: float = Field(description="the share of the paths' edges whose real change has the sign of -weight")
    method: str
    seconds: float


class CompareSetsRequest(AttributionRequest):
    other: str = Field(
        max_length=200,
        description="the second transcoder set (per-layer or cross-layer) whose graph of the same prompt is compared "
        "with the first's (`transcoders`, default: the served model's first)",
    )


class SetOnPrompt(BaseModel):
    name: str
    kind: Literal["per_layer", "clt"]
    features_per_block: int
    loss_recovered: float | None = Field(description="the set's own figure on held-out text (every MLP replaced)")
    active_features: int
    kept_features: int = Field(description="the graph's features at its node threshold (80% of the influence)")
    error_share: float = Field(description="the error nodes' share of the influence on the target")
    kl: float = Field(description="KL(real || replacement without error nodes) of the next-token distributions, nats")
    top1_replaced: str = Field(description="the replacement's most likely next token (the real model's: top1_real)")
    target_replaced: float
    seconds: float


class GraphCell(BaseModel):
    layer: int
    position: int
    token: str
    influence: float = Field(description="the influence of the set's kept features there")


class OnlyIn(BaseModel):
    name: str
    share: float = Field(
        description="the share of its kept features' influence on (block, position) cells the other lacks"
    )
    cells: list[GraphCell] = Field(description="those cells, largest influence first (at most 10)")


class CompareSetsResponse(BaseModel):
    target: str
    target_real: float
    top1_real: str
    sets: list[SetOnPrompt]
    jaccard: float = Field(description="the overlap of the two graphs' kept (block, position) cells: shared / either")
    only: list[OnlyIn]
    method: str
    seconds: float
