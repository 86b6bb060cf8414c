"""The genealogy the texts narrate: from the 2017 Transformer to InstructGPT.

Pure data and functions, no web code. Each model carries what it changed (sorted into
architecture or training/alignment the way gpt-family-exercises.txt sorts them), the config its
parameter count is computed from (gptscope.model.gpt.count_params, the function /api/v1/params
uses), its data, batch and context, and the results the texts quote. Every fact names the seed
text it comes from and, where the text cites one, the paper. A config value the texts do not give
(GPT-2 Medium's width, BERT's vocabulary, GPT-3's heads...) is marked ``from_text=False`` and
names the paper the text cites for that model: the count is still computed, the value is not the
texts'.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from .formulas import linspace, nll
from .gpt import GPTConfig, count_params
from .lessons import encoder_decoder_counts

NOTES = "gpt-bert-transformer-notes.txt"
EXERCISES = "gpt-family-exercises.txt"
GPT1_TEXT = "gpt1-genealogy.txt"
LEARN_TEXT = "how-models-learn.txt"
GPT2_TEXT = "llm-pretraining-for-generalists.txt"
SEED_FILES = (NOTES, EXERCISES, GPT1_TEXT, LEARN_TEXT, GPT2_TEXT)

VASWANI = "Vaswani et al., Attention Is All You Need (2017)"
RADFORD_2018 = "Radford et al., Improving Language Understanding by Generative Pre-Training (2018)"
RADFORD_2019 = "Radford et al., Language Models are Unsupervised Multitask Learners (2019)"
DEVLIN = "Devlin et al., BERT (2018), arXiv:1810.04805"
LIU = "Liu et al., RoBERTa (2019), arXiv:1907.11692"
LAN = "Lan et al., ALBERT (2020), arXiv:1909.11942"
XIONG = "Xiong et al., On Layer Normalization in the Transformer Architecture (2020)"
PRESS_WOLF = "Press and Wolf, Using the Output Embedding to Improve Language Models (2016)"
SZEGEDY = "Szegedy et al., Rethinking the Inception Architecture for Computer Vision (2015)"
MULLER = "Müller, Kornblith and Hinton, When Does Label Smoothing Help? (2019)"
INAN = "Inan, Khosravi and Socher, Tying Word Vectors and Word Classifiers (2016)"
LOSHCHILOV = "Loshchilov and Hutter, Fixing Weight Decay Regularization in Adam (2017)"
HENDRYCKS = "Hendrycks and Gimpel, Gaussian Error Linear Units (2016)"
BROWN = "Brown et al., Language Models are Few-Shot Learners (2020), the GPT-3 paper"


@dataclass(frozen=True)
class Source:
    seed: str  # the seed file the fact is read from
    paper: str | None = None  # the paper that text cites for this very fact, if it cites one
    quote: str | None = None  # a short passage of the seed, verbatim, that gives the fact


@dataclass(frozen=True)
class Fact:
    name: str
    value: float | int | str
    caption: str
    source: Source
    unit: str = ""
    also: tuple[Source, ...] = ()  # other texts that give the same number


@dataclass(frozen=True)
class Change:
    what: str
    kind: str  # "architecture" or "training/alignment"
    source: Source


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: int | str
    from_text: bool
    source: Source


@dataclass
class Generation:
    key: str
    name: str
    year: int
    shape: str  # encoder-decoder, decoder-only or encoder-only
    config: GPTConfig
    config_sources: dict[str, tuple[bool, Source]]
    quoted_params: float | None
    quoted_params_source: Source | None
    params_note: str
    changes: list[Change] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=dict)


def _cfg(vocab: int, ctx: int, layers: int, heads: int, width: int, **kw) -> GPTConfig:
    return GPTConfig(vocab_size=vocab, n_ctx=ctx, n_layer=layers, n_head=heads, d_model=width, **kw)


def transformer_count(cfg: GPTConfig) -> dict[str, int]:
    """The 2017 encoder-decoder counted with count_params' pieces: n_layer encoder blocks (attention +
    FFN), as many decoder blocks (the same plus a cross-attention of four d x d matrices), one shared
    embedding table (the output reuses it), sinusoidal positions (no parameters): weights only, the
    way the GPT-1 text counts. ``total`` adds the biases and LayerNorms (lessons.encoder_decoder_counts,
    the count /api/v1/params?preset=transformer-base gives)."""
    c = count_params(cfg)
    encoder = cfg.n_layer * c["per_block_seed_convention"]
    decoder = cfg.n_layer * (c["per_block_seed_convention"] + c["attention_weights_per_block"])
    full = encoder_decoder_counts(cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_mlp, tie=cfg.tie_weights)
    return {
        "total": full["total"],
        "seed_convention": c["token_embedding"] + encoder + decoder,
        "token_embedding": c["token_embedding"],
        "encoder": encoder,
        "decoder": decoder,
    }


def bert_additions(cfg: GPTConfig) -> dict[str, int]:
    """What BERT has beyond the GPT-style stack count_params counts: two segment rows, the
    embedding LayerNorm, the pooler (d x d + bias) that feeds NSP's two-way classifier, and the MLM
    head's transform (d x d + bias + LayerNorm) and output bias (one per vocabulary entry)."""
    d, v = cfg.d_model, cfg.vocab_size
    parts = {
        "segment_embedding": 2 * d,
        "embedding_norm": 2 * d,
        "pooler": d * d + d,
        "nsp_head": 2 * d + 2,
        "mlm_transform": d * d + d + 2 * d,
        "mlm_output_bias": v,
    }
    return {**parts, "total": sum(parts.values())}


def _src(seed: str, paper: str | None = None, quote: str | None = None) -> Source:
    return Source(seed, paper, quote)


def _config_sources(text: Source, paper: Source, given: set[str]) -> dict[str, tuple[bool, Source]]:
    names = ("n_layer", "d_model", "n_head", "n_ctx", "vocab_size")
    return {n: (True, text) if n in given else (False, paper) for n in names}


GPT2_SIZES = (  # name, layers, width, heads, the params the LAMBADA table quotes
    ("GPT-2 Small", 12, 768, 12, 124e6),
    ("GPT-2 Medium", 24, 1024, 16, 355e6),
    ("GPT-2 Large", 36, 1280, 20, 774e6),
    ("GPT-2 XL", 48, 1600, 25, 1.5e9),
)
LAMBADA = {"GPT-2 Small": 45.0, "GPT-2 Medium": 55.0, "GPT-2 Large": 58.0, "GPT-2 XL": 63.0}  # zero-shot %
LAMBADA_ROWS = (  # the notes' table, row by row, as the quotes of the facts above
    "GPT-2 Small\t124M\t45.0%",
    "GPT-2 Medium\t355M\t55.0%",
    "GPT-2 Large\t774M\t58.0%",
    "GPT-2 XL\t1.5B\t63.0%",
)

NSP_TASKS = ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD")
NSP_ABLATION = {"BERT_BASE": (84.4, 88.4, 86.7, 92.7, 88.5), "No NSP": (83.9, 84.9, 86.5, 92.6, 87.9)}
ROBERTA_TASKS = ("SQuAD 1.1", "SQuAD 2.0", "MNLI", "RACE")
ROBERTA_NSP = {"SEGMENT-PAIR + NSP": (90.4, 78.7, 84.0, 64.2), "FULL-SENTENCES, no NSP": (90.4, 79.1, 84.7, 64.8)}


def _notes_vaswani(quote: str) -> Source:
    return _src(NOTES, VASWANI, quote)


def _learn_vaswani(quote: str, paper: str | None = VASWANI) -> Source:
    return _src(LEARN_TEXT, paper, quote)


def _gpt1_text(quote: str, paper: str | None = RADFORD_2018) -> Source:
    return _src(GPT1_TEXT, paper, quote)


def _notes_radford(quote: str) -> Source:
    return _src(NOTES, RADFORD_2018, quote)


_TRANSFORMER_FACTS = [
    Fact(
        "d_ff", 2048, "width of the feed-forward layer inside each block", _notes_vaswani("FFN inner dimension\t2048")
    ),
    Fact("d_head", 64, "each of the 8 heads' width (8 x 64 = 512)", _notes_vaswani("With 8 heads of dimension 64")),
    Fact("adam_beta1", 0.9, "Adam's first-moment decay", _notes_vaswani("Adam (β1=0.9, β2=0.98)")),
    Fact("adam_beta2", 0.98, "Adam's second-moment decay", _notes_vaswani("Adam (β1=0.9, β2=0.98)")),
    Fact(
        "warmup_steps",
        4000,
        "steps of linear warmup before the inverse-square-root decay",
        _notes_vaswani("warmup 4000 steps"),
        also=(_learn_vaswani("where $w=4000$ is the number of warmup steps"),),
    ),
    Fact(
        "norm",
        "post",
        "LayerNorm after the residual add: large gradients near the output at the start, which the "
        "warmup tames (pre-norm later made warmup matter far less)",
        _learn_vaswani("post-norm Transformers can have unusually large gradients near the output layers", XIONG),
    ),
    Fact("dropout", 0.1, "dropout on sublayer outputs and embeddings", _notes_vaswani("Dropout\t0.1")),
    Fact(
        "dropout_ablation",
        "dropping it hurt",
        "what the paper's ablations found when the 0.1 dropout was taken out: the model got worse",
        _learn_vaswani("the paper's ablations show that dropping it hurt"),
    ),
    Fact(
        "label_smoothing",
        0.1,
        "the share of the target's mass spread over the other tokens (the method is Szegedy et al.'s; "
        "this value is the Transformer's)",
        _notes_vaswani("Label smoothing\t0.1"),
    ),
    Fact(
        "label_smoothing_origin",
        "Szegedy et al.",
        "who introduced label smoothing: to stop a model chasing a certainty the data do not have",
        _learn_vaswani("introduced label smoothing to discourage that extreme", SZEGEDY),
    ),
    Fact(
        "label_smoothing_effect",
        "perplexity worse, BLEU better",
        "what smoothing did in the Transformer: a worse likelihood but better translations",
        _learn_vaswani("Label smoothing worsened perplexity while improving accuracy and BLEU."),
    ),
    Fact(
        "label_smoothing_later",
        "a worse teacher",
        "the later finding: a smoothed model passes less to a student in distillation",
        _learn_vaswani("it can make a trained network a worse teacher for knowledge distillation", MULLER),
    ),
    Fact(
        "tying_result",
        "better perplexity, fewer parameters",
        "what sharing one matrix between a language model's input and output did (Inan et al. found the same independently)",
        _learn_vaswani("tying the input and output matrices could improve perplexity", PRESS_WOLF),
        also=(_learn_vaswani("arrived independently at closely related weight-sharing results", INAN),),
    ),
    Fact(
        "tying",
        "three-way",
        "one matrix serves the source embedding, the target embedding and the output layer",
        _learn_vaswani("shares a single matrix across both embedding layers and the pre-softmax transformation"),
    ),
    Fact(
        "params_untied",
        84e6,
        "the size the text gives with a separate output matrix (65M + about 19M)",
        _learn_vaswani("would take the model to roughly $84$ million"),
        "parameters",
    ),
    Fact(
        "pairs_en_de",
        4.5e6,
        "English-German sentence pairs of the training data",
        _learn_vaswani("used about $4.5$ million sentence pairs"),
        "pairs",
    ),
    Fact("pairs_en_fr", 36e6, "English-French sentence pairs", _learn_vaswani("dataset about $36$ million"), "pairs"),
    Fact(
        "batch_tokens",
        25_000,
        "source tokens per batch (and as many target tokens)",
        _learn_vaswani("roughly $25{,}000$ source tokens"),
        "tokens",
    ),
    Fact(
        "train_steps",
        100_000,
        "steps the base model trained for",
        _learn_vaswani("The base model trained for $100{,}000$ steps"),
        "steps",
    ),
    Fact("train_hours", 12, "hours the base model took to train", _learn_vaswani("Twelve hours later"), "hours"),
    Fact(
        "uniform_loss",
        10.5,
        "the loss when all 37,000 tokens are equally likely: where training starts",
        _learn_vaswani("tokens incurs $10.5$"),
        "nats",
    ),
]


# Why positions are added at all: attention alone cannot tell one word order from another. The notes'
# own explanation (their "dog bites man" example), so no paper is named; the forward page's position
# stage runs it on the prompt (server/explain/stages.py: permutation_check).
PERMUTATION = Fact(
    "attention_without_positions",
    "permutation-invariant",
    "attention with no position signal treats a sentence as a bag of tokens: reorder the words and each one "
    "gets the same output as before, only in the new order, which is why position encodings are added",
    _src(NOTES, None, "Attention is permutation-invariant — it has no notion of word order."),
    also=(_src(NOTES, None, "“Dog bites man” and “man bites dog” produce identical attention patterns."),),
)


def _transformer() -> Generation:
    s = _src(NOTES, VASWANI)
    learn = _src(LEARN_TEXT, VASWANI)

    return Generation(
        key="transformer",
        name="Transformer (base)",
        year=2017,
        shape="encoder-decoder",
        config=_cfg(37_000, 512, 6, 8, 512, pos="none", norm="post"),
        config_sources={
            **_config_sources(s, s, {"n_layer", "d_model", "n_head"}),
            "vocab_size": (True, learn),
            "n_ctx": (False, _src(NOTES, VASWANI + ": sinusoidal positions have no fixed length; 512 is ours")),
        },
        quoted_params=65e6,
        quoted_params_source=_learn_vaswani("The base model has $65$ million in total"),
        params_note="The 65M is the paper's figure, which how-models-learn repeats without a breakdown. Counted "
        "here from the shape the texts give: 6 encoder and 6 decoder blocks (each decoder block has a "
        "cross-attention of four more d x d matrices), one 37,000-row table shared by both embeddings and the "
        "output, sinusoidal positions that cost nothing, and the biases and LayerNorms. That comes to a little "
        "less than 65M; the texts give nothing that places the gap (a vocabulary or a detail they do not state).",
        changes=[
            Change(
                "recurrence thrown away: attention alone moves information between positions",
                "architecture",
                _notes_vaswani("throw away recurrence entirely"),
            ),
        ],
        facts=[*_TRANSFORMER_FACTS, PERMUTATION],
    )


_GPT1_FACTS = [
    Fact(
        "norm",
        "post",
        "LayerNorm after the residual add (the notes say pre-norm; the GPT-1 text and "
        "the exercises say post-norm, as the paper does: the app follows them)",
        _src(EXERCISES, None, "Post-LN (GPT-1)"),
        also=(_gpt1_text("GPT-1 remains post-norm."),),
    ),
    Fact(
        "replaced_word_vectors",
        "word2vec and GloVe",
        "what pretraining had passed on before GPT-1: static word vectors, a single vector for each distinct word "
        "whatever its context, with nothing learned above the word itself",
        _gpt1_text("they transfer exactly one vector per word type", None),
        also=(_gpt1_text("Word-level embeddings like word2vec and GloVe were the incumbent way", None),),
    ),
    Fact("data", "BookCorpus (~1B words)", "the pretraining text", _notes_radford("BookCorpus (~1B words)")),
    Fact("corpus_tokens", 1e9, "BPE tokens in the corpus, as an order of magnitude", _gpt1_text("$10^9$ tokens")),
    Fact("batch", 64, "sequences per update", _notes_radford("Batch\t64\t512"), "sequences"),
    Fact("tokens_per_update", 32_768, "64 sequences of 512 tokens", _gpt1_text("= 32{,}768$ prediction"), "tokens"),
    Fact("epochs", 100, "passes over the corpus", _gpt1_text("pre-training runs for a hundred epochs")),
    Fact(
        "predictions",
        1e11,
        "next-token predictions over pretraining, as an order of magnitude (100 passes over 10^9 tokens)",
        _gpt1_text("something like $10^{11}$ individual predictions"),
    ),
    Fact(
        "bpe_merges",
        40_000,
        "merges of its byte-pair encoding (40,478 entries with base symbols and special tokens)",
        _gpt1_text("with $40{,}000$ merges"),
    ),
    Fact(
        "max_lr",
        2.5e-4,
        "peak learning rate, annealed to zero on a cosine",
        _gpt1_text("maximum learning rate of $2.5 \\times 10^{-4}$"),
    ),
    Fact("warmup_updates", 2000, "linear warmup from zero", _gpt1_text("over the first $2000$ updates"), "updates"),
    Fact(
        "weight_decay",
        0.01,
        "decoupled decay on every weight but biases and gains",
        _gpt1_text("with $w=0.01$ on every weight", LOSHCHILOV),
    ),
    Fact("init_std", 0.02, "the standard deviation of every initial weight", _gpt1_text("\\mathcal{N}(0, 0.02)")),
    Fact(
        "activation",
        "GELU",
        "a soft gate x * Phi(x) in place of ReLU",
        _gpt1_text("Radford et al. substitute it with the Gaussian error linear unit (GELU)", HENDRYCKS),
    ),
    Fact(
        "gelu_form",
        "tanh",
        "the released code computes GELU with the tanh approximation",
        _gpt1_text("The released implementation uses the tanh approximation"),
    ),
    Fact(
        "tying",
        "tied",
        "the output projection is the token embedding's transpose",
        _gpt1_text("the output projection in the final line is $W_e^\\top$"),
    ),
    Fact("perplexity", 18.4, "token-level perplexity after pretraining", _gpt1_text("perplexity of $18.4$")),
    Fact(
        "tasks_improved",
        9,
        "benchmarks where it beat the state of the art",
        _gpt1_text("nine of the twelve benchmarks"),
        also=(_notes_radford("SOTA on 9 of 12 NLP tasks"),),
    ),
    Fact(
        "tasks_evaluated",
        12,
        "benchmarks evaluated",
        _gpt1_text("nine of the twelve benchmarks"),
        also=(_notes_radford("SOTA on 9 of 12 NLP tasks"),),
    ),
    Fact(
        "params_rounded",
        117e6,
        "the size the notes' table gives (the count rounded)",
        _notes_radford("Params\t117M\t124M"),
        "parameters",
    ),
    Fact(
        "snli_examples",
        550_000,
        "the largest labelled set of the evaluation",
        _gpt1_text("roughly $550{,}000$ examples"),
        "examples",
    ),
]


def _gpt1() -> Generation:
    s = _src(GPT1_TEXT, RADFORD_2018)

    return Generation(
        key="gpt1",
        name="GPT-1",
        year=2018,
        shape="decoder-only",
        config=_cfg(40_478, 512, 12, 12, 768, norm="post", gelu="tanh"),
        config_sources=_config_sources(s, s, {"n_layer", "d_model", "n_head", "n_ctx", "vocab_size"}),
        quoted_params=116_414_976,
        quoted_params_source=_gpt1_text("Summing these gives $116{,}414{,}976$"),
        params_note="The GPT-1 text counts weight matrices and tables only (its 116,414,976 is count_params' "
        "seed convention exactly); the notes round to 117M. The full count adds the biases and LayerNorm gains "
        "and shifts.",
        changes=[
            Change(
                "the encoder and cross-attention dropped: a decoder-only stack",
                "architecture",
                _gpt1_text("GPT-1 retains only the masked decoder"),
            ),
            Change("learned position rows instead of sinusoids", "architecture", _gpt1_text("The sinusoids are gone.")),
            Change(
                "two stages: next-token prediction on unlabelled books, then a short supervised run for each task",
                "training/alignment",
                _src(EXERCISES, None, "GPT-1 introduced generative pretraining then supervised fine-tuning"),
            ),
        ],
        facts=list(_GPT1_FACTS),
    )


def _bert(name: str, key: str, layers: int, width: int, heads: int, quoted: float) -> Generation:
    s = _src(NOTES, DEVLIN)
    batch, steps = "Batch: 256 sequences × 512 tokens = 128,000 tokens/batch", "1M steps ≈ 40 epochs over 3.3B words"

    def n(quote: str) -> Source:
        return _src(NOTES, DEVLIN, quote)

    return Generation(
        key=key,
        name=name,
        year=2018,
        shape="encoder-only",
        config=_cfg(30_522, 512, layers, heads, width, norm="post", causal=False, gelu="exact"),
        config_sources=_config_sources(s, _src(NOTES, DEVLIN + ": the notes give only the 512 positions"), {"n_ctx"}),
        quoted_params=quoted,
        quoted_params_source=_src(NOTES, DEVLIN + ": the notes name BERT but not its size; the paper's"),
        params_note="count_params counts the GPT-style stack (embeddings, learned positions, blocks); BERT adds "
        "segment embeddings, an embedding LayerNorm, the pooler and NSP classifier and the MLM head "
        "(bert_additions): with them the count is close to the paper's rounded figure. Fine-tuning on SQuAD adds "
        "squad_heads more: a start and an end vector with a bias each (2 d + 2).",
        changes=[
            Change(
                "the full attention mask: every token sees both sides (no new parameters)",
                "architecture",
                n("the only change is the attention mask"),
            ),
            Change(
                "masked-LM and next-sentence prediction as the pretraining objectives",
                "training/alignment",
                n("Masked Language Modeling"),
            ),
        ],
        facts=[
            Fact(
                "mask_rate", 0.15, "share of WordPiece tokens picked for masked-LM", n("we mask 15% of all WordPiece")
            ),
            Fact("mask_token_share", 0.8, "picked positions replaced by [MASK]", n("80% → [MASK] token")),
            Fact("random_token_share", 0.1, "picked positions replaced by a random token", n("10% → random token")),
            Fact("unchanged_share", 0.1, "picked positions left as they are", n("10% → unchanged")),
            Fact("nsp_real_pairs", 0.5, "NSP pairs that really are adjacent sentences", n("50% of pairs are real")),
            Fact("nsp_random_pairs", 0.5, "NSP pairs drawn at random", n("50% random")),
            Fact("batch", 256, "sequences per batch", n(batch), "sequences"),
            Fact(
                "tokens_per_batch", 128_000, "tokens per batch as the notes write it (256 x 512 is 131,072)", n(batch)
            ),
            Fact("steps", 1_000_000, "pretraining steps", n(steps), "steps"),
            Fact("epochs", 40, "passes over the pretraining words those steps make", n(steps)),
            Fact("words", 3.3e9, "words in the pretraining data", n(steps), "words"),
            Fact("short_steps_share", 0.9, "steps run on short sequences", n("90% of steps use seq_len 128")),
            Fact("short_seq_len", 128, "the short sequences' length", n("90% of steps use seq_len 128"), "tokens"),
            Fact("long_steps_share", 0.1, "steps run on full-length sequences", n("10% use 512")),
            Fact("max_positions", 512, "learned positions: nothing longer", n("512 max sequence length")),
            Fact("activation", "GELU", "the MLP's activation, taken over from GPT-1", n("BERT uses GELU")),
            Fact(
                "mask_mismatch",
                "[MASK] never seen downstream",
                "a gap left between pretraining and fine-tuning: the mask token masked-LM trains on is absent from "
                "the text of every task BERT is tuned on (the notes list it among BERT's limits)",
                _src(NOTES, None, "Pretrain/fine-tune mismatch persists ([MASK] never appears downstream)"),
            ),
            Fact(
                "squad_heads",
                "start and end",
                "SQuAD adds two linear layers of its own on the output (start and end scores): parameters, not none",
                n("start_logits = W_s·h_i + b_s"),
            ),
            Fact(
                "nsp_successor",
                "SOP",
                "ALBERT's replacement for NSP: is the sentence order right?",
                _src(NOTES, LAN, "ALBERT replaced NSP with SOP"),
            ),
        ],
    )


# the text tells this without a citation in the sentence (Liu et al. are cited in the one before)
_GPT2_INSPIRATION = Fact(
    "inspiration",
    "Liu et al. (2018)",
    "a forerunner GPT-2's authors pointed to: a decoder-only model trained to write Wikipedia articles "
    "that picked up translating some names into other languages without being taught to",
    _src(GPT2_TEXT, None, "it learned to translate some names from English into other languages"),
    also=(_src(GPT2_TEXT, None, "GPT-2's authors later cited this behavior as an inspiration"),),
)
_GPT2_ROUGE = Fact(
    "rouge_l_cnn_dm",
    "competitive",
    "CNN/DailyMail summaries scored by ROUGE-L, zero-shot: level with trained systems, no fine-tuning",
    _src(NOTES, RADFORD_2019, "Summarization (CNN/DM): competitive ROUGE-L without fine-tuning"),
    "ROUGE-L",
)


def _gpt2(name: str, layers: int, width: int, heads: int, quoted: float) -> Generation:
    text = _src(GPT2_TEXT, RADFORD_2019)
    notes = _src(NOTES, RADFORD_2019)

    def t(quote: str) -> Source:
        return _src(GPT2_TEXT, RADFORD_2019, quote)

    def n(quote: str) -> Source:
        return _src(NOTES, RADFORD_2019, quote)

    row = next(line for line in LAMBADA_ROWS if line.startswith(name + "\t"))
    small = name == "GPT-2 Small"
    given = {"n_layer", "d_model", "n_head", "vocab_size", "n_ctx"} if small else {"vocab_size", "n_ctx"}
    gen = Generation(
        key=name.lower().replace(" ", "-"),
        name=name,
        year=2019,
        shape="decoder-only",
        config=_cfg(50_257, 1024, layers, heads, width, norm="pre", gelu="tanh"),
        config_sources={
            **_config_sources(
                text, _src(GPT2_TEXT, RADFORD_2019 + ": the text's size table is not in the seed"), given
            ),
            "n_ctx": (True, notes),
        },
        quoted_params=quoted,
        quoted_params_source=n(row),
        params_note="count_params' full count with the unembedding tied to the token embedding (a tied matrix "
        "counted once); the notes round it (1,557,611,200 for XL, which they write as 1.5B).",
        changes=[
            Change(
                "LayerNorm moved before each sublayer (pre-LN)",
                "architecture",
                _src(GPT2_TEXT, XIONG, "an arrangement called Pre-Norm"),
            ),
            Change(
                "zero-shot transfer: tasks done from language modelling alone",
                "training/alignment",
                _src(EXERCISES, None, "GPT-2 showed zero-shot transfer"),
            ),
        ],
        facts=[Fact("lambada_zero_shot", LAMBADA[name], "LAMBADA accuracy, zero-shot", n(row), "%")],
    )
    if small:
        gen.facts += [
            Fact("data", "WebText (~40GB)", "the pretraining text", n("WebText (~40GB)")),
            Fact("data_gb", 40, "the pretraining text's size, roughly", n("WebText (~40GB)"), "GB"),
            Fact("batch", 512, "sequences per update", n("Batch\t64\t512"), "sequences"),
            Fact("d_head", 64, "each head's subspace of the 768 features", t("works in a 64-dimensional subspace")),
            Fact(
                "d_mlp",
                3072,
                "the MLP's width: four times the stream's",
                t("row to 3,072 dimensions (a 4× up-projection)"),
            ),
            _GPT2_INSPIRATION,
            Fact(
                "position_rows",
                1024,
                "rows of the learned position table: no row for a 1,025th token",
                t("contains only 1,024 rows"),
                "rows",
            ),
        ]
    if name == "GPT-2 XL":
        gen.facts += [
            Fact("bleu_wmt14_en_fr", 11.5, "WMT-14 English to French, zero-shot", n("zero-shot BLEU 11.5"), "BLEU"),
            Fact("coqa_f1", 55, "CoQA reading comprehension, zero-shot", n("(CoQA): 55 F1 zero-shot"), "F1"),
            _GPT2_ROUGE,
        ]
    return gen


def _gpt3(key: str, name: str, year: int, changes: list[Change], extra: list[Fact]) -> Generation:
    ex = _src(EXERCISES)
    paper = _src(EXERCISES, BROWN + ": the texts give d = 12288, 96 layers and 175B only")
    return Generation(
        key=key,
        name=name,
        year=year,
        shape="decoder-only",
        config=_cfg(50_257, 2048, 96, 96, 12_288, norm="pre", gelu="tanh"),
        config_sources=_config_sources(ex, paper, {"n_layer", "d_model"}),
        quoted_params=175e9,
        quoted_params_source=_src(EXERCISES, None, "why 175B is reached so quickly"),
        params_note="12 d^2 per layer over 96 layers is 173.9B; the token and position tables and the biases "
        "bring count_params' count to 174.6B, which the texts round to 175B.",
        changes=changes,
        facts=extra,
    )


def generations() -> list[Generation]:
    """The models of the texts, in order, each with its parameter counts filled in."""
    gens = [
        _transformer(),
        _gpt1(),
        _bert("BERT base", "bert-base", 12, 768, 12, 110e6),
        _bert("BERT large", "bert-large", 24, 1024, 16, 340e6),
        *(_gpt2(n, layers, w, h, q) for n, layers, w, h, q in GPT2_SIZES),
        _gpt3(
            "gpt3",
            "GPT-3",
            2020,
            [
                Change(
                    "few-shot in-context learning from scale (no weight update)",
                    "training/alignment",
                    _src(EXERCISES, None, "GPT-3's headline was few-shot in-context learning"),
                )
            ],
            [
                Fact(
                    "attention_per_layer",
                    4 * 12_288**2,
                    "the four attention matrices of one layer (4 d^2)",
                    _src(EXERCISES, None, r"4\times 150,994,944=603,979,776"),
                ),
                Fact(
                    "params_per_layer",
                    12 * 12_288**2,
                    "attention and MLP weights of one layer (12 d^2)",
                    _src(EXERCISES, None, r"12\times 150,994,944=1,811,939,328"),
                ),
                Fact(
                    "alpha_n",
                    0.076,
                    "the exponent of the parameter scaling law",
                    _src(EXERCISES, None, r"{\alpha }_N\approx 0.076$"),
                ),
                Fact(
                    "ratio_to_gpt2",
                    round(175 / 1.5, 1),
                    "175B over GPT-2's 1.5B",
                    _src(EXERCISES, None, r"175/1.5\approx 116.7"),
                ),
                Fact(
                    "delta_log_loss",
                    round(-0.076 * math.log(175 / 1.5), 3),
                    "the loss change that scale-up buys",
                    _src(EXERCISES, None, r"\approx -0.362\text{nats}"),
                    "nats",
                ),
            ],
        ),
        _gpt3(
            "instructgpt",
            "InstructGPT (GPT-3.5)",
            2022,
            [
                Change(
                    "RLHF: the same backbone fine-tuned on human feedback",
                    "training/alignment",
                    _src(EXERCISES, None, "GPT-3.5 / InstructGPT added RLHF"),
                )
            ],
            [],
        ),
    ]
    for g in gens:
        g.counted = transformer_count(g.config) if g.key == "transformer" else dict(count_params(g.config))
        if g.key.startswith("bert"):
            add = bert_additions(g.config)
            g.counted["squad_heads"] = 2 * g.config.d_model + 2  # start and end: a d-vector and a bias each
            g.counted["bert_additions"] = add["total"]
            g.counted["total_with_bert_heads"] = g.counted["total"] + add["total"]
    return gens


def lambada_summary(rows: tuple = GPT2_SIZES, accuracy: dict[str, float] = LAMBADA) -> dict:
    """What the LAMBADA table shows, computed from it: how far the sizes span (as a ratio and in
    tenfold steps, log10 of the ratio), how many points accuracy rose across them, and whether each
    larger size scored higher (with the smallest and largest rise between neighbours)."""
    sizes = [q for *_, q in rows]
    acc = [accuracy[name] for name, *_ in rows]
    gains = [b - a for a, b in itertools.pairwise(acc)]
    ratio = sizes[-1] / sizes[0]
    return {
        "smallest": rows[0][0],
        "largest": rows[-1][0],
        "size_ratio": ratio,
        "tenfold_steps": math.log10(ratio),
        "step_ratios": [b / a for a, b in itertools.pairwise(sizes)],
        "accuracy_gain": acc[-1] - acc[0],
        "points_per_tenfold": (acc[-1] - acc[0]) / math.log10(ratio),
        "step_gains": gains,
        "every_step_gained": all(x > 0 for x in gains),
    }


def embedding_share(g: Generation) -> float:
    """The token embedding's share of the weights-only count (GPT-1: 26.7%, 'roughly a quarter')."""
    return g.counted["token_embedding"] / g.counted["seed_convention"]


def config_values(g: Generation) -> list[ConfigValue]:
    cfg = g.config
    return [ConfigValue(n, getattr(cfg, n), *g.config_sources[n]) for n in g.config_sources]


# --------------------------------------------------------------------------------------------
# The worked examples the texts compute by hand
# --------------------------------------------------------------------------------------------


def uniform_to_perplexity(vocab: int = 40_478, perplexity: float = 18.4) -> dict[str, float]:
    """GPT-1's drop: ln V nats for a uniform guess, ln(perplexity) after pretraining (10.6 - 2.9 = 7.7)."""
    start, end = math.log(vocab), math.log(perplexity)
    return {
        "vocab": vocab,
        "perplexity": perplexity,
        "uniform_loss": start,
        "pretrained_loss": end,
        "drop": start - end,
    }


def underflow(n: int = 100, p: float = 0.1) -> dict[str, float]:
    """n tokens each at probability p: the product in float32 (0: 1e-100 is below its smallest
    subnormal) against the sum of logarithms, which stays finite."""
    prod = torch.full((n,), p, dtype=torch.float32).prod().item()
    log_sum = torch.full((n,), p, dtype=torch.float64).log().sum().item()
    return {
        "n": n,
        "p": p,
        "product_float32": prod,
        "product_float64": math.exp(log_sum),  # 1e-100 is far above float64's smallest (about 5e-324)
        "log_sum": log_sum,
        "log10_product": log_sum / math.log(10),
    }


def layernorm_example(x: float = 0.099, mean: float = -0.005, var: float = 0.137, eps: float = 1e-5) -> dict:
    """The GPT-2 text's first LayerNorm entry: (x - mean) / sqrt(var + eps) (0.104 / 0.370 = 0.281)."""
    std = math.sqrt(var + eps)
    return {
        "x": x,
        "mean": mean,
        "var": var,
        "eps": eps,
        "centred": x - mean,
        "std": std,
        "normalised": (x - mean) / std,
    }


LOSS_POINTS = ((0.9, LEARN_TEXT), (0.25, EXERCISES), (0.01, LEARN_TEXT))  # p, the text that quotes its loss


def losses_at(points: tuple[tuple[float, str], ...] = LOSS_POINTS) -> list[dict]:
    """-ln p at the probabilities the texts quote (0.105, 1.386, 4.605 nats)."""
    return [{"p": p, "loss": nll(p), "seed": seed} for p, seed in points]


def loss_curve(points: int = 100, lo: float = 0.005) -> dict[str, list[float]]:
    """-ln p on [lo, 1], the curve the loss examples are marked on."""
    ps = linspace(lo, 1.0, points)
    return {"p": ps, "loss": [nll(p) for p in ps]}


MOE_EXPERTS = (1, 8, 16, 64, 128, 256, 512, 1024)  # the expert counts the capacity example is run at


def moe_capacity(experts: tuple[int, ...] = MOE_EXPERTS, top_k: int = 2) -> list[dict[str, float]]:
    """GPT-2 XL's shape with its dense MLP replaced by `e` experts of the same width, `top_k` of them
    used per token: the stored weights against those one token goes through (the text's claim is
    100x-1000x the capacity for a much smaller rise in compute). ``total`` is count_params' count;
    ``active`` leaves out the e - top_k experts a token skips; FLOPs per token are about twice the
    weights a token is multiplied by (one multiply and one add each): the active ones less the
    position table, a lookup (the tied token embedding stays in, as the output layer)."""
    _, layers, width, heads, _ = GPT2_SIZES[-1]
    dense = _cfg(50_257, 1024, layers, heads, width)
    base = count_params(dense)
    rows = []
    for e in experts:
        k = min(top_k, e)
        cfg = _cfg(50_257, 1024, layers, heads, width, n_expert=e, top_k_experts=k) if e > 1 else dense
        c = count_params(cfg)
        n_mat, b = (3 if cfg.gated else 2), (1 if cfg.bias else 0)
        per_expert = n_mat * width * cfg.d_mlp + b * ((n_mat - 1) * cfg.d_mlp + width)
        active = c["total"] - layers * (e - k) * per_expert if e > 1 else c["total"]
        flops = 2 * (active - c["position_embedding"])
        dense_flops = 2 * (base["total"] - base["position_embedding"])
        rows.append(
            {
                "experts": e,
                "top_k": k,
                "total": c["total"],
                "active": active,
                "capacity_ratio": c["total"] / base["total"],
                "flops_per_token": flops,
                "compute_ratio": flops / dense_flops,
            }
        )
    return rows
