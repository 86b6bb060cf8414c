"""Every number the five seed texts give is served by a GET endpoint, in a named field, with its seed.

The texts are parsed here for their numbers (digits, scientific notation, sizes written 117M or
"4.5 million", percentages, and numbers written in words, "twelve layers", "four and a half
million", "twenty-seven percent"), never copied into this file. A number counts as served when an
answer of GET /api/v1/genealogy or GET /api/v1/genealogy/texts holds it in an object whose source
names that seed (a fact's ``source`` or ``also``, or a field ``X`` beside its ``X_source``), at the
precision the text writes it ("about 19 million" is served by 18,944,000). What is not counted as a
number the text gives is listed in EXCLUDED, each with its reason; a number a rule would leave out
that is still a model's figure is served anyway and checked in MUST_SERVE.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest
from seedtext import GPT2_TEXT as GPT2_SEED
from seedtext import LEARN_TEXT as LEARN_SEED
from seedtext import NOTES as NOTES_SEED
from seedtext import SEEDS, credits, text

pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed texts (../shared/seeds/) are not here")

# --- what is not a number the text gives, and why --------------------------------------------

SKIPPED_LINES = [
    # when each post was written: a date of the post, not a fact it teaches
    (r"^Written \w+ \d{1,2}, \d{4} at \d", "the post's writing date"),
    (r"^\w{3}, \d{1,2} \w{3} \d{4} \d\d:\d\d:\d\d", "the post's writing date"),
]

EXCLUDED = [  # (pattern, reason): each match is blanked out before numbers are read
    (r"https?://\S+|arXiv:\d+\.\d+", "a link or an arXiv identifier, not a figure"),
    (
        r"GPT-\d(?:\.\d|\.x)?|Gemma \d|Mistral \d+B|DeepSeek-V\d|WMT-\d+|SST-\d|SQuAD \d\.\d(?:/\d\.\d)?|UTF-\d"
        r"|3Blue1Brown|\bL[12](?:\.\d)?\b|β\d|\b[23]D\b|word2vec",
        "a digit inside a name (GPT-2, Gemma 2, Mistral 7B, SQuAD 1.1, UTF-8, L2, β1, a 2D plane)",
    ),
    (r"Figure \d+|Table \d+|step \d+\.\.", "a reference to a figure, a table or a step of another page"),
    (r"^\d+\. |^• \(\w\) → \d:|\((?:\d|i{1,3}|iv)\)", "the numbering of a list or of exercise answers"),
    (r"\\mathbb\{1\}|\bO\(1\)|diagonal=1|dim=-1", "notation: the indicator, O(1), a code argument"),
    # exponents, subscripts and superscripts give a formula its shape; 10^k is read first, as a number
    (
        r"(?<!10)\^\{[^}]*\}|(?<!10)\^-?[\d./]+|_\{[^}]*\}|_[\w\d]",
        "an exponent, subscript or superscript of a formula",
    ),
    (r"\b\d+(?=[a-z]\b|[a-z]\^|[a-z]\\times|[a-z]\+|[a-z]=)", "a coefficient of a variable (4d², 12d², 2i, 0.5x)"),
    # numbers invented to make an argument, not figures of a model or a paper
    (
        r"(?i:position) \$9\$ ten thousand times|(?i:position) \$(?:90|400|401|3)\$|five tokens earlier",
        "example positions of the learned-position argument",
    ),
    (r"The 80/10/10 Split", "a heading: the split is given below it as 80%, 10% and 10%"),
    (r"being \$95\\%\$ confident", "an illustration of a confidence a one-hot target never rewards"),
    (r"\\\$80,000", "the house-price example of a linear model"),
    (r"from 100 steps ago", "an illustration of an RNN forgetting"),
    (r"by 10x, squash the East direction to 0.1x|90-degree", "the picture of what an orthogonal matrix does"),
]

SMALL_INTEGERS = range(5)
# Plain 0 to 4 (and their words) are the bounds, identities and small counts of formulas and
# arguments: probabilities sum to 1, mean 0 and variance 1, -ln 1 = 0, position 1 to 4, "two
# things", "three lines", 4 x 768^2. They are not required; those that are a model's figure are
# served anyway (MUST_SERVE). A small number with a unit, a scale or a percent sign is required.

MUST_SERVE = [  # (seed, value): small numbers that are figures, served though the rule above skips them
    ("gpt1-genealogy.txt", 2),  # the [-2, 2] band of pre-activations
    ("gpt1-genealogy.txt", 2),  # two stages: pretraining, then fine-tuning
    ("gpt-family-exercises.txt", 4),  # four attention matrices (4 d^2)
    ("llm-pretraining-for-generalists.txt", 4),  # the four-token example; 32 / 8 = 4 query heads per KV head
    ("how-models-learn.txt", 4),  # gradients around 4 in Adam's example
]

# --- reading numbers --------------------------------------------------------------------------

UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WORDS = {w: i for i, w in enumerate(UNITS)} | {w: 20 + 10 * i for i, w in enumerate(TENS)}
SCALES = {"hundred": 100, "thousand": 1e3, "million": 1e6, "billion": 1e9}
FRACTIONS = {"half": 0.5, "quarter": 0.25, "tenth": 0.1, "two-thirds": 2 / 3}
WORD = rf"(?:{'|'.join(TENS)})(?:-(?:{'|'.join(UNITS[1:10])}))?|{'|'.join(sorted(UNITS, key=len, reverse=True))}"
WORD_RE = re.compile(
    rf"\b(?P<w>{WORD}|a|an)(?P<half>[\s-]and[\s-]a[\s-]half)?(?P<scales>(?:[\s-](?:hundred|thousand|million|billion))*)"
    r"(?P<pct>\s+percent)?\b",
    re.I,
)
FRACTION_RE = re.compile(r"\b(?:two-thirds|half|quarter|tenth)\b", re.I)
DIGITS_RE = re.compile(
    r"(?<![\w.\\])(?P<sign>[-−])?(?P<int>\d{1,3}(?:(?:\{,\}|,)\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?P<sci>\s*(?:\\times|×)\s*10\^\{?(?P<exp>[-−]?\d+)\}?)?"
    r"(?P<pow>\^\{?(?P<pexp>[-−]?\d+)\}?)?"
    r"(?P<suffix>(?:\$?\s*(?:million|billion|thousand)\b)|[MBK]\b|\\?%|\s*percent\b)?"
)


@dataclass(frozen=True)
class Number:
    seed: str
    line: int
    raw: str
    value: float  # with its scale: 4.5 million -> 4.5e6, 45.0% -> 45.0 (percent=True)
    decimals: int  # digits after the point as written
    scale: float  # 1, 1e3, 1e6, 1e9 or 10^k
    percent: bool

    @property
    def small(self) -> bool:
        return self.scale == 1 and not self.percent and abs(self.value) in SMALL_INTEGERS


def _blank(line: str, pattern: str) -> str:
    return re.sub(pattern, lambda m: " " * len(m.group(0)), line)


def _digits(seed: str, i: int, line: str) -> list[Number]:
    out = []
    for m in DIGITS_RE.finditer(line):
        mantissa = float(m["int"].replace("{,}", "").replace(",", "") + (m["frac"] or ""))
        decimals, scale, pct = len(m["frac"] or ".") - 1, 1.0, False
        if m["sci"]:
            scale = 10.0 ** int(m["exp"].replace("−", "-"))
        elif m["pow"]:
            if mantissa != 10:  # x^2 on a number: blanked as an exponent already, so only 10^k comes here
                continue
            mantissa, scale = 1.0, 10.0 ** int(m["pexp"].replace("−", "-"))
        suffix = (m["suffix"] or "").strip("$ ").lower()
        if suffix in ("million", "m"):
            scale = 1e6
        elif suffix in ("billion", "b"):
            scale = 1e9
        elif suffix in ("thousand", "k"):
            scale = 1e3
        elif suffix in ("%", "\\%", "percent"):
            pct = True
        sign = -1 if m["sign"] else 1
        out.append(Number(seed, i, m.group(0).strip(), sign * mantissa * scale, decimals, scale, pct))
    return out


def _words(seed: str, i: int, line: str) -> list[Number]:
    out = []
    for m in WORD_RE.finditer(line):
        w, scales = m["w"].lower(), m["scales"].lower().replace("-", " ").split()
        if w in ("a", "an") and not scales:
            continue
        value = 1.0 if w in ("a", "an") else float(WORDS[w.split("-")[0]] + (WORDS[w.split("-")[1]] if "-" in w else 0))
        if m["half"]:
            value += 0.5
        scale = 1.0
        for s in scales:
            scale *= SCALES[s]
        out.append(Number(seed, i, m.group(0), value * scale, 1 if m["half"] else 0, scale, bool(m["pct"])))
    for m in FRACTION_RE.finditer(line):
        before = line[max(0, m.start() - 7) : m.start()]
        if "and a " in before or "and-a-" in before:  # "four and a half": read above
            continue
        out.append(Number(seed, i, m.group(0), FRACTIONS[m.group(0).lower()], 3, 1.0, False))
    return out


def read(seed: str, body: str, keep_small: bool = False) -> list[Number]:
    """The numbers of `body` (a seed text, or a quote of one), after the exclusions above."""
    found = []
    for i, line in enumerate(body.splitlines(), 1):
        if any(re.search(p, line) for p, _ in SKIPPED_LINES):
            continue
        for pattern, _ in EXCLUDED:
            line = _blank(line, pattern)
        found += [n for n in _digits(seed, i, line) + _words(seed, i, line) if keep_small or not n.small]
    return found


def numbers(seed: str) -> list[Number]:
    """Every number the seed gives, after the exclusions above."""
    return read(seed, text(seed))


# --- what the API serves ----------------------------------------------------------------------


def numeric_leaves(x) -> list[float]:
    if isinstance(x, bool):
        return []
    if isinstance(x, int | float):
        return [float(x)]
    if isinstance(x, dict):
        if "source" in x and isinstance(x["source"], dict):
            return []  # an object with a source of its own is collected for that source
        return [v for k, y in x.items() if not k.endswith("source") for v in numeric_leaves(y)]
    if isinstance(x, list):  # a long list is a computed curve (a run's per-layer norms), not numbers a text gives
        return [v for y in x for v in numeric_leaves(y)] if len(x) <= 16 else []
    return []


def served(answer, out: dict[str, set[float]] | None = None) -> dict[str, set[float]]:
    """seed -> the numbers the answer gives under a source naming that seed."""
    out = {} if out is None else out
    if isinstance(answer, dict):
        src = answer.get("source")
        if isinstance(src, dict) and "seed" in src:
            own = [v for k, y in answer.items() if k not in ("source", "also") for v in numeric_leaves(y)]
            for s in [src, *answer.get("also", [])]:
                out.setdefault(s["seed"], set()).update(own)
        for k, y in answer.items():
            if k.endswith("_source") and isinstance(y, dict) and "seed" in y:
                out.setdefault(y["seed"], set()).update(numeric_leaves(answer.get(k[: -len("_source")])))
            served(y, out)
    elif isinstance(answer, list):
        for y in answer:
            served(y, out)
    return out


def matches(n: Number, values: set[float]) -> bool:
    target = abs(n.value)
    for v in map(abs, values):
        candidates = [v, v * 100] if n.percent else [v]
        for c in candidates:
            if math.isclose(c, target, rel_tol=1e-9, abs_tol=1e-300):
                return True
            if n.scale and round(c / n.scale, n.decimals) == round(target / n.scale, n.decimals):
                return True
    return False


@pytest.fixture(scope="module")
def served_numbers(client) -> dict[str, set[float]]:
    out: dict[str, set[float]] = {}
    for path in ("/api/v1/genealogy", "/api/v1/genealogy/texts"):
        r = client.get(path)
        assert r.status_code == 200, r.text
        served(r.json(), out)
    return out


SEED_FILES = sorted(p.name for p in SEEDS.glob("*.txt")) if SEEDS.is_dir() else []


@pytest.mark.parametrize("seed", SEED_FILES)
def test_every_number_of_the_text_is_served(seed, served_numbers):
    values = served_numbers.get(seed, set())
    missing = sorted({(n.line, n.raw) for n in numbers(seed) if not matches(n, values)})
    assert not missing, f"{seed}: numbers the API does not serve with this seed: {missing}"


@pytest.mark.parametrize(("seed", "value"), MUST_SERVE)
def test_small_figures_are_served_too(seed, value, served_numbers):
    assert float(value) in served_numbers.get(seed, set())


def test_the_reader_reads_the_forms_the_texts_use():
    """The parser itself, on the texts' own forms (so a number it misread could not pass unseen)."""
    got = {(n.raw, n.value, n.percent) for n in numbers("gpt1-genealogy.txt")}
    assert ("40{,}478", 40478, False) in got and ("2.5 \\times 10^{-4}", 2.5e-4, False) in got
    assert ("four and a half million", 4.5e6, False) in got and ("twenty-seven percent", 27, True) in got
    assert any(n.raw.endswith("10^9") and n.value == 1e9 for n in numbers("gpt1-genealogy.txt"))
    notes = {(n.raw, n.value) for n in numbers("gpt-bert-transformer-notes.txt")}
    assert ("117M", 117e6) in notes and ("1.5B", 1.5e9) in notes and ("128,000", 128000) in notes
    for s in SEED_FILES:  # nothing is read from the posts' dates
        dated = {
            i for i, line in enumerate(text(s).splitlines(), 1) if any(re.search(p, line) for p, _ in SKIPPED_LINES)
        }
        assert dated.isdisjoint(n.line for n in numbers(s))
    assert len({n.line for n in numbers("gpt-bert-transformer-notes.txt")}) > 40
    assert not any("GPT" in n.raw for s in SEED_FILES for n in numbers(s))


# --- each fact against its quote, its computation and its paper ----------------------------------


@pytest.fixture(scope="module")
def answers(client) -> tuple[dict, dict]:
    return client.get("/api/v1/genealogy").json(), client.get("/api/v1/genealogy/texts").json()


def quoted_facts(genealogy: dict, texts: dict):
    """(value, source) of every fact that carries a quote: the model cards' facts (and their other
    texts), their quoted sizes, and the texts' other numbers."""
    for m in genealogy["models"]:
        for f in m["facts"]:
            for src in [f["source"], *f["also"]]:
                yield f["value"], src
        if m["params"]["quoted_source"] and m["params"]["quoted_source"]["quote"]:
            yield m["params"]["quoted"], m["params"]["quoted_source"]
    for f in texts["facts"]:
        yield f["value"], f["source"]


def test_every_quote_is_the_texts_and_gives_the_facts_number(answers):
    checked = 0
    for value, src in quoted_facts(*answers):
        assert src["quote"] in text(src["seed"]), src
        if isinstance(value, str):
            continue
        found = read(src["seed"], src["quote"], keep_small=True)
        assert any(matches(n, {value}) for n in found), (value, src["quote"], [n.raw for n in found])
        checked += 1
    assert checked > 150


def test_each_computation_agrees_with_the_text(answers):
    """Where the app computes a number the text gives, the two agree to the text's own rounding
    ("roughly thirty times" is 30.6; "crudely half" is 0.55)."""
    _, texts = answers
    computed = [f for f in texts["facts"] if f["computed"] is not None]
    assert len(computed) > 50
    for f in computed:
        assert f["how"], f["name"]
        assert f["computed"] == pytest.approx(f["value"], rel=0.15), (f["name"], f["value"], f["computed"])


# the paper of each model card's own figures, as the texts credit it; None: no text credits one
CARD_PAPERS = {
    "Transformer (base)": ("Vaswani", 2017),
    "GPT-1": ("Radford", 2018),
    "BERT": ("Devlin", 2018),
    "GPT-2": ("Radford", 2019),
    "GPT-3": None,
    "InstructGPT": None,
}


def card_paper(name: str):
    return next(v for k, v in CARD_PAPERS.items() if name.startswith(k))


def test_each_paper_is_credited_for_its_own_claim(answers):
    """A fact names a paper only where the text credits that paper for that very claim (seedtext.credits:
    the citation in the quote's sentence, the post or text about the paper, not a part the text calls
    its own reconstruction), and a model's size only with that model's paper (175B is GPT-3's, which no
    text credits to a paper, though the GPT-2 post that gives it cites Radford et al. 2019)."""
    genealogy, texts = answers
    sizes = {m["params"]["quoted"]: m["name"] for m in genealogy["models"] if m["params"]["quoted"]}
    checked = 0
    for value, src in quoted_facts(genealogy, texts):
        if not src["paper"]:
            continue
        assert credits(src["seed"], src["quote"], src["paper"]), src
        checked += 1
        size = next(
            (n for q, n in sizes.items() if isinstance(value, (int, float)) and abs(value - q) < 0.01 * q), None
        )
        if size and value >= 1e6:
            want = card_paper(size)
            assert want and src["paper"].startswith(want[0]) and f"({want[1]})" in src["paper"], (size, src)
    assert checked > 100


@pytest.mark.parametrize(
    "seed,quote,paper",
    [  # what the check above refuses: each was once served so
        (
            NOTES_SEED,
            "117M → 1.5B → 175B",
            "Radford et al., Language Models are Unsupervised Multitask Learners (2019)",
        ),
        (LEARN_SEED, "is about $16$", "Vaswani et al., Attention Is All You Need (2017)"),
        (GPT2_SEED, "If a layer has 32 query heads", "Ainslie et al., GQA: Training Generalized Multi-Query (2023)"),
        (GPT2_SEED, "when the drop rate is 20%", "Srivastava et al., Dropout: A Simple Way (2014)"),
    ],
)
def test_a_paper_the_text_does_not_credit_for_the_claim_is_refused(seed, quote, paper):
    if "175B" in quote:  # credited by the post's words, refused by the size rule of the test above
        assert credits(seed, quote, paper) and card_paper("GPT-3") is None
    else:
        assert not credits(seed, quote, paper)


def test_each_paper_is_cited_where_its_quote_is(answers):
    _, texts = answers
    for p in texts["papers"]:
        line = next(x for x in text(p["source"]["seed"]).splitlines() if p["source"]["quote"] in x)
        assert str(p["year"]) in line, p
        assert p["source"]["paper"].startswith(p["who"]) and str(p["year"]) in p["source"]["paper"]
    # every year a text gives for a paper is served: the years in citations are read by the test above
    assert {p["year"] for p in texts["papers"]} >= {1958, 1989, 2014, 2015, 2016, 2017, 2018, 2019, 2020, 2024}


def grab(seed: str, pattern: str) -> str:
    m = re.search(pattern, text(seed))
    assert m, (seed, pattern)
    return m.group(1)


def ints(s: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", s)]


def test_the_tokenizer_examples_are_the_texts(answers):
    """The texts' tokenizer numbers, redone by the real encodings."""
    _, texts = answers
    st, g2 = texts["sentence_tokens"], texts["gpt2_tokens"]
    learn, gpt2 = "how-models-learn.txt", "llm-pretraining-for-generalists.txt"
    assert st["sentence"] in text(learn)
    assert st["token_count"] == int(grab(learn, r"splits it into (\d+) tokens"))
    assert st["characters"] == int(grab(learn, r"The sentence above is (\d+) characters")) == len(st["sentence"])
    assert "".join(st["tokens"]) == st["sentence"]
    assert round(st["attention_work_ratio"], -1) == 30 and "roughly thirty times the attention work" in text(learn)
    assert g2["ids"] == ints(grab(gpt2, r"token ids : \[([\d, ]+)\]"))
    assert g2["target_ids"] == ints(grab(gpt2, r"target indices \$\[([\d, ]+)\]\$"))
    parts = ints(grab(gpt2, r"vocabulary of \$(256 \+ 50\{,\}000 \+ 1 = 50\{,\}257)\$").replace("{,}", ""))
    assert [g2["byte_tokens"], g2["merges"], g2["special_tokens"], g2["vocab"]] == parts
    assert g2["end_of_text_id"] == g2["vocab"] - 1
    pieces = re.findall(r"'([^']*)'", grab(gpt2, r"uncharacteristically” becomes (\[[^\]]*\])"))
    assert g2["rare_word_pieces"] == pieces and g2["rare_word"] == " uncharacteristically"


def test_the_padding_and_adam_examples_are_the_texts(answers):
    _, texts = answers
    learn = "how-models-learn.txt"
    pad = texts["padding"]
    assert pad["lengths"] == ints(grab(learn, r"a batch containing lengths ([\d, and]+) pads"))
    assert pad["padded_tokens"] == max(pad["lengths"]) * len(pad["lengths"]) and 0.7 < pad["padding_share"] < 0.75
    assert pad["long_batch_tokens"] == 100 * pad["short_batch_tokens"]
    adam = texts["adam_scale"]
    m = re.search(
        r"gradients like \$\\\{([^$]*?), \\ldots \\\}\$ while another receives \$\\\{([^$]*?), \\ldots", text(learn)
    )
    small, large = ([float(x) for x in g.split(",")] for g in m.groups())
    assert adam["small_gradients"] == small and adam["large_gradients"] == large
    # both move by about the learning rate, though the gradients are four orders of magnitude apart
    assert adam["small_steady_ratio"] == pytest.approx(1, abs=1e-3) and adam["large_steady_ratio"] == pytest.approx(1)
    assert round(adam["orders_of_magnitude"]) == 4 and adam["large_ratio"] < adam["small_ratio"] <= 1


def test_the_runs_of_what_the_texts_argue_without_a_number(answers):
    """AdamW against an L2 penalty (against torch's own Adam and AdamW), what smoothing does to
    perplexity, and a deep stack with and without its residual path."""
    torch = pytest.importorskip("torch")
    _, texts = answers
    run = texts["adamw_l2"]
    small, large = run["rows"]
    assert small["gradient"] < large["gradient"]
    assert small["pulled_l2"] > 0.9 and large["pulled_l2"] < 0.01  # L2 decays the small-gradient weight hardest
    uniform = 1 - (1 - run["lr"] * run["weight_decay"]) ** run["steps"]
    assert small["pulled_adamw"] == pytest.approx(uniform, rel=0.02) == large["pulled_adamw"]
    for row in run["rows"]:
        for key, opt in (("adam_l2", torch.optim.Adam), ("adamw", torch.optim.AdamW)):
            w = torch.ones(1, dtype=torch.float64, requires_grad=True)
            o = opt([w], lr=run["lr"], weight_decay=run["weight_decay"])
            for t in range(run["steps"]):
                w.grad = torch.full_like(w, row["gradient"] if t % 2 == 0 else -row["gradient"])
                o.step()
            assert w.item() == pytest.approx(row[key], rel=1e-9), key
    sm = texts["smoothing"]
    assert sm["nll_true"] == pytest.approx(-math.log(sm["p_true"])) and sm["perplexity_true"] > 1
    assert sm["top_token_unchanged"] and round(sm["floor"], 2) == 1.38
    res = texts["residual"]
    assert res["depth"] == 96 == len(res["plain"]) == len(res["residual"])  # the exercises' 96 layers
    assert res["plain"][-1] < 1e-20 < min(res["residual"]) and min(res["residual"]) > 0.5
    assert res["plain"][0] > res["plain"][11] > res["plain"][47] > res["plain"][95]  # a product of small factors
