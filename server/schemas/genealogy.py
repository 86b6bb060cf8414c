"""The JSON contract of GET /api/v1/genealogy: the models the texts narrate, from the 2017
Transformer to InstructGPT, with their changes, configs, parameter counts, data and results, and
the texts' worked examples. Pure data from gptscope.model.genealogy; every number is finite and
every fact names the seed text it is read from."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SourceRef(BaseModel):
    seed: str = Field(description="the seed text the fact is read from (a file of ../shared/seeds/)")
    paper: str | None = Field(description="the paper that text cites for the fact, or null where it cites none")


class ConfigEntry(BaseModel):
    name: str = Field(description="a GPTConfig field: n_layer, d_model, n_head, n_ctx or vocab_size")
    value: int = Field(description="its value in the config the parameters are counted from")
    from_text: bool = Field(description="true where a seed text gives the value; false where it is the cited paper's")
    source: SourceRef


class ChangeEntry(BaseModel):
    what: str = Field(description="what this model changed, in a few words")
    kind: str = Field(description="architecture or training/alignment, sorted as gpt-family-exercises.txt sorts them")
    source: SourceRef


class FactEntry(BaseModel):
    name: str = Field(description="a short identifier of the fact (batch, lambada_zero_shot, ...)")
    value: int | float | str = Field(description="the number (or word) the text gives")
    unit: str = Field(description="what the number counts, or empty")
    caption: str = Field(description="what the fact is, in the app's words")
    source: SourceRef


class ParamCount(BaseModel):
    total: int | None = Field(
        description="count_params' exact count of every trainable number (a tied matrix once); null for the "
        "encoder-decoder, which count_params does not build"
    )
    weights_only: int = Field(
        description="weight matrices and embedding tables only, the GPT-1 text's convention (GPT-1: 116,414,976)"
    )
    token_embedding: int = Field(description="vocab_size x d_model")
    embedding_share: float = Field(description="token_embedding / weights_only (GPT-1: 0.267, 'better than a quarter')")
    pieces: dict[str, int] = Field(
        description="the count's parts (count_params' keys; the Transformer's encoder, decoder)"
    )
    quoted: float | None = Field(description="the total a text quotes, or null where none does")
    quoted_source: SourceRef | None
    note: str = Field(description="why the counted and the quoted numbers differ, where they do")


class GenealogyModel(BaseModel):
    key: str
    name: str
    year: int
    shape: str = Field(description="encoder-decoder, decoder-only or encoder-only")
    config: list[ConfigEntry]
    params: ParamCount
    changes: list[ChangeEntry]
    facts: list[FactEntry]


class LambadaPoint(BaseModel):
    model: str
    params_quoted: float = Field(description="the parameters the LAMBADA table quotes (124M ... 1.5B)")
    params_counted: int = Field(description="count_params' total for the size's config")
    accuracy: float = Field(description="zero-shot LAMBADA accuracy in percent")


class ResultRow(BaseModel):
    label: str
    values: list[float] = Field(description="one per column, in the table's order")


class ResultTable(BaseModel):
    name: str
    caption: str
    columns: list[str]
    rows: list[ResultRow]
    source: SourceRef


class PerplexityDrop(BaseModel):
    vocab: int = Field(description="GPT-1's vocabulary (40,478)")
    perplexity: float = Field(description="its token-level perplexity after pretraining (18.4)")
    uniform_loss: float = Field(description="ln vocab: the loss of a uniform guess (10.6 nats)")
    pretrained_loss: float = Field(description="ln perplexity (2.9 nats)")
    drop: float = Field(description="their difference (7.7 nats)")
    source: SourceRef


class Underflow(BaseModel):
    n: int = Field(description="tokens in the target (100)")
    p: float = Field(description="the probability of each (0.1)")
    product_float32: float = Field(description="the product of the n probabilities in float32: 0, it underflows")
    log_sum: float = Field(description="the sum of their natural logarithms: -230.26, no underflow")
    log10_product: float = Field(description="log_sum / ln 10: the product is 10^-100")
    source: SourceRef


class LayerNormExample(BaseModel):
    x: float
    mean: float
    var: float
    eps: float
    std: float = Field(description="sqrt(var + eps) (0.370)")
    normalised: float = Field(description="(x - mean) / std (0.281)")
    source: SourceRef


class LossAt(BaseModel):
    p: float = Field(description="the probability put on the right token")
    loss: float = Field(description="-ln p in nats")
    source: SourceRef


class LossPoint(BaseModel):
    p: float = Field(description="the probability asked for (the query's loss_p)")
    loss: float = Field(description="-ln p in nats")


class WorkedExamples(BaseModel):
    perplexity_drop: PerplexityDrop
    underflow: Underflow
    layernorm: LayerNormExample
    losses: list[LossAt] = Field(description="the cross-entropy at the probabilities the texts quote")
    chosen: LossPoint = Field(description="the loss at the query's loss_p (default 0.9), marked on the curve")
    curve_p: list[float] = Field(description="probabilities on [0.005, 1] where the loss curve is drawn")
    curve_loss: list[float] = Field(description="-ln p at each of curve_p")


class GenealogyResponse(BaseModel):
    seeds: list[str] = Field(description="the seed texts every source names")
    models: list[GenealogyModel] = Field(
        description="in the texts' order: Transformer, GPT-1, BERT, GPT-2, GPT-3, InstructGPT"
    )
    lambada: list[LambadaPoint] = Field(description="GPT-2's four sizes")
    lambada_source: SourceRef
    tables: list[ResultTable] = Field(description="BERT's NSP ablation (Table 5 of its paper) and RoBERTa's")
    worked: WorkedExamples
