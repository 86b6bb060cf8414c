"""The JSON contract of GET /api/v1/genealogy: the models the texts narrate, from the 2017
Transformer to InstructGPT, with their changes, configs, parameter counts, data and results, and
the texts' worked examples. Pure data from gptscope.model.genealogy; every number is finite and
every fact names the seed text it is read from."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SourceRef(BaseModel):
    seed: str = Field(description="the seed text the fact is read from (a file of ../shared/seeds/)")
    paper: str | None = Field(description="the paper that text cites for this very fact, or null where it cites none")
    quote: str | None = Field(
        None,
        description="a short passage of the seed, verbatim, that gives the fact (null: the source is a whole "
        "table or section)",
    )


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
    also: list[SourceRef] = Field(description="other seed texts that give the same number")


class ParamCount(BaseModel):
    total: int | None = Field(
        description="the exact count of every trainable number (a tied matrix once): count_params', or for the "
        "encoder-decoder model.lessons.encoder_decoder_counts' (the count /params?preset=transformer-base gives)"
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


class LambadaSummary(BaseModel):
    """What the LAMBADA table shows, computed from it (the caption says only this)."""

    smallest: str = Field(description="the smallest size in the table (GPT-2 Small)")
    largest: str = Field(description="the largest (GPT-2 XL)")
    size_ratio: float = Field(description="the largest size's quoted parameters over the smallest's (1.5B / 124M)")
    tenfold_steps: float = Field(description="log10 of size_ratio: how many tenfold steps the table spans")
    step_ratios: list[float] = Field(description="each size's quoted parameters over the one before")
    accuracy_gain: float = Field(description="accuracy points from the smallest size to the largest")
    points_per_tenfold: float = Field(description="accuracy_gain / tenfold_steps")
    step_gains: list[float] = Field(description="accuracy points each size gained over the one before")
    every_step_gained: bool = Field(description="true when each larger size scored higher than the one before")


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
    product_float64: float = Field(
        description="the same product in float64 (exp of log_sum): 1e-100, which float64 still holds"
    )
    log_sum: float = Field(description="the sum of their natural logarithms: -230.26, no underflow")
    log10_product: float = Field(description="log_sum / ln 10: the product is 10^-100")
    source: SourceRef


class LayerNormExample(BaseModel):
    x: float
    mean: float
    var: float
    eps: float
    centred: float = Field(description="x - mean (0.104)")
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
    lambada_summary: LambadaSummary
    lambada_source: SourceRef
    tables: list[ResultTable] = Field(description="BERT's NSP ablation (Table 5 of its paper) and RoBERTa's")
    worked: WorkedExamples


# --- From the perceptron to attention, and MoE's capacity (the live examples) ----------------


class LabelledPoints(BaseModel):
    x1: list[float] = Field(description="each point's first coordinate, in [-1, 1]")
    x2: list[float] = Field(description="each point's second coordinate, in [-1, 1]")
    label: list[int] = Field(description="each point's class, 0 or 1")


class PerceptronEpoch(BaseModel):
    epoch: int = Field(description="1-based")
    w1: float = Field(description="the first weight at the end of the epoch")
    w2: float = Field(description="the second weight")
    b: float = Field(description="the bias; the boundary is w1 x1 + w2 x2 + b = 0")
    line_x1: list[float] = Field(
        description="the boundary's two ends inside [-1, 1]^2: their x1 (empty: no line there)"
    )
    line_x2: list[float] = Field(description="their x2")
    mistakes: int = Field(description="points misclassified, hence updates made, during the epoch")
    accuracy: float = Field(description="the share of points on their side of the boundary after the epoch")


class PerceptronResponse(BaseModel):
    data: str = Field(description="separable, xor or circles")
    lr: float = Field(description="the learning rate eta of the update w += eta (y - y_hat) x, b += eta (y - y_hat)")
    points: LabelledPoints
    epochs: list[PerceptronEpoch] = Field(description="one per epoch run; the run stops after an epoch with no mistake")
    converged: bool = Field(description="true when the last epoch made no mistake: a line separates the classes")
    source: SourceRef


class HiddenLine(BaseModel):
    w1: float
    w2: float
    b: float = Field(description="the hidden unit's line is w1 x1 + w2 x2 + b = 0; tanh bends across it")
    line_x1: list[float] = Field(description="the line's two ends inside [-1, 1]^2: their x1 (empty: it misses)")
    line_x2: list[float] = Field(description="their x2")


class MLPResponse(BaseModel):
    data: str = Field(description="separable, xor or circles")
    hidden: int = Field(description="hidden units (tanh) between the two weighted sums")
    points: LabelledPoints
    steps: list[int] = Field(description="the training steps the loss is logged at")
    loss: list[float] = Field(description="binary cross-entropy (nats) at each of steps")
    accuracy: float = Field(description="the share of points the trained MLP classifies right")
    perceptron_accuracy: float = Field(
        description="the best a perceptron reached on the same points in 100 epochs (1.0 only where a line exists)"
    )
    lines: list[HiddenLine] = Field(description="each hidden unit's line")
    grid_axis: list[float] = Field(description="the coordinates the probability grid is sampled at, both axes")
    grid: list[list[float]] = Field(
        description="P(class 1) at (x1 = grid_axis[j], x2 = grid_axis[i]) in row i, column j"
    )
    source: SourceRef


class ReachCurve(BaseModel):
    arch: str = Field(description="mlp, cnn, rnn or attention")
    sensitivity: list[float] = Field(
        description="||d out_T / d x_t|| for t = 1..T: how much the last position's output moves with each input"
    )
    relative: list[float] = Field(description="sensitivity over its largest value, for drawing the four on one axis")
    path: list[int | None] = Field(
        description="steps a signal takes from position t to the last one (null: it cannot get there in this layer)"
    )


class ReachResponse(BaseModel):
    positions: int
    kernel: int = Field(description="the convolution's width")
    cnn_layers: int = Field(description="stacked causal convolutions: they see (kernel - 1) x cnn_layers back")
    curves: list[ReachCurve]
    source: SourceRef


class MoERow(BaseModel):
    experts: int = Field(description="MLPs per layer (1: GPT-2 XL's dense MLP)")
    top_k: int = Field(description="experts each token goes through")
    total: int = Field(description="every stored weight, count_params' total")
    active: int = Field(description="the weights one token uses: total less the experts it skips")
    capacity_ratio: float = Field(description="total / GPT-2 XL's total")
    flops_per_token: int = Field(description="about 2 x the weights a token is multiplied by (position table excluded)")
    compute_ratio: float = Field(description="flops_per_token / GPT-2 XL's")


class MoEResponse(BaseModel):
    base: str = Field(description="the dense model whose MLPs are replaced: GPT-2 XL (48 layers, width 1600)")
    rows: list[MoERow]
    claim: str = Field(description="what the text says of it")
    source: SourceRef


# --- GET /api/v1/genealogy/texts: the texts' other numbers, examples and papers ---------------


class TextFactEntry(BaseModel):
    name: str = Field(description="a short identifier of the number (per_block, peak_lr, ...)")
    value: int | float | str = Field(description="the number as the text gives it")
    unit: str = Field(description="what it counts, or empty")
    caption: str = Field(description="what it is, in the app's words")
    topic: str = Field(description="what it is about: size, loss, schedule, tokens, optimiser, ...")
    computed: float | None = Field(description="the app's own value for it, where the app computes one")
    how: str = Field(description="how `computed` is computed (empty where there is none)")
    source: SourceRef


class PaperEntry(BaseModel):
    who: str = Field(description="the authors, as the app shortens them")
    title: str
    year: int = Field(description="the year the text gives for it")
    cited_for: str = Field(description="what the text cites it for, in the app's words")
    source: SourceRef


class SentenceTokens(BaseModel):
    """how-models-learn's example sentence, through a real encoding."""

    sentence: str
    encoding: str = Field(description="o200k_base: tiktoken's encoding for GPT-5 (the text used the GPT-5.x tokenizer)")
    tokens: list[str] = Field(description="the sentence's tokens, each decoded on its own")
    token_count: int = Field(description="how many tokens (the text: 15)")
    characters: int = Field(description="the sentence's length in characters (the text: 83)")
    attention_work_ratio: float = Field(
        description="(characters / token_count)^2: the attention work of one token per character, relative "
        "(attention is quadratic in length; the text: roughly thirty times)"
    )
    source: SourceRef


class Gpt2Tokens(BaseModel):
    """The GPT-2 text's walkthrough through GPT-2's own byte-level BPE."""

    text: str = Field(description="the walkthrough's input: Every effort moves you")
    ids: list[int] = Field(description="its token ids (the text: 6109, 3626, 6100, 345)")
    target_ids: list[int] = Field(description="the next-token targets: the ids shifted by one, then ' forward'")
    byte_tokens: int = Field(description="vocabulary entries that are single bytes (256)")
    merges: int = Field(description="entries made by merges (50,000)")
    special_tokens: int = Field(description="special tokens (<|endoftext|>: 1)")
    vocab: int = Field(description="byte_tokens + merges + special_tokens (50,257)")
    end_of_text_id: int = Field(description="the id of <|endoftext|>, the last entry")
    rare_word: str
    rare_word_pieces: list[str] = Field(description="how the rare word splits (' un', 'character', 'istically')")
    source: SourceRef


class PaddingExample(BaseModel):
    """how-models-learn's case for batching sequences of similar length."""

    lengths: list[int] = Field(description="the sequences' lengths in one batch (10, 12, 15, 500)")
    padded_to: int = Field(description="every sequence is padded to the longest")
    real_tokens: int = Field(description="tokens that are text")
    padded_tokens: int = Field(description="tokens the batch computes: padded_to x sequences")
    padding_share: float = Field(description="1 - real_tokens / padded_tokens: the work spent on padding")
    sequences: int = Field(description="sequences in each of the two batches compared (100)")
    short_length: int = Field(description="tokens per sequence in the first (10)")
    long_length: int = Field(description="tokens per sequence in the second (1,000)")
    short_batch_tokens: int
    long_batch_tokens: int = Field(description="the same number of sequences, a hundred times the tokens")
    source: SourceRef


class AdamScaleExample(BaseModel):
    """how-models-learn's two parameters with gradients four orders of magnitude apart, through Adam."""

    small_gradients: list[float] = Field(description="the first parameter's gradients (0.0001, 0.0002, 0.0002)")
    large_gradients: list[float] = Field(description="the second's (8, -1, 4)")
    small_ratio: float = Field(description="Adam's last step over the learning rate for the first (beta 0.9, 0.98)")
    large_ratio: float = Field(
        description="the same for the second: under 1 because its gradients partly cancel (the -1)"
    )
    small_steady: float = Field(description="a steady gradient of the first's size (2e-4)")
    large_steady: float = Field(description="a steady gradient of the second's size (4)")
    small_steady_ratio: float = Field(description="Adam's step over the learning rate at that steady gradient: ~1")
    large_steady_ratio: float = Field(description="the same for the second: ~1, the same step")
    orders_of_magnitude: float = Field(description="log10(large_steady / small_steady)")
    eps: float = Field(description="Adam's epsilon here (the Transformer's 1e-9)")
    source: SourceRef


class AdamwL2Row(BaseModel):
    gradient: float = Field(description="the size of the gradients this weight sees, alternating in sign")
    adam: float = Field(description="the weight after the run with no decay (it starts at 1)")
    adam_l2: float = Field(description="with the decay added to the gradient (an L2 penalty; torch's Adam)")
    adamw: float = Field(description="with the decay applied apart from Adam's step (AdamW)")
    pulled_l2: float = Field(description="1 - adam_l2 / adam: how far the L2 penalty pulled it towards 0")
    pulled_adamw: float = Field(description="1 - adamw / adam: the same for AdamW")


class AdamwL2Example(BaseModel):
    """The GPT-1 text's case for decoupled weight decay, run on two weights (model.formulas.adam_step)."""

    steps: int
    lr: float
    weight_decay: float
    rows: list[AdamwL2Row] = Field(description="a weight seeing small gradients, then one seeing large ones")
    source: SourceRef


class SmoothingTradeoff(BaseModel):
    """Why smoothing worsens perplexity without costing accuracy: the best smoothed model's numbers."""

    epsilon: float = Field(description="the smoothing (the Transformer's 0.1)")
    vocab: int = Field(description="the vocabulary (37,000)")
    p_true: float = Field(description="the most a smoothed model should give the right token: 1 - eps + eps / V")
    p_other: float = Field(description="what it gives every other token: eps / V")
    nll_true: float = Field(description="-ln p_true: what it pays even when right (a one-hot model pays 0)")
    perplexity_true: float = Field(description="1 / p_true: its perplexity on tokens it gets right (one-hot: 1)")
    top_token_unchanged: bool = Field(description="true: its most likely token is still the right one")
    floor: float = Field(description="the loss against the smoothed target no model beats: its entropy")
    source: SourceRef


class ResidualExample(BaseModel):
    """The exercises' residual argument, run on a stack of random layers with small Jacobians."""

    depth: int
    width: int
    gain: float = Field(description="the weights' scale: N(0, gain^2 / width), so each layer shrinks its input")
    layers: list[int] = Field(description="1 .. depth")
    plain: list[float] = Field(description="|d(u . y_l) / dx| for y = F(x) stacked: a product of small factors")
    residual: list[float] = Field(description="the same for y = x + F(x): the identity keeps it from vanishing")
    source: SourceRef


class TextsResponse(BaseModel):
    seeds: list[str] = Field(description="the seed texts every source names")
    facts: list[TextFactEntry] = Field(
        description="the texts' numbers that no model of GET /api/v1/genealogy carries, each with its quote"
    )
    papers: list[PaperEntry] = Field(description="the papers the texts cite, with the year each gives")
    sentence_tokens: SentenceTokens
    gpt2_tokens: Gpt2Tokens
    padding: PaddingExample
    adam_scale: AdamScaleExample
    adamw_l2: AdamwL2Example
    smoothing: SmoothingTradeoff
    residual: ResidualExample
