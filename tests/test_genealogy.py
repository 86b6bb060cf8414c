"""GET /api/v1/genealogy against the texts themselves: every number below is read from the seed
files in ../shared/seeds/ (their tables parsed line by line, their sentences matched), never
copied into this test, so a typo in model/genealogy.py fails. Parameter counts are recomputed
from the configs the endpoint returns; every source names an existing seed file, and a paper is
one that file cites."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from seedtext import SEEDS, credits, text

from gptscope.model import genealogy as gen
from gptscope.model.gpt import GPTConfig, count_params, preset_config

pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed texts (../shared/seeds/) are not here")


def table_rows(name: str, first: str) -> dict[str, list[str]]:
    """The tab-separated rows of the table whose header starts with `first`, by their first cell."""
    lines = text(name).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first + "\t"))
    rows = {}
    for line in lines[start + 1 :]:
        if "\t" not in line:
            break
        cells = line.split("\t")
        rows[cells[0]] = cells[1:]
    return rows


def number(s: str) -> float:
    """'124M' -> 124e6, '1.5B' -> 1.5e9, '45.0%' -> 45.0, '116{,}414{,}976' -> 116414976."""
    s = s.replace("{,}", "").replace(",", "").strip().rstrip("%")
    scale = {"M": 1e6, "B": 1e9}.get(s[-1:], 1)
    return float(s[:-1] if scale != 1 else s) * scale


def grab(name: str, pattern: str) -> float:
    m = re.search(pattern, text(name))
    assert m, (name, pattern)
    return number(m.group(1))


@pytest.fixture(scope="module")
def res(client):
    r = client.get("/api/v1/genealogy")
    assert r.status_code == 200, r.text
    return r.json()


def model(res, key):
    return next(m for m in res["models"] if m["key"] == key)


def facts(m) -> dict:
    return {f["name"]: f["value"] for f in m["facts"]}


def config(m) -> dict:
    return {c["name"]: c["value"] for c in m["config"]}


def test_the_models_come_in_the_texts_order(res):
    assert [m["name"] for m in res["models"]] == [
        "Transformer (base)",
        "GPT-1",
        "BERT base",
        "BERT large",
        "GPT-2 Small",
        "GPT-2 Medium",
        "GPT-2 Large",
        "GPT-2 XL",
        "GPT-3",
        "InstructGPT (GPT-3.5)",
    ]
    years = [m["year"] for m in res["models"]]
    assert years == sorted(years)


def test_lambada_by_size_is_the_notes_table(res):
    rows = table_rows(gen.NOTES, "Model")
    assert [p["model"] for p in res["lambada"]] == list(rows)
    for p in res["lambada"]:
        quoted, acc = rows[p["model"]]
        assert p["accuracy"] == number(acc) and p["params_quoted"] == number(quoted), p
        assert facts(model(res, p["model"].lower().replace(" ", "-")))["lambada_zero_shot"] == number(acc)
        # the count from the config rounds to the quoted size (the notes truncate XL's 1.56B to 1.5B)
        if quoted.endswith("B"):
            assert math.floor(p["params_counted"] / 1e8) / 10 == number(quoted) / 1e9, p
        else:
            assert round(p["params_counted"] / 1e6) == number(quoted) / 1e6, p
    assert res["lambada_source"]["seed"] == gen.NOTES


def test_the_lambada_summary_is_computed_from_the_table(res, client):
    """The caption says only what the table shows: the four sizes span about 12x, one tenfold step
    (not several), and each larger size scored higher."""
    rows = table_rows(gen.NOTES, "Model")
    sizes = [number(v[0]) for v in rows.values()]
    acc = [number(v[1]) for v in rows.values()]
    s = res["lambada_summary"]
    assert (s["smallest"], s["largest"]) == (next(iter(rows)), list(rows)[-1])
    assert s["size_ratio"] == pytest.approx(sizes[-1] / sizes[0])
    assert s["tenfold_steps"] == pytest.approx(math.log10(sizes[-1] / sizes[0])) and 1 < s["tenfold_steps"] < 1.1
    assert s["step_ratios"] == pytest.approx([b / a for a, b in itertools.pairwise(sizes)])
    assert s["accuracy_gain"] == pytest.approx(acc[-1] - acc[0])
    assert s["step_gains"] == pytest.approx([b - a for a, b in itertools.pairwise(acc)])
    assert s["every_step_gained"] is all(b > a for a, b in itertools.pairwise(acc))
    assert s["points_per_tenfold"] == pytest.approx(s["accuracy_gain"] / s["tenfold_steps"])
    page = client.get("/genealogy").text
    caption = re.search(r'id="lambada-panel".*?</section>', page, re.S).group(0)
    assert "tenfold" not in caption  # the step count comes from lambada_summary, filled in by the page


# /params' presets of the genealogy's models: the same shape, activation and norm placement
PRESET_OF = {"gpt1": "gpt1", "gpt-2-small": "gpt2", "gpt-2-medium": "gpt2-medium", "gpt-2-large": "gpt2-large"}
PRESET_OF["gpt-2-xl"] = "gpt2-xl"


def test_params_presets_agree_with_the_genealogy(client):
    by_key = {g.key: g for g in gen.generations()}
    for key, preset in PRESET_OF.items():
        ours, theirs = by_key[key].config, preset_config(preset)
        for f in ("vocab_size", "n_ctx", "n_layer", "n_head", "d_model", "d_mlp", "norm", "gelu", "tie_weights", "pos"):
            assert getattr(ours, f) == getattr(theirs, f), (key, f)
        served = client.get("/api/v1/params", params={"preset": preset}).json()["config"]
        assert served["gelu"] == ours.gelu and served["norm"] == ours.norm, key
    # GPT-1: the released code's tanh form, which the GPT-1 text names
    assert by_key["gpt1"].config.gelu == "tanh" and "uses the tanh approximation" in text(gen.GPT1_TEXT)
    assert client.get("/api/v1/params", params={"preset": "gpt1", "mlp": "swiglu"}).json()["config"]["gelu"] is None


def test_gpt1_and_gpt2_small_are_the_notes_training_table(res):
    rows = table_rows(gen.NOTES, "")
    for key, col in (("gpt1", 0), ("gpt-2-small", 1)):
        m = model(res, key)
        cfg, f = config(m), facts(m)
        assert cfg["n_layer"] == number(rows["Layers"][col])
        assert cfg["d_model"] == number(rows["Hidden dim"][col])
        assert cfg["n_head"] == number(rows["Heads"][col])
        assert cfg["n_ctx"] == number(rows["Sequence length"][col])
        assert f["batch"] == number(rows["Batch"][col])
        assert f.get("data", rows["Data"][col]) == rows["Data"][col]
    assert facts(model(res, "gpt1"))["data"] == rows["Data"][0]
    assert facts(model(res, "gpt1"))["params_rounded"] == number(rows["Params"][0])
    assert facts(model(res, "gpt-2-small"))["data"] == rows["Data"][1]
    assert model(res, "gpt-2-small")["params"]["quoted"] == number(rows["Params"][1])
    assert round(model(res, "gpt-2-small")["params"]["total"] / 1e6) == number(rows["Params"][1]) / 1e6


def test_gpt1_counts_are_the_gpt1_texts(res):
    m = model(res, "gpt1")
    p = m["params"]
    assert p["weights_only"] == grab(gen.GPT1_TEXT, r"Summing these gives \$([\d{},]+)\$") == p["quoted"]
    assert p["token_embedding"] == grab(
        gen.GPT1_TEXT, r"embedding matrix accounts for \$[\d{},]+ \\times 768 = ([\d{},]+)\$"
    )
    assert p["pieces"]["position_embedding"] == grab(gen.GPT1_TEXT, r"512 \\times 768 = ([\d{},]+)\$")
    assert round(100 * p["embedding_share"]) == 27  # "roughly twenty-seven percent"
    assert "twenty-seven percent" in text(gen.GPT1_TEXT)
    cfg, f = config(m), facts(m)
    assert cfg["vocab_size"] == grab(gen.GPT1_TEXT, r"vocabulary of \$([\d{},]+)\$ tokens")
    assert f["perplexity"] == grab(gen.GPT1_TEXT, r"perplexity of \$([\d.]+)\$")
    assert f["max_lr"] == 2.5e-4 and "$2.5 \\times 10^{-4}$" in text(gen.GPT1_TEXT)
    assert f["warmup_updates"] == grab(gen.GPT1_TEXT, r"over the first \$(\d+)\$ updates")
    assert f["tokens_per_update"] == grab(gen.GPT1_TEXT, r"64 \\times 512 = ([\d{},]+)\$")
    assert f["snli_examples"] == grab(gen.GPT1_TEXT, r"roughly \$([\d{},]+)\$ examples")
    m9 = re.search(r"SOTA on (\d+) of (\d+) NLP tasks", text(gen.NOTES))
    assert (f["tasks_improved"], f["tasks_evaluated"]) == (int(m9.group(1)), int(m9.group(2)))


def test_gpt2_zero_shot_bleu_and_coqa(res):
    f = facts(model(res, "gpt-2-xl"))
    assert f["bleu_wmt14_en_fr"] == grab(gen.NOTES, r"zero-shot BLEU ([\d.]+)")
    assert f["coqa_f1"] == grab(gen.NOTES, r"\(CoQA\): (\d+) F1 zero-shot")


def test_the_nsp_ablations_are_the_notes_tables(res):
    tables = {t["name"]: t for t in res["tables"]}
    bert = table_rows(gen.NOTES, "Task")
    header = next(line for line in text(gen.NOTES).splitlines() if line.startswith("Task\t")).split("\t")[1:]
    t = tables["bert_nsp_ablation"]
    assert t["columns"] == header
    assert {r["label"]: r["values"] for r in t["rows"]} == {k: [float(x) for x in v] for k, v in bert.items()}
    roberta = table_rows(gen.NOTES, "Setup")
    want = {k: [float(x) for x in " / ".join(v).replace("\t", " / ").split(" / ")] for k, v in roberta.items()}
    t = tables["roberta_nsp"]
    assert {r["label"]: r["values"] for r in t["rows"]} == want
    assert t["columns"] == ["SQuAD 1.1", "SQuAD 2.0", "MNLI", "RACE"]


def test_the_transformer_is_the_notes_table(res):
    rows = {k: v[0] for k, v in table_rows(gen.NOTES, "Parameter").items()}
    m = model(res, "transformer")
    cfg, f = config(m), facts(m)
    assert f"{cfg['n_layer']} / {cfg['n_layer']}" == rows["Layers (Encoder/Decoder)"]
    assert cfg["d_model"] == number(rows["Model dimension"]) and cfg["n_head"] == number(rows["Heads"])
    assert f["d_ff"] == number(rows["FFN inner dimension"])
    assert f["dropout"] == number(rows["Dropout"]) and f["label_smoothing"] == number(rows["Label smoothing"])
    assert f"warmup {f['warmup_steps']} steps" in rows["Learning rate schedule"]
    assert f"β2={f['adam_beta2']}" in rows["Optimizer"]
    assert cfg["vocab_size"] == grab(gen.LEARN_TEXT, r"uniform guess over \$([\d{},]+)\$ tokens")
    p = m["params"]
    assert p["weights_only"] == p["pieces"]["encoder"] + p["pieces"]["decoder"] + p["token_embedding"]


def test_the_transformer_total_the_text_quotes_sits_beside_the_count(res, client):
    """how-models-learn gives the base model's total (65 million; 84 million untied): the genealogy
    serves it as the quoted size, beside the full count, which is /params' count of the same shape."""
    p = model(res, "transformer")["params"]
    quoted = grab(gen.LEARN_TEXT, r"The base model has \$(\d+)\$ million in total") * 1e6
    assert p["quoted"] == quoted and p["quoted_source"]["seed"] == gen.LEARN_TEXT
    assert p["quoted_source"]["quote"] in text(gen.LEARN_TEXT)
    enc_dec = client.get("/api/v1/params", params={"preset": "transformer-base"}).json()["encoder_decoder"]
    assert p["total"] == enc_dec["tied_total"] and enc_dec["stated_tied"] == quoted
    assert p["total"] < quoted and "65M" in p["note"] and "no total" not in p["note"]
    f = facts(model(res, "transformer"))
    assert f["params_untied"] == grab(gen.LEARN_TEXT, r"take the model to roughly \$(\d+)\$ million") * 1e6
    assert f["params_untied"] == enc_dec["stated_untied"]


def test_bert_facts_are_the_notes(res):
    f = facts(model(res, "bert-base"))
    notes = text(gen.NOTES)
    assert f"mask {round(100 * f['mask_rate'])}% of all WordPiece tokens" in notes
    m = re.search(r"Batch: (\d+) sequences × (\d+) tokens = ([\d,]+) tokens/batch", notes)
    assert (f["batch"], f["tokens_per_batch"]) == (int(m.group(1)), number(m.group(3)))
    assert int(m.group(1)) * int(m.group(2)) != f["tokens_per_batch"]  # the notes round; the caption says so
    assert "131,072" in next(x["caption"] for x in model(res, "bert-base")["facts"] if x["name"] == "tokens_per_batch")
    assert f["words"] == grab(gen.NOTES, r"40 epochs over ([\d.]+B) words")
    assert f"{round(100 * f['short_steps_share'])}% of steps use seq_len 128" in notes
    assert [f["mask_token_share"], f["random_token_share"], f["unchanged_share"]] == [0.8, 0.1, 0.1]
    assert "The 80/10/10 Split" in notes
    assert f"with {f['nsp_successor']} (Sentence Order Prediction)" in notes


def test_gpt3_numbers_are_the_exercises(res):
    m = model(res, "gpt3")
    f = facts(m)
    ex = text(gen.EXERCISES)
    assert config(m)["d_model"] == 12288 and "$d=12288$" in ex
    assert f["attention_per_layer"] == grab(gen.EXERCISES, r"4\\times 150,994,944=([\d,]+)")
    assert f["params_per_layer"] == grab(gen.EXERCISES, r"12\\times 150,994,944=([\d,]+)")
    assert m["params"]["pieces"]["attention_weights_per_block"] == f["attention_per_layer"]
    assert m["params"]["pieces"]["per_block_seed_convention"] == f["params_per_layer"]
    assert f["delta_log_loss"] == -grab(gen.EXERCISES, r"approx -([\d.]+)\\text\{nats\}")
    assert f["ratio_to_gpt2"] == grab(gen.EXERCISES, r"175/1\.5\\approx ([\d.]+)")
    assert round(m["params"]["total"] / 1e9) == m["params"]["quoted"] / 1e9 == 175


def test_every_count_is_count_params_of_the_returned_config(res):
    for m in res["models"]:
        if m["key"] == "transformer":
            continue
        cfg = config(m)
        shape = dict(norm="post" if m["key"] in ("gpt1",) or m["key"].startswith("bert") else "pre")
        c = count_params(GPTConfig(**cfg, **shape))
        assert m["params"]["weights_only"] == c["seed_convention"], m["key"]
        assert m["params"]["token_embedding"] == cfg["vocab_size"] * cfg["d_model"]
        assert m["params"]["embedding_share"] == pytest.approx(m["params"]["token_embedding"] / c["seed_convention"])
    shares = [model(res, k)["params"]["embedding_share"] for k in ("gpt1", "gpt-2-xl", "gpt3")]
    assert shares == sorted(shares, reverse=True)
    # the caption's claim: GPT-2 Small, GPT-1's depth and width with a larger vocabulary, has a larger share
    assert model(res, "gpt-2-small")["params"]["embedding_share"] > model(res, "gpt1")["params"]["embedding_share"]
    bert = model(res, "bert-base")["params"]["pieces"]
    assert round(bert["total_with_bert_heads"] / 1e6) == 110  # the paper's rounded figure


def test_changes_are_sorted_as_the_exercises_sort_them(res):
    kinds = {m["key"]: {c["kind"] for c in m["changes"]} for m in res["models"]}
    assert "architecture" in kinds["gpt-2-small"]  # pre-LN
    assert kinds["gpt3"] == {"training/alignment"}  # few-shot in-context learning
    assert kinds["instructgpt"] == {"training/alignment"}  # RLHF
    assert all(k <= {"architecture", "training/alignment"} for k in kinds.values())


def sources(res):
    for m in res["models"]:
        for c in m["config"]:
            yield c["source"], c["from_text"]
        for x in m["changes"] + m["facts"]:
            yield x["source"], True
            for also in x.get("also", []):
                yield also, True
        if m["params"]["quoted_source"]:
            yield m["params"]["quoted_source"], False
    for t in res["tables"]:
        yield t["source"], True
    yield res["lambada_source"], True
    w = res["worked"]
    for k in ("perplexity_drop", "underflow", "layernorm"):
        yield w[k]["source"], True
    for x in w["losses"]:
        yield x["source"], True


def test_every_source_names_a_seed_file_and_a_paper_it_cites(res):
    assert sorted(res["seeds"]) == sorted(p.name for p in SEEDS.glob("*.txt"))
    for src, from_text in sources(res):
        assert (SEEDS / src["seed"]).is_file(), src
        if src["paper"] and from_text:
            surname = src["paper"].split()[0].rstrip(",")
            assert surname in text(src["seed"]), f"{src['seed']} does not cite {src['paper']}"


def test_every_fact_cites_the_paper_its_text_gives_for_it(res):
    """A fact's paper is the one its own text cites for it (label smoothing's 0.1 is the Transformer's,
    not Müller et al.'s later finding), checked at the quote."""
    checked = 0
    for src, from_text in sources(res):
        if src["paper"] and from_text and src.get("quote"):
            assert src["quote"] in text(src["seed"]), src
            assert credits(src["seed"], src["quote"], src["paper"]), src
            checked += 1
    assert checked >= 40
    ls = next(f for f in model(res, "transformer")["facts"] if f["name"] == "label_smoothing")
    assert ls["source"]["paper"].startswith("Vaswani") and "Szegedy" in ls["caption"]


def test_every_fact_and_change_has_a_quote_from_its_text(res):
    for m in res["models"]:
        for x in m["facts"] + m["changes"]:
            for src in [x["source"], *x.get("also", [])]:
                assert src["quote"] and src["quote"] in text(src["seed"]), (m["key"], x)


def test_citations_the_issue_names(res):
    papers = {(s["seed"], s["paper"]) for s, _ in sources(res) if s["paper"]}
    assert any(p.startswith("Xiong") for _, p in papers)
    assert any(p.startswith("Press and Wolf") for _, p in papers)
    assert any(p.startswith("Müller") for _, p in papers)


def test_the_worked_examples(res):
    w = res["worked"]
    d = w["perplexity_drop"]
    assert d["vocab"] == 40478 and round(d["uniform_loss"], 1) == grab(gen.GPT1_TEXT, r"\\ln 40478 \\approx ([\d.]+)")
    assert round(d["pretrained_loss"], 1) == grab(gen.GPT1_TEXT, r"\\ln 18\.4 \\approx ([\d.]+)")
    assert round(d["drop"], 1) == 7.7 and "seven-and-a-half-nat" in text(gen.GPT1_TEXT)
    u = w["underflow"]
    assert (u["n"], u["p"], u["product_float32"]) == (100, 0.1, 0.0)
    assert round(u["log10_product"]) == -100 and "$10^{-100}$" in text(gen.LEARN_TEXT)
    ln = w["layernorm"]
    gpt2 = text(gen.GPT2_TEXT)
    assert f"x[0,0] = {ln['x']}" in gpt2 and f"mean[0,0] = {ln['mean']}" in gpt2 and f"var[0,0] = {ln['var']}" in gpt2
    assert f"{ln['std']:.3f}" == "0.370" and f"≈ {ln['normalised']:.3f}" in gpt2
    learn = text(gen.LEARN_TEXT)
    for x in w["losses"]:
        quoted = f"{x['loss']:.3f}"
        assert quoted in text(x["source"]["seed"]), x
    assert "p_y = 0.9$ incurs about $0.105$" in learn
    assert len(w["curve_p"]) == len(w["curve_loss"]) and all(
        b == pytest.approx(-math.log(a)) for a, b in zip(w["curve_p"], w["curve_loss"])
    )


def test_the_page_and_its_twin(client):
    r = client.get("/genealogy")
    assert r.status_code == 200 and '<link rel="alternate" type="application/json" href="/api/v1/genealogy">' in r.text
    assert r.headers["link"] == '</api/v1/genealogy>; rel="alternate"; type="application/json"'
    assert 'href="/genealogy" aria-current="page">The family tree</a>' in r.text


def test_worked_examples_at_other_numbers(client):
    r = client.get(
        "/api/v1/genealogy/worked", params={"vocab": 50257, "perplexity": 1, "n": 20, "p": 0.5, "loss_p": 0.25}
    )
    assert r.status_code == 200, r.text
    w = r.json()
    assert (
        w["perplexity_drop"]["drop"] == pytest.approx(math.log(50257)) and w["perplexity_drop"]["pretrained_loss"] == 0
    )
    assert w["underflow"]["product_float32"] == pytest.approx(0.5**20) and w["underflow"]["log_sum"] == pytest.approx(
        20 * math.log(0.5)
    )
    assert w["chosen"] == {"p": 0.25, "loss": pytest.approx(math.log(4))}
    worse = client.get("/api/v1/genealogy/worked", params={"vocab": 100, "perplexity": 400}).json()
    assert worse["perplexity_drop"]["drop"] == pytest.approx(-math.log(4))  # worse than uniform: a negative drop
    default = client.get("/api/v1/genealogy/worked").json()
    assert default == client.get("/api/v1/genealogy").json()["worked"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"perplexity": 0.5}, "perplexity"),  # below 1: surer than certain
        ({"p": 0}, "p"),
        ({"loss_p": 1.5}, "loss_p"),
        ({"n": 0}, "n"),
        ({"var": -1}, "var"),
        ({"vocab": "many"}, "vocab"),
    ],
)
def test_bad_worked_input_is_a_422_naming_the_field(client, params, field):
    r = client.get("/api/v1/genealogy/worked", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", field], r.text
