"""The texts' numbers that no model card of the genealogy carries, each with its seed, a verbatim
quote and, where the app can redo it, its own computation.

model/genealogy.py holds what the texts say of each model (its config, size, data, results).
What remains is here: the texts' worked arithmetic (GPT-1's parameter count piece by piece, the
initialisation scales, GELU's minimum, Adam's memory, the label-smoothing target, the exercises'
d^2 sums), their worked examples (a sentence's tokens, a padded batch, Adam on gradients four
orders of magnitude apart), and the papers they cite with the year each text gives. ``computed``
is the app's own value for a number where it computes one (by count_params, model.formulas,
model.lessons, model.schedules or a tokenizer); ``value`` is always the text's number as written.
Pure data and functions, no web code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from . import formulas, lessons, schedules
from .genealogy import (
    DEVLIN,
    EXERCISES,
    GPT1_TEXT,
    GPT2_TEXT,
    LEARN_TEXT,
    NOTES,
    NSP_ABLATION,
    NSP_TASKS,
    RADFORD_2018,
    RADFORD_2019,
    VASWANI,
)
from .gpt import count_params, preset_config

KINGMA_BA = "Kingma and Ba, Adam: A Method for Stochastic Optimization (2014)"
DEEPSEEK_V2 = "DeepSeek-AI, DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model (2024)"


@dataclass(frozen=True)
class TextFact:
    name: str
    value: float | int | str  # the number as the text gives it
    unit: str
    caption: str  # what it is, in the app's words
    topic: str
    seed: str
    quote: str  # verbatim from the seed
    paper: str | None = None  # the paper the text cites for this fact
    computed: float | None = None  # the app's own value, where it computes one
    how: str = ""  # how `computed` is computed


@dataclass(frozen=True)
class Paper:
    who: str
    title: str
    year: int
    cited_for: str  # in the app's words
    seed: str
    quote: str  # the citation (or the sentence giving its year) as the seed writes it

    @property
    def reference(self) -> str:
        return f"{self.who}, {self.title} ({self.year})"


def _maker(seed: str, default_paper: str | None):
    def make(name, value, unit, caption, topic, quote, computed=None, how="", paper=default_paper) -> TextFact:
        return TextFact(name, value, unit, caption, topic, seed, quote, paper, computed, how)

    return make


def tanh_agreement(lo: float = -2.0, hi: float = 2.0, points: int = 4001) -> float:
    """How many decimal places GELU's tanh form agrees with x Phi(x) to on [lo, hi]: -log10 of the
    largest gap (3.6 on [-2, 2])."""
    gap = max(abs(formulas.gelu_tanh(x) - formulas.gelu_exact(x)) for x in formulas.linspace(lo, hi, points))
    return -math.log10(gap)


_G1 = count_params(preset_config("gpt1"))
_G2 = count_params(preset_config("gpt2"))
_GELU_MIN_X, _GELU_MIN = formulas.gelu_minimum("exact")
_STDS = lessons.init_stds(768)
_PRE_VAR = lessons.preactivation_variance(768, 0.02)
_T_V, _T_D = 37_000, 512  # the 2017 base model's vocabulary and width
_UNTIED = lessons.encoder_decoder_counts(_T_V, _T_D, 6, 2048, tie=False)["total"]
_NSP = dict(zip(NSP_TASKS, zip(*NSP_ABLATION.values())))  # task -> (with NSP, without)

_g1 = _maker(GPT1_TEXT, None)  # the text's own arithmetic; GPT-1's own choices name its paper
GPT1_FACTS = [
    _g1("drop_in_nats", 7.5, "nats", "how far pretraining moved the loss, in words", "loss",
        "seven-and-a-half-nat difference", math.log(40_478) - math.log(18.4), "ln 40,478 - ln 18.4"),
    _g1("choices_after", 18, "tokens", "the uniform choice a perplexity of 18.4 is as unsure as", "loss",
        "among about eighteen equally plausible tokens", 18.4, "the perplexity itself"),
    _g1("choices_before", 40_000, "tokens", "the uniform choice before training: the whole vocabulary", "loss",
        "unable to distinguish forty thousand tokens", 40_478, "the vocabulary"),
    _g1("d_mlp", 3072, "", "the feed-forward layer's width", "size", "$d_{\\text{ff}} = 3072$",
        _G1["mlp_weights_per_block"] / (2 * 768), "MLP weights per block / (2 x 768)", RADFORD_2018),
    _g1("position_table", 393_216, "parameters", "the learned position table: 512 rows of 768", "size",
        "$512 \\times 768 = 393{,}216$", _G1["position_embedding"], "count_params: position_embedding", paper=RADFORD_2018),
    _g1("first_position_without_row", 513, "", "the first position with no learned row", "size",
        "no learned vector for position $513$", _G1["position_embedding"] / 768 + 1, "rows + 1"),
    _g1("attention_per_block", 2_359_296, "parameters", "W_Q, W_K, W_V and W_O of one block", "size",
        "$4 \\times 768^2 = 2{,}359{,}296$", _G1["attention_weights_per_block"], "count_params", paper=RADFORD_2018),
    _g1("mlp_per_block", 4_718_592, "parameters", "the feed-forward layer's two matrices in one block", "size",
        "$2 \\times 768 \\times 3072 = 4{,}718{,}592$", _G1["mlp_weights_per_block"], "count_params", paper=RADFORD_2018),
    _g1("per_block", 7_077_888, "parameters", "one block's weights", "size",
        "for a total of $7{,}077{,}888$ parameters per block", _G1["per_block_seed_convention"], "count_params", paper=RADFORD_2018),
    _g1("all_blocks", 84_934_656, "parameters", "the twelve blocks' weights", "size",
        "or $84{,}934{,}656$ across the twelve", 12 * _G1["per_block_seed_convention"], "12 x per block", paper=RADFORD_2018),
    _g1("token_table", 31_087_104, "parameters", "the token embedding table: 40,478 rows of 768", "size",
        "$40{,}478 \\times 768 = 31{,}087{,}104$", _G1["token_embedding"], "count_params: token_embedding", paper=RADFORD_2018),
    _g1("embedding_share_pct", 27, "%", "the token table's share of the weights", "size",
        "roughly twenty-seven percent", 100 * _G1["token_embedding"] / _G1["seed_convention"], "token table / weights"),
    _g1("embedding_share_words", 0.25, "", "the same share in words: more than this fraction", "size",
        "better than a quarter", _G1["token_embedding"] / _G1["seed_convention"], "token table / weights"),
    _g1("xavier_std", 0.036, "", "the initial scale Xavier's rule gives at width 768", "initialisation",
        "$1/\\sqrt{768} \\approx 0.036$", _STDS["xavier"], "1 / sqrt(768)"),
    _g1("he_std", 0.051, "", "the initial scale He's rule gives at width 768", "initialisation",
        "$\\sqrt{2/768} \\approx 0.051$", _STDS["he"], "sqrt(2 / 768)"),
    _g1("init_vs_xavier", 0.5, "", "GPT-1's 0.02 as a share of that principled scale", "initialisation",
        "crudely half the principled value", 0.02 / _STDS["xavier"], "0.02 / Xavier's scale"),
    _g1("preactivation_variance", 0.307, "", "a pre-activation's variance at initialisation", "initialisation",
        "$768(0.02)^2 = 0.307$", _PRE_VAR, "768 x 0.02^2"),
    _g1("preactivation_std", 0.554, "", "its standard deviation", "initialisation",
        "standard deviation $0.554$", math.sqrt(_PRE_VAR), "sqrt(768) x 0.02"),
    _g1("preactivation_band", 2, "", "pre-activations sit within plus or minus this", "initialisation",
        "a band of roughly $[−2,2]$"),
    _g1("band_in_stds", 3.6, "standard deviations", "the band's half-width over the pre-activations' spread",
        "initialisation", "spans about $\\pm 3.6$ standard deviations", 2 / math.sqrt(_PRE_VAR), "2 / 0.554"),
    _g1("gelu_minimum", -0.170, "", "GELU's lowest value", "activation", "minimum of approximately $-0.170$",
        _GELU_MIN, "model.formulas.gelu_minimum (a root of GELU's slope)"),
    _g1("gelu_minimum_at", -0.752, "", "where GELU reaches it", "activation", "near $x \\approx -0.752$",
        _GELU_MIN_X, "model.formulas.gelu_minimum"),
    _g1("gelu_slope_at_minus_one", -0.083, "", "GELU's slope at x = -1 (a ReLU's there is 0)", "activation",
        "evaluates to $-0.083$", formulas.gelu_exact_grad(-1.0), "model.formulas.gelu_exact_grad(-1)"),
    _g1("gelu_tanh_constant", 0.044715, "", "the cubic term's constant in GELU's tanh form", "activation",
        "(x + 0.044715x^3)", formulas.TANH_C, "model.formulas.TANH_C"),
    _g1("tanh_agreement_decimals", 4, "decimal places", "how closely the tanh form matches x Phi(x) on [-2, 2]",
        "activation", "to roughly four decimal places", tanh_agreement(), "-log10 of the largest gap on [-2, 2]"),
    _g1("transformer_warmup", 4000, "steps", "the 2017 model's warmup, set against GPT-1's", "schedule",
        "warmed up linearly over $4000$ steps"),
    _g1("batch_sequences", 64, "sequences", "sequences per update", "schedule", "$64 \\times 512 = 32{,}768$", paper=RADFORD_2018),
    _g1("pairs_en_de", 4.5e6, "pairs", "the 2017 model's English-German sentence pairs", "data",
        "roughly four and a half million of them for English-German"),
    _g1("pairs_en_fr", 36e6, "pairs", "its English-French sentence pairs", "data",
        "thirty-six million for English-French"),
    _g1("stages", 2, "", "pretraining on unlabelled text, then fine-tuning on each task", "training",
        "It takes two stages", paper=RADFORD_2018),
]  # fmt: skip

_ln = _maker(LEARN_TEXT, VASWANI)
LEARN_FACTS = [
    _ln("attention_work_ratio", 30, "x", "how many times more attention work the example sentence costs cut "
        "into characters than into tokens: (characters / tokens)^2", "tokens", "roughly thirty times the attention work",
        (83 / 15) ** 2, "(83 characters / 15 tokens)^2, both counted in tokenizer_example", None),
    # the scale matching below is the text's reconstruction: the paper states the scaling, derives nothing
    _ln("d_model", 512, "", "the base model's width, where the embedding scale is worked out", "embeddings",
        "which for $d_{\\text{model}} = 512$ is about $16$", paper=None),
    _ln("position_norm", 16, "", "the length of a sinusoidal position vector at width 512", "embeddings",
        "is about $16$", float(lessons.sinusoidal_positions(1, _T_D)[0].norm()), "sqrt(512 / 2)", None),
    _ln("embedding_scale", 22.6, "", "the factor every embedding row is scaled by: sqrt(d_model)", "embeddings",
        "\\approx 22.6$", math.sqrt(_T_D), "sqrt(512)", None),
    _ln("table_params", 19e6, "parameters", "one vocabulary-sized table: 37,000 x 512", "size",
        "each is about $19$ million parameters", _T_V * _T_D, "37,000 x 512"),
    _ln("untied_share_in_tables", 0.5, "", "the share of the untied model in its two tables", "size",
        "place close to half of it", 2 * _T_V * _T_D / _UNTIED, "2 x 37,000 x 512 / the untied count"),
    _ln("warmup_share_pct", 4, "%", "the share of training spent warming up", "schedule",
        "the first four percent of training", 100 * 4000 / 100_000, "4,000 / 100,000"),
    _ln("peak_lr", 7e-4, "", "the schedule's peak, at step 4,000", "schedule", "is about $7 \\times 10^{-4}$",
        schedules.transformer(4000), "model.schedules.transformer(4000)"),
    _ln("final_lr", 1.4e-4, "", "the rate at step 100,000", "schedule", "to about $1.4 \\times 10^{-4}$",
        schedules.transformer(100_000), "model.schedules.transformer(100000)"),
    _ln("adam_beta2_default", 0.999, "", "Adam's usual second-moment decay (Kingma and Ba's default)", "optimiser",
        "$\\beta_2 = 0.999$", paper=None),
    _ln("adam_memory_default", 1000, "steps", "how many steps that average remembers", "optimiser",
        "roughly a thousand steps", lessons.effective_memory(0.999), "1 / (1 - 0.999)", None),
    _ln("adam_beta2_transformer", 0.98, "", "the Transformer's second-moment decay", "optimiser",
        "and at $0.98$ roughly fifty"),
    _ln("adam_memory_transformer", 50, "steps", "how many steps that remembers", "optimiser",
        "and at $0.98$ roughly fifty", lessons.effective_memory(0.98), "1 / (1 - 0.98)"),
    _ln("smoothed_target", 0.9, "", "the target probability of the right token under label smoothing 0.1",
        "label smoothing", "a target of roughly $0.9$", 1 - 0.1 + 0.1 / _T_V, "1 - 0.1 + 0.1 / 37,000"),
    _ln("smoothed_other", 2.7e-6, "", "the target probability of each other token", "label smoothing",
        "at about $2.7 \\times 10^{-6}$ each", 0.1 / _T_V, "0.1 / 37,000"),
    _ln("smoothing_floor", 1.38, "nats", "the loss a perfect model still pays against the smoothed target",
        "label smoothing", "$H(q') \\approx 1.38$", formulas.label_smoothing_floor(0.1, _T_V),
        "model.formulas.label_smoothing_floor: the smoothed target's entropy"),
    _ln("smoothing_method", 0.1, "", "the share of the target's mass spread out", "label smoothing",
        "spreads the remaining tenth of the mass"),
    # how a model predicts its first token: nothing precedes it, so a special token stands in (the text's
    # own note on practice, no paper's claim)
    _ln("bos_empty_prefix", "a start-of-sequence token", "", "what stands for the nothing before the first "
        "token: a special token put first, so that the opening position has a key to look at", "tokens",
        "In practice the empty prefix is realized as a dedicated start-of-sequence token", paper=None),
]  # fmt: skip

_nt = _maker(NOTES, None)
NOTES_FACTS = [
    _nt("fork_year", 2018, "", "the year BERT and GPT-1 split the field in two", "history",
        "2018 split NLP into two lines"),
    _nt("fork_years", 5, "years", "how long that split shaped the field, as the notes tell it", "history",
        "defined the next five years"),
    _nt("gpt3_params", 175e9, "parameters", "GPT-3's size, the step after GPT-2", "size",
        "117M → 1.5B → 175B", paper=None),  # GPT-3's size: the notes credit no paper for it
    _nt("nsp_cost_qnli", 3.5, "points", "what dropping NSP cost on QNLI", "results",
        "Removing NSP costs 3.5 points on QNLI", _NSP["QNLI"][0] - _NSP["QNLI"][1], "the table: 88.4 - 84.9", DEVLIN),
    _nt("nsp_cost_mnli", 0.5, "points", "and on MNLI", "results", "only 0.5 on MNLI",
        _NSP["MNLI-m"][0] - _NSP["MNLI-m"][1], "the table: 84.4 - 83.9", DEVLIN),
    _nt("nsp_cost_sst2", 0.1, "points", "and on SST-2", "results", "0.1 on SST-2",
        _NSP["SST-2"][0] - _NSP["SST-2"][1], "the table: 92.7 - 92.6", DEVLIN),
    _nt("sinusoid_base", 10000, "", "the base of the sinusoids' wavelengths", "positions", "{10000^{2i/d}}",
        paper=VASWANI),
    _nt("gpt1_date", 2018, "", "when GPT-1 took up GELU (June), before BERT", "history", "GPT-1 (June 2018)"),
]  # fmt: skip

_d2 = 12_288**2
_ex = _maker(EXERCISES, None)
EXERCISE_FACTS = [
    _ex("prenorm_depth_low", 48, "layers", "the shallower end of the stacks pre-LN lets train: GPT-2 XL's 48",
        "architecture", "through 48–96 stacked layers"),
    _ex("prenorm_depth_high", 96, "layers", "the deeper end: GPT-3's 96", "architecture",
        "through 48–96 stacked layers"),
    _ex("attention_matrices", 4, "matrices", "the attention's projections: W_Q, W_K, W_V, W_O", "size",
        "Four matrices"),
    _ex("d_squared", 150_994_944, "", "GPT-3's width squared", "size", "4\\times 150,994,944", _d2, "12,288^2"),
    _ex("attention_per_layer_approx", 6.0e8, "parameters", "GPT-3's attention weights per layer, rounded", "size",
        "\\approx 6.0\\times 10^8", 4 * _d2, "4 x 12,288^2"),
    _ex("weights_per_layer_coefficient", 12, "d^2", "one layer's weights in units of d^2: 4 attention + 8 MLP",
        "size", "$12\\times 12288^2", 4 + 8, "4 + 8"),
    _ex("mlp_share_of_layer", 2 / 3, "", "the MLP's share of a layer's weights", "size",
        "it holds two-thirds of a layer's weights", 8 / 12, "8 d^2 / 12 d^2"),
    _ex("d_k", 64, "", "a head's key width in the scaling exercise", "attention", "Variance $=d_k=64$"),
    _ex("score_std", 8, "", "the spread of raw q.k scores at that width: sqrt(d_k)", "attention",
        "standard deviation $=\\sqrt{64}=8$", math.sqrt(64), "sqrt(64)"),
    _ex("scale_step", 10, "x", "the step in size the power law is read at", "scaling",
        "every time you multiply $N$ by 10"),
    _ex("gpt2_billions", 1.5, "billion parameters", "GPT-2's size in the ratio", "scaling",
        "Ratio $N_3/N_2=175/1.5"),
    _ex("gpt3_billions", 175, "billion parameters", "GPT-3's size in the ratio", "scaling",
        "Ratio $N_3/N_2=175/1.5"),
    _ex("ln_ratio", 4.759, "", "the natural log of that ratio", "scaling", "\\times 4.759",
        math.log(175 / 1.5), "ln(175 / 1.5)"),
    _ex("loss_drop_per_tenfold", 0.175, "nats", "what each tenfold step in size takes off ln L", "scaling",
        "\\approx 0.175$ nats", 0.076 * math.log(10), "0.076 x ln 10"),
    _ex("ln_10", 2.3026, "", "ln 10", "scaling", "0.076\\times 2.3026", math.log(10), "ln 10"),
    _ex("doubled_width", 24576, "", "GPT-3's width doubled", "size", "4\\times 24576^2", 2 * 12_288, "2 x 12,288"),
    _ex("doubled_attention", 2_415_919_104, "parameters", "one layer's attention weights at that width", "size",
        "=2,415,919,104", 4 * (2 * 12_288) ** 2, "4 x 24,576^2"),
    _ex("doubled_attention_approx", 2.42e9, "parameters", "the same, rounded", "size",
        "\\approx 2.42\\times 10^9", 4 * (2 * 12_288) ** 2, "4 x 24,576^2"),
    _ex("doubled_attention_rounder", 2.4e9, "parameters", "the same, rounded again", "size",
        "to ~$2.4\\times 10^9$", 4 * (2 * 12_288) ** 2, "4 x 24,576^2"),
    _ex("loss_floor", "the entropy of language", "", "the lowest loss any model can reach, however large: the "
        "uncertainty left in text itself, which the power law flattens towards", "scaling",
        "its irreducible floor (the entropy of language itself, which no model can beat)"),
    _ex("compute_optimal", "N and D together", "", "Chinchilla's answer to a fixed budget: grow the parameter "
        "count and the training tokens side by side, about in step, instead of size alone", "scaling",
        "the Chinchilla finding that $N$ and $D$ should grow together (roughly in proportion)"),
]  # fmt: skip

_g2 = _maker(GPT2_TEXT, RADFORD_2019)
GPT2_FACTS = [
    _g2("example_tokens", 4, "tokens", "the walkthrough's example: Every effort moves you", "tokens",
        "with shape $4 \\times 768$"),
    _g2("xl_params", 1.5e9, "parameters", "GPT-2's largest size, named in the release the text cites", "size",
        "GPT-2: 1.5B release"),
    _g2("byte_tokens", 256, "tokens", "the vocabulary's first entries: one per byte value", "tokens",
        "begins with 256 base tokens"),
    _g2("bpe_merges", 50_000, "merges", "merges learned on top of the bytes", "tokens",
        "After 50,000 such merges"),
    _g2("dropout_rate", 0.2, "", "the drop rate of the dropout example", "regularisation",
        "when the drop rate is 20%", paper=None),  # the text's example: Srivastava et al. is cited for dropout
    _g2("dropout_rescale", 1.25, "", "what the kept values are multiplied by at that rate", "regularisation",
        "$1 / (1 - 0.2) = 1.25$", 1 / (1 - 0.2), "1 / (1 - 0.2)", None),
    _g2("mlp_share_of_block", 2 / 3, "", "the FFN's share of a block's parameters", "size",
        "about two-thirds of each decoder block’s parameters",
        (_G2["mlp_weights_per_block"] + 3072 + 768) / _G2["per_block"], "count_params: MLP weights and biases / block"),
    _g2("target_probability", 4.6051e-5, "", "the probability the walkthrough's model puts on ' forward' "
        "(the text does not say which weights gave it, so it is not recomputed)", "loss",
        "selects the value $4.6051 \\times 10^{-5}$"),
    _g2("adam_beta1", 0.9, "", "Adam's usual first-moment decay", "optimiser", "$\\beta_1$ is usually $0.9$",
        paper=None),
    _g2("adam_beta2", 0.999, "", "Adam's usual second-moment decay", "optimiser", "$\\beta_2$ is usually $0.999$",
        paper=None),
    _g2("adam_epsilon", 1e-8, "", "Adam's usual epsilon, kept off zero division", "optimiser", "usually $10^{-8}$",
        paper=None),
    _g2("first_position_without_row", 1025, "", "the first token GPT-2 has no position row for", "positions",
        "no embedding to assign to token 1,025", _G2["position_embedding"] / 768 + 1, "rows + 1"),
    _g2("gqa_query_heads", 32, "heads", "query heads in the grouped-query example", "attention",
        "If a layer has 32 query heads", paper=None),  # the text's example: Ainslie et al. is cited for GQA
    _g2("gqa_kv_heads", 8, "heads", "key/value heads in it", "attention", "and 8 key-value heads", paper=None),
    _g2("gqa_cache_ratio", 4, "x", "how much smaller the KV cache is with 8 key/value heads than with 32",
        "attention", "making the KV cache four times smaller",
        formulas.kv_cache_bytes(1, 32, 128, 1) / formulas.kv_cache_bytes(1, 8, 128, 1), "model.formulas.kv_cache_bytes",
        None),
    _g2("mla", "a compressed latent", "", "multi-head latent attention: keys and values are squeezed into a small "
        "shared vector that is cached, and expanded back when needed, so the cache shrinks by compression rather "
        "than by heads sharing", "attention",
        "MLA instead compresses the key-value information into a low-dimensional latent representation",
        paper=DEEPSEEK_V2),
]  # fmt: skip


FACTS = GPT1_FACTS + LEARN_FACTS + NOTES_FACTS + EXERCISE_FACTS + GPT2_FACTS


def fact(name: str) -> TextFact:
    """The texts' fact named `name` (bos_empty_prefix, loss_floor, mla, ...)."""
    return next(f for f in FACTS if f.name == name)


# --------------------------------------------------------------------------------------------
# The papers the texts cite, with the year each text gives
# --------------------------------------------------------------------------------------------

PAPERS = [
    Paper("Radford et al.", "Improving Language Understanding by Generative Pre-Training", 2018,
          "GPT-1", GPT1_TEXT, "Improving Language Understanding by Generative Pre-Training. 2018"),
    Paper("Dai and Le", "Semi-supervised Sequence Learning", 2015,
          "pretraining then fine-tuning, on LSTMs, before GPT-1", GPT1_TEXT, "Semi-supervised Sequence Learning. 2015"),
    Paper("Howard and Ruder", "Universal Language Model Fine-tuning for Text Classification (ULMFiT)", 2018,
          "fine-tuning a pretrained LSTM for classification", GPT1_TEXT,
          "Universal Language Model Fine-tuning for Text Classification. 2018"),
    Paper("Peters et al.", "Deep Contextualized Word Representations (ELMo)", 2018,
          "contextual word vectors used as frozen features", GPT1_TEXT, "Deep Contextualized Word Representations. 2018"),
    Paper("Liu et al.", "Generating Wikipedia by Summarizing Long Sequences", 2018,
          "a decoder-only Transformer before GPT-1", GPT1_TEXT, "Generating Wikipedia by Summarizing Long Sequences. 2018"),
    Paper("Hendrycks and Gimpel", "Gaussian Error Linear Units", 2016, "GELU", GPT1_TEXT,
          "Gaussian Error Linear Units. 2016"),
    Paper("Loshchilov and Hutter", "Fixing Weight Decay Regularization in Adam", 2017,
          "decoupled weight decay (AdamW)", GPT1_TEXT, "Fixing Weight Decay Regularization in Adam. 2017"),
    Paper("Vaswani et al.", "Attention Is All You Need", 2017, "the 2017 Transformer GPT-1 is set against",
          GPT1_TEXT, "The 2017 model warmed up"),
    Paper("Sennrich et al.", "Neural Machine Translation of Rare Words with Subword Units", 2015,
          "byte-pair encoding for sub-word tokens", LEARN_TEXT, "Rare Words with Subword Units. 2015"),
    Paper("Press and Wolf", "Using the Output Embedding to Improve Language Models", 2016,
          "the output matrix as an embedding; tying improves perplexity", LEARN_TEXT,
          "Using the Output Embedding to Improve Language Models. 2016"),
    Paper("Inan et al.", "Tying Word Vectors and Word Classifiers", 2016, "weight sharing from a loss analysis",
          LEARN_TEXT, "Tying Word Vectors and Word Classifiers: A Loss Framework for Language Modeling. 2016"),
    Paper("Williams and Zipser", "A Learning Algorithm for Continually Running Fully Recurrent Neural Networks", 1989,
          "teacher forcing", LEARN_TEXT, "Continually Running Fully Recurrent Neural Networks. 1989"),
    Paper("Bengio et al.", "Scheduled Sampling for Sequence Prediction with Recurrent Neural Networks", 2015,
          "scheduled sampling against exposure bias", LEARN_TEXT,
          "Scheduled Sampling for Sequence Prediction with Recurrent Neural Networks. 2015"),
    Paper("Huszár", "How (not) to Train your Generative Model", 2015,
          "scheduled sampling is not a consistent estimator", LEARN_TEXT, "How (not) to Train your Generative Model. 2015"),
    Paper("Kingma and Ba", "Adam: A Method for Stochastic Optimization", 2014, "Adam", LEARN_TEXT,
          "Adam: A Method for Stochastic Optimization. 2014"),
    Paper("Xiong et al.", "On Layer Normalization in the Transformer Architecture", 2020,
          "why post-norm needs warmup and pre-norm does not", LEARN_TEXT,
          "On Layer Normalization in the Transformer Architecture. 2020"),
    Paper("Srivastava et al.", "Dropout: A Simple Way to Prevent Neural Networks from Overfitting", 2014, "dropout",
          LEARN_TEXT, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting. 2014"),
    Paper("Szegedy et al.", "Rethinking the Inception Architecture for Computer Vision", 2015, "label smoothing",
          LEARN_TEXT, "Rethinking the Inception Architecture for Computer Vision. 2015"),
    Paper("Müller et al.", "When Does Label Smoothing Help?", 2019, "smoothing makes a worse teacher for distillation",
          LEARN_TEXT, "When Does Label Smoothing Help? 2019"),
    Paper("Vaswani et al.", "Attention Is All You Need", 2017, "the Transformer the text follows", LEARN_TEXT,
          "For the 2017 Transformer we stick"),
    Paper("Radford et al.", "Improving Language Understanding by Generative Pre-Training", 2018, "GPT-1", NOTES,
          "Radford, A., et al. (2018)"),
    Paper("Radford et al.", "Language Models are Unsupervised Multitask Learners", 2019, "GPT-2", NOTES,
          "Radford, A., et al. (2019)"),
    Paper("Devlin et al.", "BERT: Pre-training of Deep Bidirectional Transformers", 2018, "BERT", NOTES,
          "Devlin, J., et al. (2018)"),
    Paper("Liu et al.", "RoBERTa", 2019, "BERT trained longer, without NSP", NOTES, "Liu, Y., et al. (2019)"),
    Paper("Liu et al.", "RoBERTa", 2019, "BERT trained longer, without NSP", NOTES, "RoBERTa (2019) later showed"),
    Paper("Lan et al.", "ALBERT", 2020, "sentence-order prediction in place of NSP", NOTES, "Lan, Z., et al. (2020)"),
    Paper("Vaswani et al.", "Attention Is All You Need", 2017, "the Transformer", NOTES, "Vaswani, A., et al. (2017)"),
    Paper("Vaswani et al.", "Attention Is All You Need", 2017, "the end of recurrence as the default", NOTES,
          "Before 2017, sequence models meant RNNs"),
    *(
        Paper(who, title, year, what, GPT2_TEXT, quote)
        for who, title, year, what, quote in (
            ("Rosenblatt", "The Perceptron", 1958, "the perceptron", "(Psychological Review, 1958)"),
            ("nbro", "Where can I find the original paper that introduced RNNs?", 2020, "where RNNs began",
             "(Artificial Intelligence Stack Exchange, 2020)"),
            ("Cho et al.", "Learning Phrase Representations using RNN Encoder-Decoder", 2014,
             "the RNN encoder-decoder", "for Statistical Machine Translation” (arXiv, 2014)"),
            ("Sutskever et al.", "Sequence to Sequence Learning with Neural Networks", 2014, "sequence to sequence",
             "Sequence to Sequence Learning with Neural Networks” (NeurIPS, 2014)"),
            ("van den Oord et al.", "WaveNet", 2016, "causal, dilated convolutions for audio",
             "A Generative Model for Raw Audio” (arXiv, 2016)"),
            ("Kalchbrenner et al.", "Neural Machine Translation in Linear Time (ByteNet)", 2016,
             "dilated convolutions for translation", "Neural Machine Translation in Linear Time” (arXiv, 2016)"),
            ("Bahdanau et al.", "Neural Machine Translation by Jointly Learning to Align and Translate", 2014,
             "attention over the source", "appeared in a 2014 paper on neural machine translation"),
            ("Vaswani et al.", "Attention Is All You Need", 2017, "the Transformer", "(NeurIPS, 2017)"),
            ("Devlin et al.", "BERT", 2018, "encoder-only models",
             "Bidirectional Transformers for Language Understanding” (arXiv, 2018)"),
            ("Radford et al.", "Improving Language Understanding by Generative Pre-Training", 2018,
             "decoder-only models", "Understanding by Generative Pre-Training” (OpenAI, 2018)"),
            ("Radford et al.", "Language Models are Unsupervised Multitask Learners", 2019, "GPT-2",
             "Unsupervised Multitask Learners” (OpenAI, 2019)"),
            ("Hendrycks and Gimpel", "Gaussian Error Linear Units (GELUs)", 2016, "GELU",
             "Gaussian Error Linear Units (GELUs)” (arXiv, 2016)"),
            ("Arcuschin", "MLPs in Transformers", 2026, "what the MLP does", "MLPs in Transformers” (Learn MI, 2026)"),
            ("Sennrich et al.", "Neural Machine Translation of Rare Words with Subword Units", 2016, "BPE",
             "with Subword Units” (ACL, 2016)"),
            ("Srivastava et al.", "Dropout", 2014, "dropout", "from Overfitting” (JMLR, 2014)"),
            ("Ba et al.", "Layer Normalization", 2016, "LayerNorm", "“Layer Normalization” (arXiv, 2016)"),
            ("He et al.", "Deep Residual Learning for Image Recognition", 2015, "residual connections",
             "Deep Residual Learning for Image Recognition” (arXiv, 2015)"),
            ("Geva et al.", "Transformer Feed-Forward Layers Are Key-Value Memories", 2021, "the FFN as a memory",
             "Are Key-Value Memories” (EMNLP, 2021)"),
            ("Liu et al.", "Generating Wikipedia by Summarizing Long Sequences", 2018, "dropping the encoder",
             "by Summarizing Long Sequences” (arXiv, 2018)"),
            ("Jordan", "Muon: An optimizer for hidden layers in neural networks", 2024, "the graveyard of optimisers",
             "(Keller Jordan blog, 2024)"),
            ("Kingma and Ba", "Adam: A Method for Stochastic Optimization", 2014, "Adam", "By 2014, researchers"),
            ("Jordan", "Muon", 2024, "Muon, released that year", "is an optimizer released in 2024"),
            ("Dai et al.", "DeepSeekMoE", 2024, "fine-grained experts and a shared expert",
             "Mixture-of-Experts Language Models” (arXiv, 2024)"),
            ("Su et al.", "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021, "RoPE",
             "with Rotary Position Embedding” (arXiv, 2021)"),
            ("Kazemnejad et al.", "The Impact of Positional Encoding on Length Generalization in Transformers", 2023,
             "no position encoding (NoPE)", "Length Generalization in Transformers” (arXiv, 2023)"),
            ("Ainslie et al.", "GQA", 2023, "grouped-query attention", "from Multi-Head Checkpoints” (arXiv, 2023)"),
            ("DeepSeek-AI", "DeepSeek-V2", 2024, "multi-head latent attention",
             "Mixture-of-Experts Language Model” (arXiv, 2024)"),
            ("Jiang et al.", "Mistral 7B", 2023, "sliding-window attention with GQA", "“Mistral 7B” (arXiv, 2023)"),
            ("Zhang and Sennrich", "Root Mean Square Layer Normalization", 2019, "RMSNorm",
             "Root Mean Square Layer Normalization” (NeurIPS, 2019)"),
            ("Xiong et al.", "On Layer Normalization in the Transformer Architecture", 2020, "pre-norm",
             "in the Transformer Architecture” (ICML, 2020)"),
            ("Gemma Team", "Gemma 2", 2024, "norms on both sides of each sublayer",
             "Open Language Models at a Practical Size” (arXiv, 2024)"),
            ("Shazeer", "GLU Variants Improve Transformer", 2020, "SwiGLU", "GLU Variants Improve Transformer” (arXiv, 2020)"),
            ("Goodfellow et al.", "Deep Learning", 2016, "concepts built from simpler ones", "(MIT Press, 2016)"),
        )
    ),
]  # fmt: skip


# --------------------------------------------------------------------------------------------
# Worked examples the app can redo
# --------------------------------------------------------------------------------------------

SENTENCE = "The transformer unpacks unhelpful words into smaller pieces before processing them."
GPT2_EXAMPLE, GPT2_TARGET, GPT2_RARE = "Every effort moves you", " forward", " uncharacteristically"


@cache
def tokenizer_example() -> dict:
    """The texts' tokenizer examples, run through the real encodings: the how-models-learn sentence
    through o200k_base (tiktoken's encoding for GPT-5; the text used the GPT-5.x tokenizer), its
    characters, and how much more attention work one token per character would cost ((chars / tokens)^2,
    attention being quadratic in length); GPT-2's walkthrough through GPT-2's BPE: the ids of
    'Every effort moves you', the target ' forward', the vocabulary's make-up and a rare word's pieces."""
    from .tokenizers import get_public_encoding

    o200k, gpt2 = get_public_encoding("o200k_base"), get_public_encoding("gpt2")
    ids = o200k.encode(SENTENCE)
    ranked = gpt2.token_byte_values()  # every token but the special ones: bytes, then one per merge
    byte_tokens = sum(len(b) == 1 for b in ranked)
    return {
        "sentence": SENTENCE,
        "encoding": "o200k_base",
        "tokens": [o200k.decode([i]) for i in ids],
        "token_count": len(ids),
        "characters": len(SENTENCE),
        "attention_work_ratio": (len(SENTENCE) / len(ids)) ** 2,
        "gpt2_text": GPT2_EXAMPLE,
        "gpt2_ids": gpt2.encode(GPT2_EXAMPLE),
        "gpt2_target_ids": gpt2.encode(GPT2_EXAMPLE)[1:] + gpt2.encode(GPT2_TARGET),
        "gpt2_byte_tokens": byte_tokens,
        "gpt2_merges": len(ranked) - byte_tokens,
        "gpt2_special_tokens": len(gpt2.special_tokens_set),
        "gpt2_vocab": gpt2.n_vocab,
        "gpt2_end_of_text_id": gpt2.eot_token,
        "rare_word": GPT2_RARE,
        "rare_word_pieces": [gpt2.decode([i]) for i in gpt2.encode(GPT2_RARE)],
    }


def padding_example(lengths: tuple[int, ...] = (10, 12, 15, 500)) -> dict:
    """how-models-learn's batch of mixed lengths: every sequence padded to the longest, the share
    of the batch that is padding; and two batches of 100 sequences, 10 and 1,000 tokens long."""
    padded = max(lengths) * len(lengths)
    return {
        "lengths": list(lengths),
        "padded_to": max(lengths),
        "real_tokens": sum(lengths),
        "padded_tokens": padded,
        "padding_share": 1 - sum(lengths) / padded,
        "sequences": 100,
        "short_length": 10,
        "long_length": 1000,
        "short_batch_tokens": 100 * 10,
        "long_batch_tokens": 100 * 1000,
    }


def adam_scale_example(small: float = 2e-4, large: float = 4.0) -> dict:
    """how-models-learn's two parameters, one seeing gradients like 0.0001-0.0002, the other like
    8, -1, 4: Adam's step m_hat / (sqrt(v_hat) + eps) on each, from model.lessons (a steady gradient
    of each size, and the text's own sequences), so both move by about the learning rate."""
    eps = lessons.TRANSFORMER_ADAM["eps"]

    def ratio(gs: list[float]) -> float:  # the last step's size over the learning rate (lr = 1)
        theta, state, step = [0.0], formulas.OptState(), 0.0
        for g in gs:
            new, state = formulas.adam_step(theta, [g], state, 1.0, 0.9, 0.98, eps)
            step, theta = theta[0] - new[0], new
        return abs(step)

    small_seq, large_seq = [0.0001, 0.0002, 0.0002], [8.0, -1.0, 4.0]
    return {
        "small_gradients": small_seq,
        "large_gradients": large_seq,
        "small_ratio": ratio(small_seq),
        "large_ratio": ratio(large_seq),
        "small_steady": small,
        "large_steady": large,
        "small_steady_ratio": lessons.eps_ratio(small, eps),
        "large_steady_ratio": lessons.eps_ratio(large, eps),
        "orders_of_magnitude": math.log10(large / small),
        "eps": eps,
    }


def adamw_against_l2(
    sizes: tuple[float, float] = (2e-4, 4.0), steps: int = 200, lr: float = 0.01, weight_decay: float = 0.01
) -> dict:
    """The GPT-1 text's case for decoupled decay, as a run: two weights start at 1 and see gradients
    with no direction (+g, -g, +g, ...), one small, one large. Adam with an L2 penalty (the decay
    added to the gradient, torch.optim.Adam's weight_decay) pulls the small-gradient weight almost to 0
    and barely moves the other, because the penalty is divided by the same sqrt(v) as the gradient;
    AdamW (the decay applied apart) pulls both by the same 1 - (1 - lr wd)^steps. Through
    model.formulas.adam_step, the rule torch's optimisers use."""

    def run(size: float, decay: float, decoupled: bool) -> float:
        theta, state = [1.0], formulas.OptState()
        for t in range(steps):
            g = size if t % 2 == 0 else -size
            theta, state = formulas.adam_step(theta, [g], state, lr, 0.9, 0.999, 1e-8, decay, decoupled)
        return theta[0]

    rows = []
    for size in sizes:
        plain, l2, w = run(size, 0.0, False), run(size, weight_decay, False), run(size, weight_decay, True)
        rows.append(
            {
                "gradient": size,
                "adam": plain,
                "adam_l2": l2,
                "adamw": w,
                "pulled_l2": 1 - l2 / plain,
                "pulled_adamw": 1 - w / plain,
            }
        )
    return {"steps": steps, "lr": lr, "weight_decay": weight_decay, "rows": rows}


def smoothing_tradeoff(epsilon: float = 0.1, vocab: int = 37_000) -> dict:
    """Why label smoothing makes perplexity worse yet need not cost accuracy: the best a smoothed
    model can do is give the right token 1 - eps + eps / V, so even when right it pays -ln of that
    (perplexity above 1, where a one-hot model that is right pays 0), while its top token, the one a
    translation takes, is the same. floor: the loss against the smoothed target that no model beats."""
    p_true = 1 - epsilon + epsilon / vocab
    return {
        "epsilon": epsilon,
        "vocab": vocab,
        "p_true": p_true,
        "p_other": epsilon / vocab,
        "nll_true": -math.log(p_true),
        "perplexity_true": 1 / p_true,
        "top_token_unchanged": p_true > epsilon / vocab,
        "floor": formulas.label_smoothing_floor(epsilon, vocab),
    }


def residual_gradients(depth: int = 96, width: int = 64, gain: float = 0.5, seed: int = 0) -> dict:
    """The exercises' residual argument, run: a stack of `depth` random layers F(x) = W2 tanh(W1 x)
    whose Jacobians are small (weights N(0, gain^2 / width)), with and without the identity path
    (y = x + F(x) or y = F(x)). The norm of d(u . y_l) / dx for a random unit u, at every depth l: the
    plain stack's shrinks like a product of small factors; the residual one's stays near 1, the
    identity in I + dF/dx keeping it there."""
    import torch

    g = torch.Generator().manual_seed(seed)
    weights = [
        (
            torch.randn(width, width, generator=g) * gain / width**0.5,
            torch.randn(width, width, generator=g) * gain / width**0.5,
        )
        for _ in range(depth)
    ]
    x0 = torch.randn(width, generator=g, dtype=torch.float64)
    u = torch.randn(width, generator=g, dtype=torch.float64)
    u = u / u.norm()
    out = {}
    for kind, residual in (("plain", False), ("residual", True)):
        x = x0.clone().requires_grad_(True)
        y, norms = x, []
        for w1, w2 in weights:
            f = w2.double() @ torch.tanh(w1.double() @ y)
            y = y + f if residual else f
            (grad,) = torch.autograd.grad(u @ y, x, retain_graph=True)
            norms.append(float(grad.norm()))
        out[kind] = norms
    return {"depth": depth, "width": width, "gain": gain, "layers": list(range(1, depth + 1)), **out}
