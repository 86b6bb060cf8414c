"""Data functions for GET /api/v1/genealogy: gptscope.model.genealogy -> pydantic models."""

from __future__ import annotations

from functools import lru_cache

from gptscope.model import genealogy as g
from gptscope.model.formulas import nll

from ..schemas import genealogy as schemas


def _src(s: g.Source) -> schemas.SourceRef:
    return schemas.SourceRef(seed=s.seed, paper=s.paper)


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
        facts=[
            schemas.FactEntry(name=f.name, value=f.value, unit=f.unit, caption=f.caption, source=_src(f.source))
            for f in gen.facts
        ],
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
        lambada_source=_src(g.Source(g.NOTES, g.RADFORD_2019)),
        tables=_tables(),
        worked=worked(),
    )
