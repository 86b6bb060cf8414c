"""Sparse autoencoders: the served model's SAEs, their quality figures, training jobs, features."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from gptscope.model.sae import SAETrainConfig

from .common import JobStatus, TokenPiece, request_from

SAE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
SortKey = Literal["index", "density", "max_act", "mean_act"]


class Quality(BaseModel):
    """Every figure beside its baseline, measured on held-out text (the last 10% of the corpus)."""

    tokens: int = Field(description="held-out tokens the reconstruction figures and features are measured on")
    sequences: int = Field(description="held-out sequences of n_ctx tokens those tokens come in")
    ce_sequences: int = Field(description="of those, the sequences the language-model losses are measured on")
    fve: float = Field(description="fraction of the stream's variance the reconstruction explains")
    fve_pca_same_l0: float = Field(
        description="baseline: what the top round(L0) principal components of the same activations explain"
    )
    fve_at_init: float = Field(description="baseline: the same SAE before training")
    l0: float = Field(description="features active per token, on average")
    l0_at_init: float = Field(description="baseline: the same SAE before training")
    d_model: int = Field(description="baseline: the stream's own width, the numbers a dense code uses")
    loss_clean: float = Field(description="next-token loss (nats) of the model as it is")
    loss_sae: float = Field(description="... with the SAE's reconstruction in place of the stream at its layer")
    loss_zero_ablation: float = Field(description="... with that stream set to zero")
    loss_added: float = Field(description="loss_sae - loss_clean")
    loss_added_zero_ablation: float = Field(description="loss_zero_ablation - loss_clean")
    loss_recovered: float | None = Field(
        description="1 - loss_added / loss_added_zero_ablation (SAELens's CE loss score): 1 is the clean model"
    )
    dead: int = Field(description="features that never fired on the held-out tokens")
    dead_at_init: int
    dense: int = Field(description="features that fired on more than dense_threshold of the tokens")
    dense_at_init: int
    d_sae: int
    dense_threshold: float


class SaeInfo(BaseModel):
    name: str
    hook_name: str = Field(description="the hook point it reads and can replace, e.g. blocks.3.hook_resid_post")
    layer: int
    d_in: int
    d_sae: int
    activation: Literal["topk", "relu"]
    k: int = Field(description="TopK: features kept per token (0 for ReLU)")
    corpus: str
    steps: int
    tokens: int = Field(description="activations it was trained on")
    train_seconds: float
    eval_seconds: float
    command: str = Field(description="the command or request that trained it")
    created: str
    quality: Quality
    history: list[dict] = Field(description="training records: step, tokens, elapsed, fvu, l0, dead, lr")


class SaeList(BaseModel):
    saes: list[SaeInfo] = Field(description="the SAEs trained on the served model's weights, by name")
    write_folder: str = Field(description="where an SAE trained from the API is written")


# The API's deliberate differences from the dataclass (the command line has none): a page's job always has
# a time budget, and a shorter one than the command line's
SAE_API_OVERRIDES: dict[str, dict] = {
    "time_budget": {
        "default": 120,
        "ge": 1,
        "description": "seconds of training at most (evaluation comes after)",
    },
}
SaeTrainRequest = request_from(
    SAETrainConfig,
    "SaeTrainRequest",
    {
        "name": (
            str | None,
            Field(None, pattern=SAE_NAME, description="default L<layer>-x<expansion>-<activation>-s<seed>"),
        ),
        "corpus": (
            str | None,
            Field(
                None,
                description="training text by name from /api/v1/corpora (default: the model's own built-in corpus)",
            ),
        ),
    },
    exclude=("dead_after_tokens", "aux_coefficient"),
    overrides=SAE_API_OVERRIDES,
    module=__name__,
)


class SaeJob(BaseModel):
    id: str
    status: JobStatus
    phase: Literal["training", "evaluating"]
    sae: str = Field(description="the name of the SAE it writes (listed in GET /api/v1/saes once done)")
    layer: int
    progress: float = Field(description="0..1: of the token count or the time budget, whichever ends it first")
    step: int
    tokens: int
    fvu: float | None = Field(description="fraction of variance unexplained on the latest batch")
    l0: float | None
    dead: int | None = Field(description="features that have not fired for dead_after_tokens training tokens")
    history: list[dict] = Field(description="training records so far")
    quality: Quality | None = Field(description="the figures, once done")
    error: str | None
    elapsed: float


class FeatureSummary(BaseModel):
    index: int
    density: float = Field(description="share of held-out tokens it fires on")
    mean_act: float = Field(description="mean activation where it fires")
    max_act: float
    top_tokens: list[str] = Field(description="the tokens at its largest activations, most active first, distinct")
    promotes: list[str] = Field(description="the tokens its decoder direction raises most through the unembedding")


class FeatureList(BaseModel):
    sae: str
    d_sae: int
    total: int = Field(description="features matching the query")
    offset: int
    features: list[FeatureSummary]


class PassageToken(BaseModel):
    text: str
    id: int
    activation: float


class Passage(BaseModel):
    sequence: int = Field(description="the held-out sequence it comes from")
    position: int = Field(description="the position of the activation in that sequence")
    activation: float = Field(description="the feature's activation there")
    tokens: list[PassageToken] = Field(description="the window around it, each token with the feature's activation")
    peak: int = Field(description="index in tokens of the activation")


class LogitEffect(BaseModel):
    id: int
    text: str
    effect: float = Field(description="the logit change per unit of activation, through the linearised final norm")


class FeatureDetail(FeatureSummary):
    sae: str
    hook_name: str
    tokens_measured: int = Field(description="held-out tokens its statistics come from")
    passages: list[Passage] = Field(description="its top activating held-out passages, most active first")
    histogram_edges: list[float] = Field(description="bin edges from 0 to max_act")
    histogram_counts: list[int] = Field(description="tokens per bin where it fires (the others are 0)")
    zeros: int = Field(description="held-out tokens where it does not fire")
    promoted: list[LogitEffect]
    suppressed: list[LogitEffect]


class ActiveFeature(BaseModel):
    index: int
    activation: float
    density: float
    max_act: float
    top_tokens: list[str]
    promotes: list[str]


class SaeFeaturesBlock(BaseModel):
    """The forward page's SAE stage: which features fire at the selected position."""

    sae: str
    hook_name: str
    layer: int
    position: int
    token: TokenPiece
    l0: int = Field(description="features active at this position")
    stream_norm: float = Field(description="|x|, the stream at the position")
    error_norm: float = Field(description="|x - x_hat|, what the SAE leaves unexplained there")
    features: list[ActiveFeature] = Field(description="the active features, most active first (at most 20)")
    per_position_l0: list[int] = Field(description="features active at every position of the prompt")
