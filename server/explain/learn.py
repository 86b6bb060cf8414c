"""Data functions for the curves and schedules endpoints: model.formulas numbers -> pydantic models.

Limits a Query(ge=..., le=...) cannot express (one field against another, a list in a string)
raise InputError naming the field. Every float returned is finite."""

from __future__ import annotations

import functools
import itertools
import math

import torch

from gptscope.model import formulas
from gptscope.model import lessons as model_lessons
from gptscope.model.gpt import PRESETS, GPTConfig, count_params
from gptscope.model.schedules import DEFAULT_COOLDOWN, SCHEDULE_KINDS

from ..schemas import learn as schemas
from ..service import ModelService
from .common import finite, json_float, model_batch, query_error
from .genealogy import text_fact

# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def parse_floats(text: str, field: str, lo: int = 2, hi: int = 64, bound: float = 100.0) -> list[float]:
    """A comma-separated list of numbers from a query field, e.g. logits=2,1,0.1."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise query_error(field, f"{text[:40]!r} is not a comma-separated list of numbers, e.g. 2,1,0.1") from None
    if not lo <= len(values) <= hi:
        raise query_error(field, f"give {lo} to {hi} numbers; got {len(values)}")
    if not all(math.isfinite(v) and abs(v) <= bound for v in values):
        raise query_error(field, f"every number must be between -{bound:g} and {bound:g}")
    return values


# --------------------------------------------------------------------------------------------
# Learning-rate schedules
# --------------------------------------------------------------------------------------------

TRANSFORMER_DEFAULTS = dict(d_model=512, warmup=4000, total_steps=100_000)
GPT1_DEFAULTS = dict(max_lr=2.5e-4, warmup=2000, total_steps=100_000, min_lr=0.0)
HISTORY_POINTS = 4000  # a longer history is thinned evenly (first and last update kept)


def lr_schedule(
    service: ModelService,
    kind: str,
    *,
    d_model: int | None,
    warmup: int | None,
    max_lr: float | None,
    total_steps: int | None,
    min_lr: float | None,
    points: int,
    cooldown: float | None = None,
) -> schemas.ScheduleResponse:
    asked = dict(d_model=d_model, warmup=warmup, max_lr=max_lr, total_steps=total_steps, min_lr=min_lr)
    given: dict[str, float] = {k: v for k, v in asked.items() if v is not None}
    p: dict[str, float]
    recorded: dict | None = None
    if kind == "transformer":
        p = {**TRANSFORMER_DEFAULTS, **{k: v for k, v in given.items() if k in TRANSFORMER_DEFAULTS}}
        if p["warmup"] < 1:
            raise query_error("warmup", "the Transformer schedule needs warmup >= 1 (it divides by warmup^1.5)")
    elif kind == "gpt1":
        p = {**GPT1_DEFAULTS, **{k: v for k, v in given.items() if k in GPT1_DEFAULTS}}
    else:  # model
        schedule = service.meta.schedule
        if not isinstance(schedule, dict) or schedule.get("kind") not in SCHEDULE_KINDS:
            raise query_error(
                "kind", "the loaded model's checkpoint.json records no warmup_cosine or warmup_stable_decay schedule"
            )
        recorded = schedule
        p = {k: recorded[k] for k in ("max_lr", "min_lr", "warmup", "total_steps")}
        p.update({k: v for k, v in given.items() if k in p})
        if recorded["kind"] == "warmup_stable_decay":
            p["cooldown"] = float(cooldown if cooldown is not None else recorded.get("cooldown", DEFAULT_COOLDOWN))
    if cooldown is not None and "cooldown" not in p:
        raise query_error(
            "cooldown", "only a warmup_stable_decay schedule has a cooldown: the loaded model's recorded one"
        )
    if p["warmup"] > p["total_steps"]:
        raise query_error(
            "warmup", f"{p['warmup']} is more than total_steps={p['total_steps']}; warmup must fit in the run"
        )
    if "max_lr" in p and p["min_lr"] > p["max_lr"]:
        raise query_error(
            "min_lr", f"{p['min_lr']:g} is above max_lr={p['max_lr']:g}; the schedule decays from max_lr down to min_lr"
        )

    total, w = int(p["total_steps"]), int(p["warmup"])
    steps = formulas.schedule_steps(total, points, extra=(w - 1, w))
    lr, function, formula, params = _curve(kind, p, steps)
    lr = finite(lr, "d_model" if kind == "transformer" else "max_lr")
    i_peak = max(range(len(lr)), key=lambda i: (lr[i], steps[i] == w))  # a tie goes to the end of warmup
    resp = schemas.ScheduleResponse(
        kind=kind,
        function=function,
        formula=formula,
        params=params,
        step=steps,
        lr=lr,
        peak=schemas.SchedulePoint(step=steps[i_peak], lr=lr[i_peak]),
        end=schemas.SchedulePoint(step=steps[-1], lr=lr[-1]),
    )
    if recorded is not None:  # kind "model"
        resp.checkpoint_schedule = recorded
        resp.history, resp.history_max_abs_diff = _history(service, p, recorded)
    return resp


def _curve(kind: str, p: dict[str, float], steps: list[int]) -> tuple[list[float], str, str, schemas.ScheduleParams]:
    """The rates at `steps` of the schedule `p` describes, the function that gave them, its formula
    and its parameters."""
    total, w = int(p["total_steps"]), int(p["warmup"])
    if kind == "transformer":
        lr = formulas.lr_curve("transformer", steps, d_model=int(p["d_model"]), warmup=w)
        function = "gptscope.model.schedules.transformer"
        formula = "lr(t) = d_model^-0.5 * min(t^-0.5, t * warmup^-1.5), t = max(step, 1)"
        params = schemas.ScheduleParams(d_model=p["d_model"], warmup=w, total_steps=total)
    elif "cooldown" in p:  # the trainer's wsd
        lr = formulas.lr_curve(
            "warmup_stable_decay",
            steps,
            max_lr=p["max_lr"],
            warmup=w,
            total_steps=total,
            min_lr=p["min_lr"],
            cooldown=p["cooldown"],
        )
        function = "gptscope.model.schedules.warmup_stable_decay"
        formula = (
            "lr = max_lr * (step + 1) / warmup while step < warmup; then max_lr until "
            "s = max(warmup, round(total_steps * (1 - cooldown))); then a straight line from max_lr at s "
            "to min_lr at total_steps"
        )
        params = schemas.ScheduleParams(
            warmup=w, max_lr=p["max_lr"], min_lr=p["min_lr"], total_steps=total, cooldown=p["cooldown"]
        )
    else:
        lr = formulas.lr_curve(
            "warmup_cosine", steps, max_lr=p["max_lr"], warmup=w, total_steps=total, min_lr=p["min_lr"]
        )
        function = "gptscope.model.schedules.warmup_cosine"
        formula = (
            "lr = max_lr * (step + 1) / warmup while step < warmup; then "
            "min_lr + (max_lr - min_lr) * (1 + cos(pi * (step - warmup) / (total_steps - warmup))) / 2"
        )
        params = schemas.ScheduleParams(warmup=w, max_lr=p["max_lr"], min_lr=p["min_lr"], total_steps=total)
    return lr, function, formula, params


def _history(service: ModelService, p: dict, recorded: dict) -> tuple[schemas.LrHistory | None, float | None]:
    recs = [r for r in service.history if isinstance(r, dict) and "lr" in r and "step" in r]
    if not recs:
        return None, None
    diff = None
    if all(p[k] == recorded.get(k, p[k]) for k in p):  # the curve is the recorded schedule: how close was training?
        planned = _curve("model", p, [int(r["step"]) - 1 for r in recs])[0]  # update k used the schedule's step k - 1
        diff = max(abs(float(r["lr"]) - want) for r, want in zip(recs, planned))
    if len(recs) > HISTORY_POINTS:
        idx = sorted({round(i * (len(recs) - 1) / (HISTORY_POINTS - 1)) for i in range(HISTORY_POINTS)})
        recs = [recs[i] for i in idx]
    recs = [r for r in recs if math.isfinite(float(r["lr"])) and math.isfinite(float(r.get("loss", 0.0)))]
    hist = schemas.LrHistory(
        step=[int(r["step"]) - 1 for r in recs],
        lr=[float(r["lr"]) for r in recs],
        loss=[float(r.get("loss", 0.0)) for r in recs],
    )
    return hist, diff


# --------------------------------------------------------------------------------------------
# GELU
# --------------------------------------------------------------------------------------------


def gelu(x_min: float, x_max: float, points: int) -> schemas.GeluResponse:
    if x_max <= x_min:
        raise query_error("x_max", f"{x_max:g} must be greater than x_min={x_min:g}")
    xs = sorted(
        {json_float(x) for x in formulas.linspace(x_min, x_max, points)} | ({-1.0} if x_min <= -1.0 <= x_max else set())
    )
    ge = [formulas.gelu_exact(x) for x in xs]
    gt = [formulas.gelu_tanh(x) for x in xs]
    gap = [b - a for a, b in zip(ge, gt)]

    def worst(lo: float, hi: float) -> schemas.XY:
        inside = [i for i, x in enumerate(xs) if lo <= x <= hi] or list(range(len(xs)))
        i = max(inside, key=lambda j: abs(gap[j]))
        return schemas.XY(x=json_float(xs[i]), y=float(gap[i]))

    mx, mv = formulas.gelu_minimum("exact")
    tx, tv = formulas.gelu_minimum("tanh")
    return schemas.GeluResponse(
        x=xs,
        gelu_exact=ge,
        gelu_tanh=gt,
        relu=[formulas.relu(x) for x in xs],
        d_gelu_exact=[formulas.gelu_exact_grad(x) for x in xs],
        d_gelu_tanh=[formulas.gelu_tanh_grad(x) for x in xs],
        d_relu=[formulas.relu_grad(x) for x in xs],
        gap=gap,
        max_abs_gap=worst(-math.inf, math.inf),
        max_abs_gap_band=worst(-2.0, 2.0),
        minimum=schemas.XY(x=mx, y=mv),
        minimum_tanh=schemas.XY(x=tx, y=tv),
        derivative_at_minus_one=schemas.XY(x=-1.0, y=formulas.gelu_exact_grad(-1.0)),
        relu_derivative_at_minus_one=schemas.XY(x=-1.0, y=formulas.relu_grad(-1.0)),
        torch_gelu="gelu_exact = F.gelu(x); gelu_tanh = F.gelu(x, approximate='tanh'); relu = F.relu(x)",
    )


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------

GPT1_VOCAB, GPT2_VOCAB, GPT1_PERPLEXITY = 40_478, 50_257, 18.4


def _baseline(label: str, v: int) -> schemas.Baseline:
    return schemas.Baseline(label=label, vocab_size=v, loss=math.log(v))


def cross_entropy(
    service: ModelService, vocab_size: int | None, points: int, logits: str, target: int, epsilon: float
) -> schemas.CrossEntropyResponse:
    V = vocab_size or service.model.cfg.vocab_size
    lg = parse_floats(logits, "logits")
    if target >= len(lg):
        raise query_error("target", f"{target} is out of range; the {len(lg)} logits have indices 0..{len(lg) - 1}")
    ps = sorted(set(formulas.logspace(1e-4, 1.0, points)) | {0.25, 1.0})
    g = formulas.xent_gradient(lg, target, epsilon)
    baselines = [
        _baseline(f"this model's vocabulary ({service.name})", service.model.cfg.vocab_size),
        _baseline("GPT-1 (40,478 tokens)", GPT1_VOCAB),
        _baseline("GPT-2 (50,257 tokens)", GPT2_VOCAB),
    ]
    marks = [
        schemas.LossMark(
            label="p = 0.25: the true token gets a quarter of the probability",
            p=0.25,
            loss=formulas.nll(0.25),
            short=f"p = 0.25: {formulas.nll(0.25):.3f} nats",
        ),
        schemas.LossMark(
            label=f"uniform guess over {V:,} tokens: p = 1/V",
            p=1.0 / V,
            loss=math.log(V),
            short=f"p = 1/{V:,}: {math.log(V):.2f} nats",
        ),
        schemas.LossMark(
            label="GPT-1's reported perplexity 18.4: as unsure as a pick among 18.4 tokens",
            p=1.0 / GPT1_PERPLEXITY,
            loss=math.log(GPT1_PERPLEXITY),
            short=f"GPT-1, perplexity 18.4: {math.log(GPT1_PERPLEXITY):.2f} nats",
        ),
    ]
    return schemas.CrossEntropyResponse(
        p=ps,
        loss=[json_float(formulas.nll(p)) for p in ps],
        vocab_size=V,
        uniform=_baseline(f"{V:,} tokens", V),
        baselines=baselines,
        marks=marks,
        gradient=schemas.GradientExample(
            logits=lg,
            target=target,
            epsilon=epsilon,
            p=g["p"],
            q=g["q"],
            grad=g["grad"],
            grad_sum=json_float(g["grad_sum"], 15),
            loss=g["loss"],
        ),
    )


def label_smoothing(epsilon: float, vocab_size: int, points: int) -> schemas.LabelSmoothingResponse:
    V = vocab_size
    q_true, q_other = 1.0 - epsilon + epsilon / V, epsilon / V
    ps = formulas.linspace(0.001, 0.999, points)
    if 0.001 < q_true < 0.999:
        ps = sorted(set(ps) | {q_true})
    eps_grid = formulas.linspace(0.0, 1.0, 51)
    return schemas.LabelSmoothingResponse(
        epsilon=epsilon,
        vocab_size=V,
        q_true=q_true,
        q_other=q_other,
        floor=formulas.label_smoothing_floor(epsilon, V),
        floor_by_sum=formulas.label_smoothing_floor_by_sum(epsilon, V) if V <= 2_000_000 else None,
        p=ps,
        loss_smoothed=finite([formulas.smoothed_loss(p, epsilon, V) for p in ps], "vocab_size"),
        loss_one_hot=[formulas.nll(p) for p in ps],
        best_p=q_true,
        epsilons=eps_grid,
        floors=[json_float(formulas.label_smoothing_floor(e, V)) for e in eps_grid],
    )


# --------------------------------------------------------------------------------------------
# Softmax and scale
# --------------------------------------------------------------------------------------------

SWEEP_D_K = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def _hist(values: torch.Tensor, half_width: float, bins: int = 41) -> schemas.Histogram:
    v = values.clamp(-half_width, half_width)
    counts = torch.histc(v, bins=bins, min=-half_width, max=half_width)
    edges = formulas.linspace(-half_width, half_width, bins + 1)
    return schemas.Histogram(
        edges=[json_float(e) for e in edges],
        centers=[json_float((a + b) / 2) for a, b in itertools.pairwise(edges)],
        counts=[int(c) for c in counts.tolist()],
    )


@functools.lru_cache(maxsize=64)
def _saturation(n_keys: int, seed: int) -> dict[str, tuple[float, ...]]:
    """The saturation sweep, which depends on nothing else: computed once per (n_keys, seed), as
    the page asks again for every change of d_k or of the logits (0.4-1.6 s on 2 cores)."""
    sweep = formulas.saturation_sweep(SWEEP_D_K, n_keys, rows=256, seed=seed)
    return {k: tuple(v) for k, v in sweep.items()}  # immutable: the cached copy is shared


def softmax_scale(
    d_k: int, samples: int, seed: int, n_keys: int, logits: str, temperature: float, shift: float
) -> schemas.SoftmaxScaleResponse:
    raw, scaled = formulas.dot_product_scores(d_k, samples, seed)
    row_raw, row_scaled = formulas.attention_row(d_k, n_keys, seed)
    sweep = _saturation(n_keys, seed)
    lg = parse_floats(logits, "logits")
    w_raw, w_scaled = formulas.softmax(row_raw), formulas.softmax(row_scaled)
    p1, pt, ps = formulas.softmax(lg), formulas.softmax(lg, temperature), formulas.softmax([v + shift for v in lg])
    return schemas.SoftmaxScaleResponse(
        d_k=d_k,
        samples=samples,
        seed=seed,
        variance_raw=float(raw.var()),
        variance_scaled=float(scaled.var()),
        hist_raw=_hist(raw, 4 * math.sqrt(d_k)),
        hist_scaled=_hist(scaled, 4.0),
        row_scores_raw=row_raw,
        row_scores_scaled=row_scaled,
        row_weights_raw=w_raw,
        row_weights_scaled=w_scaled,
        row_max_weight_raw=max(w_raw),
        row_max_weight_scaled=max(w_scaled),
        sweep_d_k=SWEEP_D_K,
        sweep_max_weight_raw=sweep["max_weight_raw"],
        sweep_max_weight_scaled=sweep["max_weight_scaled"],
        logits=lg,
        temperature=temperature,
        probs_t1=p1,
        probs_temperature=pt,
        shift=shift,
        probs_shifted=ps,
        shift_max_abs_diff=max(abs(a - b) for a, b in zip(p1, ps)),
    )


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------

PRESET_LABELS = {
    "model": "the loaded model",
    "tiny": "tiny (tests)",
    "cpu": "cpu preset",
    "gpt1": "GPT-1",
    "gpt2": "GPT-2 small",
    "gpt2-medium": "GPT-2 medium",
    "gpt2-large": "GPT-2 large",
    "gpt2-xl": "GPT-2 XL",
    "gpt3": "GPT-3 175B",
}
CONFIG_FIELDS = tuple(schemas.ParamsConfig.model_fields)  # the GPTConfig fields /params answers with
OVERRIDABLE = tuple(k for k in CONFIG_FIELDS if k != "gelu")  # gelu is answered, not asked for: it changes no count


def preset_names() -> list[str]:
    return ["model", *PRESETS, *formulas.REFERENCE_SHAPES, "transformer-base"]


# Vaswani et al.'s base model: 6 + 6 layers of width 512, 8 heads, FFN 2,048, a 37,000-token shared
# vocabulary; the paper states 65M parameters, the texts about 84M with a separate output matrix.
TRANSFORMER_BASE = dict(vocab_size=37_000, n_ctx=512, n_layer=6, n_head=8, d_model=512, d_mlp=2048, tie_weights=True)
ENC_DEC_FIELDS = ("vocab_size", "n_layer", "n_head", "d_model", "d_mlp", "tie_weights")
STATED_TIED, STATED_UNTIED = 65_000_000, 84_000_000


def encoder_decoder_params(overrides: dict) -> schemas.ParamsResponse:
    """preset=transformer-base: model.lessons.encoder_decoder_counts, tied and untied, as a ParamsResponse."""
    other = next((k for k in OVERRIDABLE if k not in ENC_DEC_FIELDS and overrides.get(k) is not None), None)
    if other:
        raise query_error(other, f"the encoder-decoder preset transformer-base takes only {', '.join(ENC_DEC_FIELDS)}")
    p = {**TRANSFORMER_BASE, **{k: v for k, v in overrides.items() if v is not None}}
    if p["d_model"] % p["n_head"]:
        raise query_error("n_head", f"d_model={p['d_model']} is not divisible by n_head={p['n_head']}")
    d_ff = p["d_mlp"] or 4 * p["d_model"]
    tied = model_lessons.encoder_decoder_counts(p["vocab_size"], p["d_model"], p["n_layer"], d_ff, tie=True)
    untied = model_lessons.encoder_decoder_counts(p["vocab_size"], p["d_model"], p["n_layer"], d_ff, tie=False)
    c = tied if p["tie_weights"] else untied
    d, L = p["d_model"], p["n_layer"]
    weights = c["embedding"] + c["output"] + L * (4 * d * d + 2 * d * d_ff) + L * (8 * d * d + 2 * d * d_ff)
    counts = {
        "total": c["total"],
        "seed_convention": weights,
        "token_embedding": c["embedding"],
        "position_embedding": 0,
        "encoder": c["encoder"],
        "decoder": c["decoder"],
        "per_block": c["decoder_layer"],
        "per_block_seed_convention": 8 * d * d + 2 * d * d_ff,
        "attention_weights_per_block": 8 * d * d,
        "mlp_weights_per_block": 2 * d * d_ff,
        "unembedding": c["output"],
        "biases_and_norms": c["total"] - weights,
    }
    parts = [
        ("shared embedding (V × d): source, target" + (" and output" if p["tie_weights"] else ""), c["embedding"]),
        (f"encoder ({L} layers: self-attention, FFN)", c["encoder"]),
        (f"decoder ({L} layers: self-attention, cross-attention, FFN)", c["decoder"]),
        ("output matrix (untied, V × d)", c["output"]),
    ]
    cfg = schemas.ParamsConfig(
        vocab_size=p["vocab_size"],
        n_ctx=p["n_ctx"],
        n_layer=L,
        n_head=p["n_head"],
        d_model=d,
        d_mlp=d_ff,
        bias=True,
        norm="post",
        tie_weights=p["tie_weights"],
        pos="sinusoidal",
        mlp="relu",
        n_kv_head=p["n_head"],
        gelu=None,  # its FFN is a ReLU
    )
    return schemas.ParamsResponse(
        preset="transformer-base",
        config=cfg,
        counts=counts,
        token_embedding_share=c["embedding"] / weights,
        embedding_share=(c["embedding"] + c["output"]) / weights,
        non_embedding=weights - c["embedding"] - c["output"],
        twelve_d_squared=12 * d * d,
        parts=[schemas.Part(label=lab, count=n, share=n / c["total"]) for lab, n in parts if n],
        encoder_decoder=schemas.EncoderDecoderCount(
            encoder_layer=c["encoder_layer"],
            decoder_layer=c["decoder_layer"],
            encoder=c["encoder"],
            decoder=c["decoder"],
            embedding=c["embedding"],
            tied_total=tied["total"],
            untied_total=untied["total"],
            difference=untied["total"] - tied["total"],
            stated_tied=STATED_TIED,
            stated_untied=STATED_UNTIED,
        ),
    )


def _preset_dict(service: ModelService, name: str) -> dict:
    if name == "model":
        return dict(service.model.cfg.to_dict().items())
    if name in PRESETS:
        return dict(PRESETS[name])
    if name in formulas.REFERENCE_SHAPES:
        return dict(formulas.REFERENCE_SHAPES[name])
    raise query_error("preset", f"unknown preset {name!r}; choose one of {', '.join(preset_names())}")


def _config(base: dict, overrides: dict) -> GPTConfig:
    d = {**base, **{k: v for k, v in overrides.items() if v is not None}}
    changed = any(overrides.get(k) is not None for k in ("d_model", "mlp"))
    if changed and overrides.get("d_mlp") is None and "d_mlp" in base:
        d["d_mlp"] = 0  # a new width or MLP kind gets the usual width (4d; 8d/3 for SwiGLU) unless d_mlp is given too
    if overrides.get("n_head") is not None and overrides.get("n_kv_head") is None and "n_kv_head" in base:
        d["n_kv_head"] = 0  # as many key/value heads as query heads unless given
    try:
        return GPTConfig(**d)
    except ValueError as e:
        msg = str(e)
        field = (
            ("n_kv_head" if "n_kv_head" in msg else "n_head")
            if "divisible" in msg
            else next((f for f in OVERRIDABLE if msg.startswith(f)), "d_model")
        )
        raise query_error(field, msg) from None


def _config_model(cfg: GPTConfig) -> schemas.ParamsConfig:
    fields = {k: getattr(cfg, k) for k in CONFIG_FIELDS}
    fields["gelu"] = cfg.gelu if cfg.mlp in ("gelu", "geglu") else None  # SwiGLU's gate is SiLU: no GELU to name
    return schemas.ParamsConfig(**fields)


def _shares(c: dict) -> tuple[float, float, int]:
    seed = c["seed_convention"]
    non_embedding = seed - c["token_embedding"] - c["position_embedding"] - c["unembedding"]
    return c["token_embedding"] / seed, (c["token_embedding"] + c["position_embedding"]) / seed, non_embedding


def params(service: ModelService, preset: str | None, overrides: dict) -> schemas.ParamsResponse:
    if preset == "transformer-base":
        return encoder_decoder_params(overrides)
    base = _preset_dict(service, preset) if preset else {}
    cfg = _config(base, overrides)
    counts = count_params(cfg)
    tok_share, emb_share, non_emb = _shares(counts)
    L = cfg.n_layer
    parts = [
        ("token embedding (V × d)", counts["token_embedding"]),
        ("position embedding (n_ctx × d)", counts["position_embedding"]),
        (
            "attention weights (4 d² per block)"
            if cfg.n_kv_head == cfg.n_head and cfg.n_head * cfg.d_head == cfg.d_model
            else "attention weights (2 d² + 2 d × n_kv_head d_head per block)"
            if cfg.n_head * cfg.d_head == cfg.d_model
            else "attention weights (2 d × n_head d_head + 2 d × n_kv_head d_head per block)",
            L * counts["attention_weights_per_block"],
        ),
        (
            (
                f"{'GeGLU' if cfg.mlp == 'geglu' else 'SwiGLU'} weights (3 d × d_mlp per block)"
                if cfg.gated
                else "MLP weights (2 d × d_mlp per block)"
            )
            if not cfg.n_expert
            else f"{cfg.n_expert} experts' weights + router (per block)",
            L * counts["mlp_weights_per_block"],
        ),
        ("unembedding (untied)", counts["unembedding"]),
        (
            "biases and norms"
            if cfg.bias or cfg.qkv_bias or cfg.attn_out_bias or cfg.mlp_bias
            else "norm gains (no biases)",
            counts["biases_and_norms"],
        ),
    ]
    parts_out = [schemas.Part(label=lab, count=n, share=n / counts["total"]) for lab, n in parts if n]
    return schemas.ParamsResponse(
        preset=preset,
        config=_config_model(cfg),
        counts=counts,
        token_embedding_share=tok_share,
        embedding_share=emb_share,
        non_embedding=non_emb,
        twelve_d_squared=12 * cfg.d_model**2,
        parts=parts_out,
    )


def presets(service: ModelService) -> schemas.PresetsResponse:
    rows = []
    for name in ["model", "gpt1", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3"]:
        cfg = _config(_preset_dict(service, name), {})
        c = count_params(cfg)
        tok_share, _, non_emb = _shares(c)
        label = f"{PRESET_LABELS[name]} ({service.name})" if name == "model" else PRESET_LABELS[name]
        batch = model_batch(service) if name == "model" else model_lessons.PAPER_BATCHES.get(name)
        rows.append(
            schemas.PresetRow(
                name=name,
                label=label,
                config=_config_model(cfg),
                total=c["total"],
                batch_size=batch[0] if batch else None,
                context=batch[1] if batch else None,
                tokens_per_update=model_lessons.tokens_per_update(*batch) if batch else None,
                seed_convention=c["seed_convention"],
                per_block=c["per_block_seed_convention"],
                token_embedding_share=tok_share,
                non_embedding=non_emb,
            )
        )
    return schemas.PresetsResponse(presets=rows)


def kv_cache(
    n_layer: int, n_head: int, n_kv_head: int, d_head: int, context: int, batch: int, bytes_per_value: int, points: int
) -> schemas.KvCacheResponse:
    if n_kv_head > n_head:
        raise query_error(
            "n_kv_head", f"{n_kv_head} is more than n_head={n_head}; each key/value head serves one or more query heads"
        )
    if n_head % n_kv_head:
        raise query_error(
            "n_kv_head",
            f"n_head={n_head} is not divisible by {n_kv_head}; every key/value head must serve the same number of query heads",
        )

    def size(kv: int, ctx: int) -> int:
        return formulas.kv_cache_bytes(n_layer, kv, d_head, ctx, batch, bytes_per_value)

    contexts = sorted({round(i * context / (points - 1)) for i in range(points)})
    return schemas.KvCacheResponse(
        n_layer=n_layer,
        n_head=n_head,
        n_kv_head=n_kv_head,
        d_head=d_head,
        context=context,
        batch=batch,
        bytes_per_value=bytes_per_value,
        group_size=n_head // n_kv_head,
        bytes_per_token_mha=size(n_head, 1) // batch,
        bytes_per_token_gqa=size(n_kv_head, 1) // batch,
        bytes_mha=size(n_head, context),
        bytes_gqa=size(n_kv_head, context),
        ratio=n_head / n_kv_head,
        contexts=contexts,
        curve_mha=[size(n_head, c) for c in contexts],
        curve_gqa=[size(n_kv_head, c) for c in contexts],
        texts=[text_fact("mla")],
    )


KAPLAN_N_C, KAPLAN_ALPHA = 8.8e13, 0.076


def scaling_law(
    service: ModelService, n_min: float, n_max: float, n_c: float, alpha: float, points: int
) -> schemas.ScalingLawResponse:
    if n_max <= n_min:
        raise query_error("n_max", f"{n_max:g} must be greater than n_min={n_min:g}")
    ns = formulas.logspace(n_min, n_max, points)
    marks = []
    for row in presets(service).presets:
        marks.append(
            schemas.ScalingMark(
                label=row.label, n=row.non_embedding, loss=formulas.kaplan_loss(row.non_embedding, n_c, alpha)
            )
        )
    return schemas.ScalingLawResponse(
        n_c=n_c,
        alpha=alpha,
        formula=f"L(N) = (N / {n_c:.3g})^-{alpha:g}  (N: non-embedding parameters; L: nats per token)",
        n=ns,
        loss=finite([formulas.kaplan_loss(n, n_c, alpha) for n in ns], "alpha"),
        marks=marks,
        per_tenfold=alpha * math.log(10),
        ratio_per_tenfold=10**-alpha,
        texts=[text_fact("loss_floor"), text_fact("compute_optimal")],
    )


# --------------------------------------------------------------------------------------------
# Optimisers
# --------------------------------------------------------------------------------------------


def optimizers(
    *,
    a: float,
    b: float,
    x0: float,
    y0: float,
    start_x: float,
    start_y: float,
    steps: int,
    lr_sgd: float,
    lr_momentum: float,
    momentum: float,
    lr_adam: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    grid: int,
    lr_muon: float = 0.15,
) -> schemas.OptimizersResponse:
    rv = formulas.Ravine(a=a, b=b, x0=x0, y0=y0)
    start = (start_x, start_y)
    runs = [
        ("sgd", "SGD", {"lr": lr_sgd}, lambda t, g, s: formulas.sgd_step(t, g, s, lr_sgd)),
        (
            "momentum",
            "SGD + momentum",
            {"lr": lr_momentum, "momentum": momentum},
            lambda t, g, s: formulas.momentum_step(t, g, s, lr_momentum, momentum),
        ),
        (
            "adam",
            "Adam",
            {"lr": lr_adam, "beta1": beta1, "beta2": beta2},
            lambda t, g, s: formulas.adam_step(t, g, s, lr_adam, beta1, beta2),
        ),
        (
            "adamw",
            "AdamW",
            {"lr": lr_adam, "beta1": beta1, "beta2": beta2, "weight_decay": weight_decay},
            lambda t, g, s: formulas.adamw_step(t, g, s, lr_adam, beta1, beta2, weight_decay=weight_decay),
        ),
        ("muon", "Muon", {"lr": lr_muon, "momentum": 0.9}, lambda t, g, s: formulas.muon_step(t, g, s, lr_muon, 0.9)),
    ]
    paths = []
    for name, label, hyper, update in runs:
        p = formulas.descend(rv, start, steps, update)
        paths.append(
            schemas.OptimizerPath(
                name=name,
                label=label,
                hyper=hyper,
                x=p["x"],
                y=p["y"],
                loss=p["loss"],
                diverged=p["diverged"],
                final_loss=p["loss"][-1],
            )
        )
    # the contour window holds the start, the minimum and every path (a runaway path is cut off)
    cap = 3 * max(abs(start_x), abs(start_y), abs(x0), abs(y0)) + 5
    xs = [start_x, x0] + [v for p in paths for v in p.x if abs(v) <= cap]
    ys = [start_y, y0] + [v for p in paths for v in p.y if abs(v) <= cap]
    mx, my = 0.1 * (max(xs) - min(xs)) + 0.5, 0.1 * (max(ys) - min(ys)) + 0.5
    gx = formulas.linspace(min(xs) - mx, max(xs) + mx, grid)
    gy = formulas.linspace(min(ys) - my, max(ys) + my, grid)
    z = [[rv.loss(x, y) for x in gx] for y in gy]
    return schemas.OptimizersResponse(
        formula=f"f(x, y) = 0.5 * ({a:g} (x - {x0:g})^2 + {b:g} (y - {y0:g})^2)",
        a=a,
        b=b,
        minimum=schemas.XY(x=x0, y=y0),
        start=schemas.XY(x=start_x, y=start_y),
        steps=steps,
        sgd_stability_limit=2.0 / b,
        grid=schemas.ContourGrid(x=gx, y=gy, z=z, z_sqrt=[[math.sqrt(v) for v in row] for row in z]),
        paths=paths,
    )


def curves_index() -> schemas.CurvesIndex:
    e = [
        ("/api/v1/schedules/lr?kind=transformer", "the original Transformer's learning-rate schedule"),
        ("/api/v1/schedules/lr?kind=gpt1", "GPT-1's warmup + cosine schedule"),
        ("/api/v1/schedules/lr?kind=model", "the loaded model's schedule and the learning rates it really used"),
        ("/api/v1/curves/gelu", "GELU (exact and tanh), ReLU and their derivatives"),
        ("/api/v1/curves/cross-entropy", "-ln p, uniform baselines, the softmax cross-entropy gradient p - q"),
        ("/api/v1/curves/label-smoothing", "the loss floor label smoothing sets"),
        ("/api/v1/curves/softmax-scale", "why attention divides scores by sqrt(d_k); temperature; shift invariance"),
        ("/api/v1/params?preset=gpt1", "parameter counts of any configuration"),
        ("/api/v1/params/presets", "parameter counts of GPT-1, GPT-2, GPT-3 and the loaded model"),
        ("/api/v1/curves/kv-cache", "KV-cache memory, multi-head versus grouped-query"),
        ("/api/v1/curves/scaling-law", "Kaplan's loss-versus-parameters power law"),
        ("/api/v1/curves/optimizers", "SGD, momentum, Adam, AdamW and Muon on a narrow ravine"),
        ("/api/v1/curves/initialisation", "N(0, 0.02) against Xavier and He, and the variance of a pre-activation"),
        ("/api/v1/curves/dropout", "dropout's mask and its 1/(1 - p) rescale on a real embedding row"),
        ("/api/v1/curves/adam", "Adam's moving averages: memory 1/(1 - beta), bias correction, epsilon"),
        ("/api/v1/params?preset=transformer-base", "the original encoder-decoder Transformer, tied and untied"),
        ("/api/v1/curves/embedding-scale", "embeddings times sqrt(d_model) against sinusoidal positions"),
        ("/api/v1/curves/masked-lm", "BERT's bidirectional mask and masked-LM corruption against GPT's causal mask"),
        ("/api/v1/curves/teacher-forcing", "inputs and targets one position apart, scored in one forward pass"),
        ("/api/v1/curves/head-gradients", "how the loss reaches an attention head: real gradients of the loaded model"),
        ("/api/v1/curves/tokens-per-update", "predictions per update and over pretraining, against SNLI"),
    ]
    return schemas.CurvesIndex(endpoints=[{"path": p, "what": w} for p, w in e])
