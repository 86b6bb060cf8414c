"""Data functions for the training lessons on /learn: model.lessons numbers -> pydantic models.

Limits a Query(ge=..., le=...) cannot express (a token count, an index below the loaded model's
size) raise InputError naming the query field. Every float returned is finite."""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from gptscope.model import formulas
from gptscope.model import lessons as model_lessons

from ..schemas import lessons as schemas
from ..schemas.learn import Histogram
from ..service import ModelService
from .common import finite, json_float, model_batch, query_error
from .tokens import encode, token_bytes

MAX_LESSON_TOKENS = 48  # the text of a lesson, in the loaded model's tokens (teacher forcing runs one pass per prefix)
BAND = 2.0

# --------------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------------

INIT_LABELS = {
    "gpt1": ("GPT-1: N(0, 0.02)", "torch.nn.init.normal_(w, 0, 0.02)"),
    "xavier": ("Xavier (Glorot)", "torch.nn.init.xavier_normal_(w)"),
    "he": ("He (Kaiming), for ReLU", "torch.nn.init.kaiming_normal_(w, nonlinearity='relu')"),
}


def _histogram(values: torch.Tensor, half: float, bins: int = 40) -> Histogram:
    counts = torch.histc(values.clamp(-half, half).float(), bins=bins, min=-half, max=half)
    edges = formulas.linspace(-half, half, bins + 1)
    return Histogram(
        edges=[json_float(e) for e in edges],
        centers=[json_float((a + b) / 2) for a, b in itertools.pairwise(edges)],
        counts=[int(c) for c in counts.tolist()],
    )


def initialisation(width: int, rows: int, seed: int) -> schemas.InitResponse:
    schemes = []
    for i, (name, std) in enumerate(model_lessons.init_stds(width).items()):
        var = model_lessons.preactivation_variance(width, std)
        z = model_lessons.simulate_preactivations(name, width, rows, seed + i).flatten()
        hist = _histogram(z, 4.0)
        density = [math.exp(-c * c / (2 * var)) / math.sqrt(2 * math.pi * var) for c in hist.centers]
        label, call = INIT_LABELS[name]
        schemes.append(
            schemas.InitScheme(
                name=name,
                label=label,
                torch_init=call,
                std=std,
                variance_formula=var,
                std_formula=math.sqrt(var),
                band_sigmas=BAND / math.sqrt(var),
                variance_simulated=float(z.var()),
                share_in_band_simulated=float((z.abs() <= BAND).double().mean()),
                histogram=hist,
                density_formula=[json_float(d) for d in density],
            )
        )
    return schemas.InitResponse(width=width, rows=rows, seed=seed, band=BAND, schemes=schemes)


# --------------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------------


def _token(enc, i: int) -> schemas.TokenText:
    return schemas.TokenText(id=i, text=token_bytes(enc, i).decode("utf-8", errors="replace"))


def dropout(
    service: ModelService, p: float, size: int, token_id: int | None, seed: int, trials: int
) -> schemas.DropoutResponse:
    cfg = service.model.cfg
    if token_id is None:
        token_id = encode(service.encoding, " the", field="token_id", where="query")[0]
    if token_id >= cfg.vocab_size:
        raise query_error(
            "token_id", f"{token_id} is out of range; the loaded model's vocabulary has ids 0..{cfg.vocab_size - 1}"
        )
    if size > cfg.d_model:
        raise query_error("size", f"{size} is more than the loaded model's width d_model={cfg.d_model}")
    h = service.model.wte.weight[token_id, :size].detach().double()
    mask = model_lessons.dropout_mask(size, p, torch.Generator().manual_seed(seed))
    out = model_lessons.inverted_dropout(h, p, mask)
    avg, plain = model_lessons.dropout_average(h, p, trials, seed + 1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        t = F.dropout(h, p, training=True)
    survivors = t != 0
    diff = float((t[survivors] - h[survivors] / (1 - p)).abs().max()) if bool(survivors.any()) else 0.0
    return schemas.DropoutResponse(
        p=p,
        scale=1.0 / (1.0 - p),
        token_id=token_id,
        token=_token(service.encoding, token_id).text,
        h=h.tolist(),
        mask=[int(v) for v in mask.tolist()],
        out=out.tolist(),
        kept=int(mask.sum()),
        trials=trials,
        average_rescaled=avg.tolist(),
        average_plain=plain.tolist(),
        max_abs_error_rescaled=float((avg - h).abs().max()),
        torch_max_abs_diff=diff,
    )


# --------------------------------------------------------------------------------------------
# Adam's moments
# --------------------------------------------------------------------------------------------


def _adam_preset(label: str, d: dict) -> schemas.AdamPreset:
    return schemas.AdamPreset(
        label=label,
        lr=d.get("lr"),
        beta1=d["beta1"],
        beta2=d["beta2"],
        eps=d["eps"],
        memory_beta1=model_lessons.effective_memory(d["beta1"]),
        memory_beta2=model_lessons.effective_memory(d["beta2"]),
    )


def adam(beta1: float, beta2: float, eps: float, gradient: float, steps: int, ages: int) -> schemas.AdamResponse:
    mo = model_lessons.adam_moments_constant(gradient, steps, beta1, beta2, eps)
    mem2 = model_lessons.effective_memory(beta2)
    w2 = model_lessons.ema_weights(beta2, ages)
    gs = formulas.logspace(1e-12, 1.0, 61)
    torch_d = torch.optim.Adam([torch.zeros(1, requires_grad=True)]).defaults
    presets = [
        _adam_preset("Kingma and Ba's defaults", model_lessons.KINGMA_BA),
        _adam_preset("the Transformer (Vaswani et al.)", model_lessons.TRANSFORMER_ADAM),
        _adam_preset(
            "torch.optim.Adam's defaults",
            {"lr": torch_d["lr"], "beta1": torch_d["betas"][0], "beta2": torch_d["betas"][1], "eps": torch_d["eps"]},
        ),
    ]
    return schemas.AdamResponse(
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        gradient=gradient,
        memory_beta1=model_lessons.effective_memory(beta1),
        memory_beta2=mem2,
        ages=list(range(ages)),
        weights_beta1=finite(model_lessons.ema_weights(beta1, ages), "beta1"),
        weights_beta2=finite(w2, "beta2"),
        weight_within_memory_beta2=1.0 - beta2 ** math.ceil(mem2),
        steps=list(range(1, steps + 1)),
        m=mo["m"],
        m_hat=mo["m_hat"],
        v=mo["v"],
        v_hat=mo["v_hat"],
        step=finite(mo["step"], "eps"),
        step_uncorrected=finite(mo["step_uncorrected"], "eps"),
        eps_gradients=gs,
        eps_ratio=[model_lessons.eps_ratio(g, eps) for g in gs],
        presets=presets,
    )


# --------------------------------------------------------------------------------------------
# Embedding scale
# --------------------------------------------------------------------------------------------


def embedding_scale(d_model: int, positions: int, tokens: int, seed: int) -> schemas.EmbeddingScaleResponse:
    pe = model_lessons.sinusoidal_positions(positions, d_model)
    rows = model_lessons.embedding_rows(tokens, d_model, seed)
    norms = rows.norm(dim=1)
    scale = math.sqrt(d_model)
    pe_norms = pe.norm(dim=1)
    return schemas.EmbeddingScaleResponse(
        d_model=d_model,
        sqrt_d_model=scale,
        position_norm_formula=math.sqrt(d_model / 2),
        positions=list(range(positions)),
        position_norms=pe_norms.tolist(),
        embedding_norms=norms.tolist(),
        embedding_norms_scaled=(norms * scale).tolist(),
        embedding_norm_mean=float(norms.mean()),
        embedding_norm_scaled_mean=float(norms.mean() * scale),
        position_to_embedding=float(pe_norms.mean() / norms.mean()),
    )


# --------------------------------------------------------------------------------------------
# A lesson's text in the loaded model's tokens
# --------------------------------------------------------------------------------------------


def lesson_ids(service: ModelService, text: str, least: int) -> list[int]:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise query_error("text", "contains an unpaired surrogate; send valid Unicode") from None
    ids = encode(service.encoding, text, field="text", where="query")
    limit = min(MAX_LESSON_TOKENS, service.model.cfg.n_ctx + 1)
    if not least <= len(ids) <= limit:
        raise query_error("text", f"is {len(ids)} tokens in the loaded model's tokenizer; give {least} to {limit}")
    return ids


def masked_lm(service: ModelService, text: str, seed: int, rate: float) -> schemas.MaskedLmResponse:
    enc, V = service.encoding, service.model.cfg.vocab_size
    ids = lesson_ids(service, text, 1)
    causal, full = model_lessons.attention_masks(len(ids))
    acts = model_lessons.mlm_corrupt(ids, V, seed, rate)
    positions = []
    for i, (t, a) in enumerate(zip(ids, acts)):
        rid = int(a.split(":")[1]) if a and a.startswith("random") else None
        shown = "[MASK]" if a == "mask" else _token(enc, rid).text if rid is not None else _token(enc, t).text
        positions.append(
            schemas.MaskedLmPosition(
                index=i, original=_token(enc, t), action=a.split(":")[0] if a else None, shown=shown, random_id=rid
            )
        )
    return schemas.MaskedLmResponse(
        rate=rate,
        seed=seed,
        tokens=[_token(enc, t) for t in ids],
        causal=causal,
        bidirectional=full,
        visible_next_causal=model_lessons.visible_next_tokens(causal),
        visible_next_bidirectional=model_lessons.visible_next_tokens(full),
        positions=positions,
        picked=sum(a is not None for a in acts),
        shares=model_lessons.mlm_shares(100_000, V, seed, rate),
        cannot_generate="every position reads the whole sequence, the tokens to its right included, so nothing "
        "defines the probability of a next token given only the ones before it; writing text "
        "needs that left-to-right factorisation, which only the causal mask keeps",
    )


def teacher_forcing(service: ModelService, text: str) -> schemas.TeacherForcingResponse:
    enc = service.encoding
    ids = lesson_ids(service, text, 2)
    with service.run() as model:
        loss, prob, slow = model_lessons.teacher_forced_losses(model, ids)
    inputs, targets = model_lessons.shift(ids)
    return schemas.TeacherForcingResponse(
        tokens=[_token(enc, t) for t in ids],
        inputs=[_token(enc, t) for t in inputs],
        targets=[_token(enc, t) for t in targets],
        loss=loss,
        prob=prob,
        loss_one_prefix_at_a_time=slow,
        max_abs_diff=max(abs(a - b) for a, b in zip(loss, slow)),
        mean_loss=sum(loss) / len(loss),
        predictions=len(targets),
        forward_passes_one_at_a_time=len(targets),
    )


def head_gradients(service: ModelService, text: str, layer: int, head: int) -> schemas.HeadGradientsResponse:
    cfg, enc = service.model.cfg, service.encoding
    if layer >= cfg.n_layer:
        raise query_error("layer", f"{layer} is out of range; the loaded model has layers 0..{cfg.n_layer - 1}")
    if head >= cfg.n_head:
        raise query_error("head", f"{head} is out of range; the loaded model has heads 0..{cfg.n_head - 1}")
    ids = lesson_ids(service, text, 2)
    with service.run() as model:
        g = model_lessons.head_gradients(model, ids, layer, head)

    def grid(t: torch.Tensor) -> list[list[float]]:
        return [[json_float(v, 10) for v in row] for row in t.tolist()]

    return schemas.HeadGradientsResponse(
        layer=layer,
        head=head,
        tokens=[_token(enc, t) for t in ids],
        inputs=[_token(enc, t) for t in ids[:-1]],
        loss=g["loss"],
        causal=cfg.causal,
        A=grid(g["A"]),
        dA=grid(g["dA"]),
        V=grid(g["V"]),
        dV=grid(g["dV"]),
        G=grid(g["G"]),
        dA_formula_max_abs_diff=g["dA_formula_max_abs_diff"],
        dV_formula_max_abs_diff=g["dV_formula_max_abs_diff"],
        dV_row_norms=g["dV"].norm(dim=1).tolist(),
        attention_received=g["A"].sum(0).tolist(),
        norms=[[schemas.HeadNorm(**n) for n in row] for row in g["norms"]],
    )


# --------------------------------------------------------------------------------------------
# Tokens per update
# --------------------------------------------------------------------------------------------


def tokens_per_update(
    service: ModelService, batch: int, context: int, corpus_tokens: float, epochs: float, labelled_examples: int
) -> schemas.TokensPerUpdateResponse:
    per = model_lessons.tokens_per_update(batch, context)
    total = model_lessons.pretraining_predictions(corpus_tokens, epochs)
    rows = [
        schemas.TokensRow(label=label, batch=b, context=c, per_update=model_lessons.tokens_per_update(b, c))
        for label, (b, c) in (
            ("GPT-1", model_lessons.PAPER_BATCHES["gpt1"]),
            ("GPT-2", model_lessons.PAPER_BATCHES["gpt2"]),
        )
    ]
    mine = model_batch(service)
    if mine:
        rows.append(
            schemas.TokensRow(
                label=f"the loaded model ({service.name})",
                batch=mine[0],
                context=mine[1],
                per_update=model_lessons.tokens_per_update(*mine),
            )
        )
    return schemas.TokensPerUpdateResponse(
        batch=batch,
        context=context,
        per_update=per,
        corpus_tokens=corpus_tokens,
        epochs=epochs,
        total_predictions=total,
        updates=total / per,
        labelled_examples=labelled_examples,
        predictions_per_labelled_example=total / labelled_examples,
        models=rows,
    )
