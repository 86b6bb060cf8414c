"""Data functions for GET /api/v1/genealogy: gptscope.model.genealogy -> pydantic models."""

from __future__ import annotations

from functools import lru_cache

import torch

from gptscope.model import genealogy as g
from gptscope.model import history
from gptscope.model import texts as texts_data
from gptscope.model.formulas import nll

from ..digits import COARSE, VALUE
from ..schemas import genealogy as schemas
from .common import rounded


def _src(s: g.Source) -> schemas.SourceRef:
    return schemas.SourceRef(seed=s.seed, paper=s.paper, quote=s.quote)


def _params(gen: g.Generation) -> schemas.ParamCount:
    c = gen.counted
    return schemas.ParamCount(
        total=c.get("total"),
        weights_only=c["seed_convention"],
        token_embedding=c["token_embedding"],
        embedding_share=g.embedding_share(gen),
        pieces=c,
        quoted=gen.quoted_params,
        quoted_source=_src(gen.quoted_params_source) if gen.quoted_params_source else None,
        note=gen.params_note,
    )


def _model(gen: g.Generation) -> schemas.GenealogyModel:
    return schemas.GenealogyModel(
        key=gen.key,
        name=gen.name,
        year=gen.year,
        shape=gen.shape,
        config=[
            schemas.ConfigEntry(name=v.name, value=int(v.value), from_text=v.from_text, source=_src(v.source))
            for v in g.config_values(gen)
        ],
        params=_params(gen),
        changes=[schemas.ChangeEntry(what=c.what, kind=c.kind, source=_src(c.source)) for c in gen.changes],
        facts=[fact_entry(f) for f in gen.facts],
    )


def fact_entry(f: g.Fact) -> schemas.FactEntry:
    """A model card's fact as GET /api/v1/genealogy serves it (the forward page's position stage shows one too)."""
    return schemas.FactEntry(
        name=f.name,
        value=f.value,
        unit=f.unit,
        caption=f.caption,
        source=_src(f.source),
        also=[_src(x) for x in f.also],
    )


def _tables() -> list[schemas.ResultTable]:
    return [
        schemas.ResultTable(
            name="bert_nsp_ablation",
            caption="BERT base with and without next-sentence prediction (dev scores)",
            columns=list(g.NSP_TASKS),
            rows=[schemas.ResultRow(label=k, values=list(v)) for k, v in g.NSP_ABLATION.items()],
            source=_src(g.Source(g.NOTES, g.DEVLIN)),
        ),
        schemas.ResultTable(
            name="roberta_nsp",
            caption="RoBERTa: sentence pairs with NSP against full sentences without it",
            columns=list(g.ROBERTA_TASKS),
            rows=[schemas.ResultRow(label=k, values=list(v)) for k, v in g.ROBERTA_NSP.items()],
            source=_src(g.Source(g.NOTES, g.LIU)),
        ),
    ]


def worked(
    vocab: int = 40_478,
    perplexity: float = 18.4,
    n: int = 100,
    p: float = 0.1,
    x: float = 0.099,
    mean: float = -0.005,
    var: float = 0.137,
    loss_p: float = 0.9,
) -> schemas.WorkedExamples:
    """The texts' worked examples at the given numbers (the defaults are the texts'). A perplexity above
    the vocabulary is allowed: a model worse than a uniform guess has a negative drop."""
    gpt1, learn = g.Source(g.GPT1_TEXT), g.Source(g.LEARN_TEXT)
    curve = g.loss_curve()
    return schemas.WorkedExamples(
        perplexity_drop=schemas.PerplexityDrop(**g.uniform_to_perplexity(vocab, perplexity), source=_src(gpt1)),
        underflow=schemas.Underflow(**g.underflow(n, p), source=_src(learn)),
        layernorm=schemas.LayerNormExample(**g.layernorm_example(x, mean, var), source=_src(g.Source(g.GPT2_TEXT))),
        chosen=schemas.LossPoint(p=loss_p, loss=nll(loss_p)),
        curve_p=curve["p"],
        curve_loss=curve["loss"],
        losses=[schemas.LossAt(p=x["p"], loss=x["loss"], source=_src(g.Source(x["seed"]))) for x in g.losses_at()],
    )


@lru_cache(maxsize=1)
def genealogy() -> schemas.GenealogyResponse:
    """The whole genealogy; it depends on nothing, so it is built once."""
    gens = g.generations()
    by_name = {x.name: x for x in gens}
    return schemas.GenealogyResponse(
        seeds=list(g.SEED_FILES),
        models=[_model(x) for x in gens],
        lambada=[
            schemas.LambadaPoint(
                model=name,
                params_quoted=quoted,
                params_counted=by_name[name].counted["total"],
                accuracy=g.LAMBADA[name],
            )
            for name, _, _, _, quoted in g.GPT2_SIZES
        ],
        lambada_summary=schemas.LambadaSummary(**g.lambada_summary()),
        lambada_source=_src(g.Source(g.NOTES, g.RADFORD_2019, "Model\tParams\tLAMBADA (zero-shot)")),
        tables=_tables(),
        worked=worked(),
    )


# --- From the perceptron to attention, and MoE's capacity ------------------------------------

HISTORY = g.Source(g.GPT2_TEXT)  # the text that tells this history


def _points(x: torch.Tensor, y: torch.Tensor) -> schemas.LabelledPoints:
    return schemas.LabelledPoints(x1=rounded(x[:, 0], VALUE), x2=rounded(x[:, 1], VALUE), label=y.tolist())


def _line(w1: float, w2: float, b: float) -> dict[str, list[float]]:
    x1, x2 = history.segment(w1, w2, b)
    return {"line_x1": [round(v, VALUE) for v in x1], "line_x2": [round(v, VALUE) for v in x2]}


def perceptron(data: str, n: int, epochs: int, lr: float, seed: int) -> schemas.PerceptronResponse:
    x, y, run = history.perceptron(data, n, epochs, lr, seed)
    return schemas.PerceptronResponse(
        data=data,
        lr=lr,
        points=_points(x, y),
        epochs=[
            schemas.PerceptronEpoch(
                epoch=e.epoch, w1=e.w[0], w2=e.w[1], b=e.b, **_line(*e.w, e.b), mistakes=e.mistakes, accuracy=e.accuracy
            )
            for e in run
        ],
        converged=run[-1].mistakes == 0,
        source=_src(HISTORY),
    )


def mlp(data: str, hidden: int, steps: int, lr: float, n: int, seed: int) -> schemas.MLPResponse:
    run = history.mlp(data, hidden, steps, lr, n, seed=seed)
    _, _, linear = history.perceptron(data, n, 100, 0.1, seed)
    k = run.grid_size
    grid = rounded(torch.tensor(run.grid).reshape(k, k), COARSE)
    return schemas.MLPResponse(
        data=data,
        hidden=hidden,
        points=_points(run.x, run.y),
        steps=run.steps_logged,
        loss=[round(v, VALUE) for v in run.losses],
        accuracy=run.accuracy,
        perceptron_accuracy=max(e.accuracy for e in linear),
        lines=[schemas.HiddenLine(w1=a, w2=b, b=c, **_line(a, b, c)) for a, b, c in run.hidden],
        grid_axis=rounded(torch.linspace(-1, 1, k), VALUE),
        grid=grid,
        source=_src(HISTORY),
    )


def reach(positions: int, kernel: int, cnn_layers: int, seed: int) -> schemas.ReachResponse:
    curves = history.reach(positions, kernel=kernel, cnn_layers=cnn_layers, seed=seed)
    return schemas.ReachResponse(
        positions=positions,
        kernel=kernel,
        cnn_layers=cnn_layers,
        curves=[
            schemas.ReachCurve(
                arch=arch,
                sensitivity=rounded(torch.tensor(v), VALUE),
                relative=rounded(torch.tensor(v) / max(max(v), 1e-30), VALUE),
                path=[history.path_length(arch, positions - 1 - t, kernel, cnn_layers) for t in range(positions)],
            )
            for arch, v in curves.items()
        ],
        source=_src(HISTORY),
    )


def moe(top_k: int) -> schemas.MoEResponse:
    return schemas.MoEResponse(
        base="GPT-2 XL",
        rows=[schemas.MoERow(**r) for r in g.moe_capacity(top_k=top_k)],
        claim="Mixture-of-Experts models hold 100x-1000x GPT-2 XL's parameters, yet each token runs through "
        "only a few experts, so its compute grows far less",
        source=_src(HISTORY),
    )


# --- The texts' other numbers -----------------------------------------------------------------


def _fact(f: texts_data.TextFact) -> schemas.TextFactEntry:
    return schemas.TextFactEntry(
        name=f.name,
        value=f.value,
        unit=f.unit,
        caption=f.caption,
        topic=f.topic,
        computed=f.computed,
        how=f.how,
        source=schemas.SourceRef(seed=f.seed, paper=f.paper, quote=f.quote),
    )


def text_fact(name: str) -> schemas.TextFactEntry:
    """One of the texts' facts by its name, as GET /api/v1/genealogy/texts serves it: for the panels
    that show a fact where the reader meets it (/learn's scaling law and KV cache)."""
    return _fact(texts_data.fact(name))


@lru_cache(maxsize=1)
def texts() -> schemas.TextsResponse:
    """The texts' numbers beyond the model cards, their worked examples (a tokenizer run once) and
    the papers they cite; it depends on nothing, so it is built once."""
    tok, learn, gpt2 = texts_data.tokenizer_example(), g.LEARN_TEXT, g.GPT2_TEXT

    def src(seed: str, quote: str) -> schemas.SourceRef:
        return schemas.SourceRef(seed=seed, paper=None, quote=quote)

    return schemas.TextsResponse(
        seeds=list(g.SEED_FILES),
        facts=[_fact(f) for f in texts_data.FACTS],
        papers=[
            schemas.PaperEntry(
                who=p.who,
                title=p.title,
                year=p.year,
                cited_for=p.cited_for,
                source=schemas.SourceRef(seed=p.seed, paper=p.reference, quote=p.quote),
            )
            for p in texts_data.PAPERS
        ],
        sentence_tokens=schemas.SentenceTokens(
            **{k: tok[k] for k in ("sentence", "encoding", "tokens", "token_count", "characters")},
            attention_work_ratio=tok["attention_work_ratio"],
            source=src(learn, "the GPT-5.x Tokenizer splits it into 15 tokens"),
        ),
        gpt2_tokens=schemas.Gpt2Tokens(
            text=tok["gpt2_text"],
            ids=tok["gpt2_ids"],
            target_ids=tok["gpt2_target_ids"],
            byte_tokens=tok["gpt2_byte_tokens"],
            merges=tok["gpt2_merges"],
            special_tokens=tok["gpt2_special_tokens"],
            vocab=tok["gpt2_vocab"],
            end_of_text_id=tok["gpt2_end_of_text_id"],
            rare_word=tok["rare_word"],
            rare_word_pieces=tok["rare_word_pieces"],
            source=src(gpt2, "token ids : [6109, 3626, 6100, 345]"),
        ),
        padding=schemas.PaddingExample(
            **texts_data.padding_example(), source=src(learn, "a batch containing lengths 10, 12, 15 and 500")
        ),
        adam_scale=schemas.AdamScaleExample(
            **texts_data.adam_scale_example(), source=src(learn, "gradients four orders of magnitude apart")
        ),
        **_runs(),
    )


def _runs() -> dict:
    """The examples the texts argue without a number, run: AdamW against an L2 penalty, what label
    smoothing does to perplexity, a deep stack with and without the residual path."""
    run = texts_data.adamw_against_l2()
    return {
        "adamw_l2": schemas.AdamwL2Example(
            **{**run, "rows": [schemas.AdamwL2Row(**r) for r in run["rows"]]},
            source=schemas.SourceRef(
                seed=g.GPT1_TEXT,
                paper=g.LOSHCHILOV,
                quote="parameters with small historical gradients get decayed harder than parameters with large ones",
            ),
        ),
        "smoothing": schemas.SmoothingTradeoff(
            **texts_data.smoothing_tradeoff(),
            source=schemas.SourceRef(
                seed=g.LEARN_TEXT, paper=g.VASWANI, quote="Label smoothing worsened perplexity while improving accuracy"
            ),
        ),
        "residual": schemas.ResidualExample(
            **texts_data.residual_gradients(),  # tiny norms kept as they are: the point is how small they get
            source=schemas.SourceRef(
                seed=g.EXERCISES, paper=None, quote="multiplying 96 small numbers gives a vanishingly small product"
            ),
        ),
    }
