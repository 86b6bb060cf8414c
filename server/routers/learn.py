"""Curves and schedules: learning-rate schedules, GELU, loss, label smoothing, the sqrt(d_k) scale,
sizes (parameters, KV cache, scaling law) and optimisers on a ravine. Pure functions in
model/formulas.py; every limit is a 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ..deps import Service
from ..explain import learn
from ..schemas import learn as schemas
from ..schemas.common import ERROR_RESPONSES

MAX_QK_NUMBERS = 2_000_000

router = APIRouter(tags=["curves"])

Points = Annotated[int, Query(ge=2, le=4000, description="how many points on the curve")]
DEFAULT_LOGITS = "2,1,0.5,0,-1"


@router.get("/curves", response_model=schemas.CurvesIndex, summary="Every curve endpoint the /learn page draws")
def index() -> schemas.CurvesIndex:
    return learn.curves_index()


@router.get(
    "/schedules/lr",
    response_model=schemas.ScheduleResponse,
    responses=ERROR_RESPONSES,
    summary="A learning-rate schedule: the Transformer's, GPT-1's, or the loaded model's own",
)
def lr_schedule(
    service: Service,
    kind: Annotated[
        Literal["transformer", "gpt1", "model"],
        Query(
            description="transformer: d_model^-0.5 * min(t^-0.5, t * warmup^-1.5); gpt1: linear warmup then cosine; "
            "model: the loaded checkpoint's recorded schedule, with its per-update history"
        ),
    ] = "model",
    d_model: Annotated[int | None, Query(ge=1, le=65536, description="transformer: width (default 512)")] = None,
    warmup: Annotated[
        int | None, Query(ge=0, le=10_000_000, description="warmup updates (transformer 4,000; gpt1 2,000)")
    ] = None,
    max_lr: Annotated[float | None, Query(gt=0, le=10, description="warmup_cosine peak (gpt1 2.5e-4)")] = None,
    total_steps: Annotated[
        int | None, Query(ge=1, le=100_000_000, description="last step (default 100,000; model: its own)")
    ] = None,
    min_lr: Annotated[float | None, Query(ge=0, le=10, description="warmup_cosine end value (gpt1 0)")] = None,
    cooldown: Annotated[
        float | None,
        Query(
            gt=0,
            le=1,
            description="model whose schedule is warmup_stable_decay: the share of the run the rate falls over "
            "(default: its recorded one)",
        ),
    ] = None,
    points: Points = 400,
) -> schemas.ScheduleResponse:
    return learn.lr_schedule(
        service,
        kind,
        d_model=d_model,
        warmup=warmup,
        max_lr=max_lr,
        total_steps=total_steps,
        min_lr=min_lr,
        cooldown=cooldown,
        points=points,
    )


@router.get(
    "/curves/gelu",
    response_model=schemas.GeluResponse,
    responses=ERROR_RESPONSES,
    summary="GELU (exact and tanh), ReLU and their derivatives, with the minimum and GELU'(-1)",
)
def gelu(
    x_min: Annotated[float, Query(ge=-20, le=20)] = -4.0,
    x_max: Annotated[float, Query(ge=-20, le=20)] = 4.0,
    points: Points = 401,
) -> schemas.GeluResponse:
    return learn.gelu(x_min, x_max, points)


@router.get(
    "/curves/cross-entropy",
    response_model=schemas.CrossEntropyResponse,
    responses=ERROR_RESPONSES,
    summary="-ln p against p, uniform baselines ln V, and the softmax cross-entropy gradient p - q",
)
def cross_entropy(
    service: Service,
    vocab_size: Annotated[
        int | None,
        Query(ge=2, le=100_000_000, description="V for the uniform baseline ln V (default: the loaded model's)"),
    ] = None,
    points: Points = 200,
    logits: Annotated[
        str, Query(max_length=2000, description="2 to 64 comma-separated scores, each within +-100")
    ] = DEFAULT_LOGITS,
    target: Annotated[int, Query(ge=0, le=63, description="index of the true token among the logits")] = 0,
    epsilon: Annotated[float, Query(ge=0, le=1, description="label smoothing of the target (0: one-hot)")] = 0.0,
) -> schemas.CrossEntropyResponse:
    return learn.cross_entropy(service, vocab_size, points, logits, target, epsilon)


@router.get(
    "/curves/label-smoothing",
    response_model=schemas.LabelSmoothingResponse,
    responses=ERROR_RESPONSES,
    summary="The loss floor label smoothing sets: the entropy of the smoothed target",
)
def label_smoothing(
    epsilon: Annotated[float, Query(ge=0, le=1)] = 0.1,
    vocab_size: Annotated[int, Query(ge=2, le=100_000_000)] = 37_000,
    points: Points = 400,
) -> schemas.LabelSmoothingResponse:
    return learn.label_smoothing(epsilon, vocab_size, points)


@router.get(
    "/curves/softmax-scale",
    response_model=schemas.SoftmaxScaleResponse,
    responses=ERROR_RESPONSES,
    summary="Random q.k before and after dividing by sqrt(d_k); softmax temperature and shift invariance",
)
def softmax_scale(
    d_k: Annotated[int, Query(ge=1, le=1024, description="key/query width")] = 64,
    samples: Annotated[
        int, Query(ge=100, le=100_000, description=f"random (q, k) pairs; samples x d_k at most {MAX_QK_NUMBERS:,}")
    ] = 20_000,
    seed: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    n_keys: Annotated[int, Query(ge=2, le=64, description="keys in the example attention row")] = 8,
    logits: Annotated[
        str, Query(max_length=2000, description="2 to 64 comma-separated scores, each within +-100")
    ] = DEFAULT_LOGITS,
    temperature: Annotated[float, Query(ge=0.05, le=20)] = 0.5,
    shift: Annotated[float, Query(ge=-1000, le=1000, description="added to every logit")] = 100.0,
) -> schemas.SoftmaxScaleResponse:
    if samples * d_k > MAX_QK_NUMBERS:  # bounded work per request
        raise learn.query_error("samples", f"samples x d_k is {samples * d_k:,}; the limit is {MAX_QK_NUMBERS:,}")
    return learn.softmax_scale(d_k, samples, seed, n_keys, logits, temperature, shift)


@router.get(
    "/params",
    response_model=schemas.ParamsResponse,
    responses=ERROR_RESPONSES,
    summary="Exact and seed-convention parameter counts of a preset or any config (gptscope.model.gpt.count_params)",
)
def params(
    service: Service,
    preset: Annotated[
        Literal[tuple(learn.preset_names())] | None,  # type: ignore[valid-type]  # the schema lists them
        Query(
            description="model (the loaded one), a training preset, gpt1, gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3"
        ),
    ] = None,
    vocab_size: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
    n_ctx: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
    n_layer: Annotated[int | None, Query(ge=1, le=1000)] = None,
    n_head: Annotated[int | None, Query(ge=1, le=1024)] = None,
    d_model: Annotated[int | None, Query(ge=1, le=65536)] = None,
    d_mlp: Annotated[int | None, Query(ge=0, le=262_144, description="0: 4 * d_model (8 d / 3 for SwiGLU)")] = None,
    bias: bool | None = None,
    norm: Literal["pre", "post", "both"] | None = None,
    tie_weights: bool | None = None,
    pos: Annotated[
        Literal["learned", "rope", "none"] | None, Query(description="rope and none have no position table")
    ] = None,
    norm_type: Literal["layernorm", "rmsnorm"] | None = None,
    mlp: Annotated[
        Literal["gelu", "swiglu"] | None, Query(description="swiglu: three matrices (gate, up, down)")
    ] = None,
    n_kv_head: Annotated[
        int | None, Query(ge=1, le=1024, description="key/value heads (grouped-query attention)")
    ] = None,
    n_expert: Annotated[int | None, Query(ge=0, le=256, description="experts per block (0: one dense MLP)")] = None,
    top_k_experts: Annotated[int | None, Query(ge=1, le=256)] = None,
) -> schemas.ParamsResponse:
    overrides = dict(
        vocab_size=vocab_size,
        n_ctx=n_ctx,
        n_layer=n_layer,
        n_head=n_head,
        d_model=d_model,
        d_mlp=d_mlp,
        bias=bias,
        norm=norm,
        tie_weights=tie_weights,
        pos=pos,
        norm_type=norm_type,
        mlp=mlp,
        n_kv_head=n_kv_head,
        n_expert=n_expert,
        top_k_experts=top_k_experts,
    )
    return learn.params(service, preset, overrides)


@router.get(
    "/params/presets",
    response_model=schemas.PresetsResponse,
    summary="Parameter counts of the loaded model, GPT-1, the GPT-2 sizes and GPT-3",
)
def params_presets(service: Service) -> schemas.PresetsResponse:
    return learn.presets(service)


@router.get(
    "/curves/kv-cache",
    response_model=schemas.KvCacheResponse,
    responses=ERROR_RESPONSES,
    summary="KV-cache memory against context length: multi-head versus grouped-query attention",
)
def kv_cache(
    n_layer: Annotated[int, Query(ge=1, le=1000)] = 32,
    n_head: Annotated[int, Query(ge=1, le=1024, description="query heads")] = 32,
    n_kv_head: Annotated[
        int, Query(ge=1, le=1024, description="key/value heads (grouped-query); must divide n_head")
    ] = 8,
    d_head: Annotated[int, Query(ge=1, le=4096)] = 128,
    context: Annotated[int, Query(ge=1, le=10_000_000, description="tokens held in the cache")] = 4096,
    batch: Annotated[int, Query(ge=1, le=4096, description="sequences generated at once")] = 1,
    bytes_per_value: Annotated[int, Query(ge=1, le=8, description="2 for float16/bfloat16, 4 for float32")] = 2,
    points: Annotated[int, Query(ge=2, le=1000)] = 65,
) -> schemas.KvCacheResponse:
    return learn.kv_cache(n_layer, n_head, n_kv_head, d_head, context, batch, bytes_per_value, points)


@router.get(
    "/curves/scaling-law",
    response_model=schemas.ScalingLawResponse,
    responses=ERROR_RESPONSES,
    summary="Kaplan et al.'s power law L = (N / 8.8e13)^-0.076, with known models marked",
)
def scaling_law(
    service: Service,
    n_min: Annotated[float, Query(ge=1e3, le=1e15)] = 1e5,
    n_max: Annotated[float, Query(ge=1e3, le=1e15)] = 1e12,
    n_c: Annotated[float, Query(ge=1e6, le=1e20)] = learn.KAPLAN_N_C,
    alpha: Annotated[float, Query(ge=0.001, le=1)] = learn.KAPLAN_ALPHA,
    points: Points = 200,
) -> schemas.ScalingLawResponse:
    return learn.scaling_law(service, n_min, n_max, n_c, alpha, points)


@router.get(
    "/curves/optimizers",
    response_model=schemas.OptimizersResponse,
    responses=ERROR_RESPONSES,
    summary="SGD, momentum, Adam, AdamW and Muon stepping on a narrow ravine: contour grid and paths",
)
def optimizers(
    a: Annotated[float, Query(ge=0.001, le=100, description="curvature along x (the shallow floor)")] = 0.05,
    b: Annotated[float, Query(ge=0.001, le=100, description="curvature along y (the steep walls)")] = 4.0,
    x0: Annotated[float, Query(ge=-10, le=10, description="the bottom of the ravine")] = 2.0,
    y0: Annotated[float, Query(ge=-10, le=10)] = 0.5,
    start_x: Annotated[float, Query(ge=-10, le=10)] = -4.0,
    start_y: Annotated[float, Query(ge=-10, le=10)] = 2.0,
    steps: Annotated[int, Query(ge=1, le=1000)] = 80,
    lr_sgd: Annotated[float, Query(gt=0, le=10)] = 0.45,
    lr_momentum: Annotated[float, Query(gt=0, le=10)] = 0.1,
    momentum: Annotated[float, Query(ge=0, lt=1)] = 0.9,
    lr_adam: Annotated[float, Query(gt=0, le=10, description="Adam's and AdamW's")] = 0.2,
    beta1: Annotated[float, Query(ge=0, lt=1)] = 0.9,
    beta2: Annotated[float, Query(ge=0, lt=1)] = 0.999,
    weight_decay: Annotated[float, Query(ge=0, le=1, description="AdamW's decoupled decay")] = 0.1,
    lr_muon: Annotated[float, Query(gt=0, le=10, description="Muon's step (each direction moves by this much)")] = 0.15,
    grid: Annotated[int, Query(ge=10, le=200, description="contour grid points per side")] = 61,
) -> schemas.OptimizersResponse:
    return learn.optimizers(
        a=a,
        b=b,
        x0=x0,
        y0=y0,
        start_x=start_x,
        start_y=start_y,
        steps=steps,
        lr_sgd=lr_sgd,
        lr_momentum=lr_momentum,
        momentum=momentum,
        lr_adam=lr_adam,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        lr_muon=lr_muon,
        grid=grid,
    )
