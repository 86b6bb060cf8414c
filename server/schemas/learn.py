"""The JSON contract of the /learn page's endpoints: curves and schedules (/api/v1/schedules, /curves, /params).

Every number is finite: a value that has no finite answer is left out (or null), never NaN."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .config import config_fields, schema_model
from .genealogy import TextFactEntry

# --------------------------------------------------------------------------------------------
# Learning-rate schedules
# --------------------------------------------------------------------------------------------


class ScheduleParams(BaseModel):
    d_model: int | None = Field(None, description="transformer only: the width in d_model^-0.5")
    warmup: int = Field(description="updates of warmup: the step where the rate peaks")
    max_lr: float | None = Field(None, description="warmup_cosine and warmup_stable_decay: the peak learning rate")
    min_lr: float | None = Field(None, description="warmup_cosine and warmup_stable_decay: where the decay ends")
    total_steps: int = Field(
        description="the last step plotted (warmup_cosine and warmup_stable_decay: where the decay reaches min_lr)"
    )
    cooldown: float | None = Field(
        None, description="warmup_stable_decay only: the share of total_steps over which the rate falls to min_lr"
    )


class SchedulePoint(BaseModel):
    step: int
    lr: float


class LrHistory(BaseModel):
    """The learning rate the loaded model's trainer really set, update by update."""

    step: list[int] = Field(
        description="the schedule step (0-based update index) each rate was used for; "
        "the checkpoint's history numbers the same update step + 1"
    )
    lr: list[float]
    loss: list[float] = Field(description="the training loss of that update (nats per token)")


class ScheduleResponse(BaseModel):
    kind: str = Field(description="transformer, gpt1 or model")
    function: str = Field(
        description="the gptscope.model.schedules function that computed lr (the trainer calls the same one)"
    )
    formula: str
    params: ScheduleParams
    step: list[int]
    lr: list[float]
    peak: SchedulePoint = Field(description="the highest learning rate and its step")
    end: SchedulePoint = Field(description="the learning rate at total_steps")
    checkpoint_schedule: dict | None = Field(None, description="kind=model: the schedule recorded in checkpoint.json")
    history: LrHistory | None = Field(
        None, description="kind=model: the per-update learning rates the trainer recorded"
    )
    history_max_abs_diff: float | None = Field(
        None,
        description="kind=model with the recorded parameters: the largest "
        "|recorded lr - schedule lr| over the history (0 means identical)",
    )


# --------------------------------------------------------------------------------------------
# GELU
# --------------------------------------------------------------------------------------------


class XY(BaseModel):
    x: float
    y: float


class GeluResponse(BaseModel):
    x: list[float]
    gelu_exact: list[float] = Field(description="x * Phi(x), Phi the standard normal CDF")
    gelu_tanh: list[float] = Field(description="0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
    relu: list[float] = Field(description="max(0, x)")
    d_gelu_exact: list[float] = Field(description="derivative of the exact GELU: Phi(x) + x phi(x)")
    d_gelu_tanh: list[float]
    d_relu: list[float] = Field(description="1 for x > 0, else 0")
    gap: list[float] = Field(description="gelu_tanh - gelu_exact at each x")
    max_abs_gap: XY = Field(description="the largest |gap| on the grid and where (y is the gap)")
    max_abs_gap_band: XY = Field(description="the same within the band [-2, 2] where pre-activations mostly lie")
    minimum: XY = Field(
        description="the exact GELU's minimum (found by root-finding its derivative, not from the grid)"
    )
    minimum_tanh: XY = Field(description="the tanh approximation's minimum")
    derivative_at_minus_one: XY = Field(description="x = -1 and GELU'(-1): a negative input still gets a gradient")
    relu_derivative_at_minus_one: XY
    torch_gelu: str = Field(description="which torch.nn.functional.gelu call each curve equals")


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------


class Baseline(BaseModel):
    label: str
    vocab_size: int
    loss: float = Field(description="ln(vocab_size): the loss of a uniform guess, in nats")


class LossMark(BaseModel):
    label: str
    short: str = Field(description="a label short enough to print beside the point")
    p: float
    loss: float


class GradientExample(BaseModel):
    logits: list[float]
    target: int = Field(description="index of the true token")
    epsilon: float = Field(description="label smoothing used for the target q (0: one-hot)")
    p: list[float] = Field(description="softmax(logits)")
    q: list[float] = Field(description="the target distribution")
    grad: list[float] = Field(description="d loss / d logits = p - q")
    grad_sum: float = Field(description="sum of the gradient: zero, because p and q both sum to one")
    loss: float = Field(description="cross-entropy -sum q ln p, nats")


class CrossEntropyResponse(BaseModel):
    p: list[float] = Field(description="probability the model gives the true token")
    loss: list[float] = Field(description="-ln(p), nats")
    vocab_size: int
    uniform: Baseline = Field(description="the chosen vocabulary's uniform baseline")
    baselines: list[Baseline] = Field(description="uniform baselines of known vocabularies")
    marks: list[LossMark] = Field(description="points worth marking on the curve")
    gradient: GradientExample


class LabelSmoothingResponse(BaseModel):
    epsilon: float
    vocab_size: int
    q_true: float = Field(description="1 - eps + eps / V: the target on the true token")
    q_other: float = Field(description="eps / V: the target on each other token")
    floor: float = Field(description="entropy of the smoothed target, nats: the lowest loss any model can reach")
    floor_by_sum: float | None = Field(None, description="the same entropy summed over all V entries (V <= 2,000,000)")
    p: list[float] = Field(description="probability the model gives the true token (the rest spread evenly)")
    loss_smoothed: list[float] = Field(description="cross-entropy against the smoothed target at each p")
    loss_one_hot: list[float] = Field(description="-ln p: the loss against the one-hot target")
    best_p: float = Field(description="the p where the smoothed loss is lowest (= q_true)")
    epsilons: list[float]
    floors: list[float] = Field(description="the floor for each epsilon at this V")


# --------------------------------------------------------------------------------------------
# Softmax and scale
# --------------------------------------------------------------------------------------------


class Histogram(BaseModel):
    edges: list[float] = Field(description="bin edges (values beyond the last edge are counted in the end bins)")
    centers: list[float] = Field(description="the middle of each bin")
    counts: list[int]


class SoftmaxScaleResponse(BaseModel):
    d_k: int
    samples: int
    seed: int
    variance_raw: float = Field(description="variance of q.k over the samples (about d_k)")
    variance_scaled: float = Field(description="variance of q.k / sqrt(d_k) (about 1)")
    hist_raw: Histogram
    hist_scaled: Histogram
    row_scores_raw: list[float] = Field(description="one query's scores against n_keys keys, unscaled")
    row_scores_scaled: list[float]
    row_weights_raw: list[float] = Field(description="softmax of the unscaled scores")
    row_weights_scaled: list[float]
    row_max_weight_raw: float = Field(description="the largest unscaled weight in the row")
    row_max_weight_scaled: float
    sweep_d_k: list[int]
    sweep_max_weight_raw: list[float] = Field(description="mean largest attention weight without the scale")
    sweep_max_weight_scaled: list[float] = Field(description="the same with the scale")
    logits: list[float] = Field(description="example logits for temperature and shift")
    temperature: float
    probs_t1: list[float] = Field(description="softmax(logits)")
    probs_temperature: list[float] = Field(description="softmax(logits / temperature)")
    shift: float
    probs_shifted: list[float] = Field(description="softmax(logits + shift): the same as probs_t1")
    shift_max_abs_diff: float = Field(description="largest |softmax(logits + shift) - softmax(logits)|")


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------


# the config a size is counted for: GPTConfig's fields (server/schemas/config.py), the first nine
# always in the answer, the modern block's with GPTConfig's defaults
_ParamsConfig = schema_model(
    "ParamsConfig",
    __name__,
    **config_fields(
        ("vocab_size", "n_ctx", "n_layer", "n_head", "d_model", "d_mlp", "bias", "norm", "tie_weights"),
        required=True,
        loose=True,
    ),
    **config_fields(("pos", "norm_type", "mlp", "n_kv_head", "n_expert", "top_k_experts"), loose=True),
    # always in the answer, null where the MLP has no GELU (so no GPTConfig default to repeat)
    gelu=(
        str | None,
        Field(
            description="the GELU the MLP uses: 'exact' x Phi(x) or the 'tanh' approximation; null where the MLP "
            "has no GELU (SwiGLU, the 2017 Transformer's ReLU)"
        ),
    ),
)


class ParamsConfig(_ParamsConfig):  # type: ignore[misc,valid-type]  # a class, so that code can name the type
    pass


class Part(BaseModel):
    label: str
    count: int
    share: float = Field(description="count / counts.total")


class EncoderDecoderCount(BaseModel):
    """preset=transformer-base: the original encoder-decoder Transformer, counted both ways."""

    encoder_layer: int = Field(description="self-attention 4 d^2 + 4 d, FFN 2 d d_ff + d_ff + d, two LayerNorms")
    decoder_layer: int = Field(description="an encoder layer plus cross-attention and a third LayerNorm")
    encoder: int
    decoder: int
    embedding: int = Field(description="V x d: one table for source, target and output when tied")
    tied_total: int = Field(description="every parameter with the one shared table (the paper: about 65M)")
    untied_total: int = Field(description="the same with its own V x d output matrix (the texts: about 84M)")
    difference: int = Field(description="untied_total - tied_total = V x d, about 19M at V 37,000, d 512")
    stated_tied: int = Field(description="the size the paper and the texts state for the base model (65M)")
    stated_untied: int = Field(description="the untied size the texts state (84M)")


class ParamsResponse(BaseModel):
    preset: str | None = Field(description="the preset the config started from (None: fields only)")
    encoder_decoder: EncoderDecoderCount | None = Field(
        None, description="preset=transformer-base only: the encoder-decoder count, tied and untied"
    )
    config: ParamsConfig
    counts: dict[str, int] = Field(
        description="gptscope.model.gpt.count_params: total (every trainable number), "
        "seed_convention (weight matrices and tables only), and parts"
    )
    token_embedding_share: float = Field(description="token embedding / seed_convention total")
    embedding_share: float = Field(description="(token + position embeddings) / seed_convention total")
    non_embedding: int = Field(description="seed-convention count without the embedding tables (Kaplan's N)")
    twelve_d_squared: int = Field(description="12 d^2: the weights of one block when d_mlp = 4 d")
    parts: list[Part] = Field(description="where every parameter sits (adds up to counts.total)")


class PresetRow(BaseModel):
    name: str
    label: str
    config: ParamsConfig
    total: int
    seed_convention: int
    per_block: int = Field(description="weights of one block (seed convention): attention 4 d^2 + MLP 2 d d_mlp")
    token_embedding_share: float
    non_embedding: int
    batch_size: int | None = Field(
        None,
        description="sequences per update in its paper (GPT-1 64, GPT-2 512) or, for the "
        "loaded model, its checkpoint; null when not known",
    )
    context: int | None = Field(None, description="tokens per training sequence (GPT-1 512, GPT-2 1,024)")
    tokens_per_update: int | None = Field(None, description="batch_size x context (GPT-1: 32,768)")


class PresetsResponse(BaseModel):
    presets: list[PresetRow]


class KvCacheResponse(BaseModel):
    n_layer: int
    n_head: int
    n_kv_head: int
    d_head: int
    context: int
    batch: int
    bytes_per_value: int
    group_size: int = Field(description="query heads per key/value head")
    bytes_per_token_mha: int
    bytes_per_token_gqa: int
    bytes_mha: int = Field(description="the cache at `context` tokens with one key/value head per query head")
    bytes_gqa: int = Field(description="the same with n_kv_head key/value heads")
    ratio: float = Field(description="bytes_mha / bytes_gqa")
    contexts: list[int]
    curve_mha: list[int] = Field(description="bytes at each context length")
    curve_gqa: list[int]
    texts: list[TextFactEntry] = Field(
        description="what the texts say beside it (multi-head latent attention, the other way to shrink the "
        "cache), each with its quote, as GET /api/v1/genealogy/texts serves it"
    )


class ScalingMark(BaseModel):
    label: str
    n: float = Field(description="non-embedding parameters")
    loss: float


class ScalingLawResponse(BaseModel):
    n_c: float
    alpha: float
    formula: str
    n: list[float]
    loss: list[float]
    marks: list[ScalingMark]
    per_tenfold: float = Field(description="how much ln L drops for every 10x in N: alpha ln 10")
    ratio_per_tenfold: float = Field(description="L(10 N) / L(N) = 10^-alpha")
    texts: list[TextFactEntry] = Field(
        description="what the texts say of the law's limits (the floor no model goes below, Chinchilla's "
        "balance of parameters and data), each with its quote, as GET /api/v1/genealogy/texts serves it"
    )


# --------------------------------------------------------------------------------------------
# Optimisers
# --------------------------------------------------------------------------------------------


class ContourGrid(BaseModel):
    x: list[float]
    y: list[float]
    z: list[list[float]] = Field(description="z[i][j] = loss at (x[j], y[i])")
    z_sqrt: list[list[float]] = Field(description="sqrt(z): its evenly spaced contours are evenly spaced ellipses")


class OptimizerPath(BaseModel):
    name: str
    label: str
    hyper: dict[str, float]
    x: list[float]
    y: list[float]
    loss: list[float]
    diverged: bool = Field(description="the path left |x|, |y| < 1e6 and stopped there")
    final_loss: float


class OptimizersResponse(BaseModel):
    formula: str
    a: float
    b: float
    minimum: XY
    start: XY
    steps: int
    sgd_stability_limit: float = Field(description="plain SGD diverges when lr > 2 / b")
    grid: ContourGrid
    paths: list[OptimizerPath]


class CurvesIndex(BaseModel):
    endpoints: list[dict[str, str]]
