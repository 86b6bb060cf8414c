"""Issue #62's last facts of the texts: each served with its seed and a verbatim quote (a paper only where
the text credits it), each where a reader meets it (the family tree, /learn's scaling and KV-cache panels,
the forward page's BOS switch), and attention's blindness to order run live on the prompt in the
position stage: block 0's attention gives each token the same output in either word order once the
position signal is gone, and a different one with the model's own positions (learned rows or RoPE)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from seedtext import SEEDS, credits, text

pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed texts (../shared/seeds/) are not here")

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"

# (where: a model card's key or "texts", the fact's name, its seed, words its quote must hold)
FACTS = [
    ("gpt1", "replaced_word_vectors", "gpt1-genealogy.txt", "one vector per word type"),
    ("texts", "bos_empty_prefix", "how-models-learn.txt", "start-of-sequence token"),
    ("texts", "mla", "llm-pretraining-for-generalists.txt", "MLA instead compresses"),
    ("texts", "loss_floor", "gpt-family-exercises.txt", "the entropy of language"),
    ("texts", "compute_optimal", "gpt-family-exercises.txt", "Chinchilla"),
    ("gpt-2-xl", "rouge_l_cnn_dm", "gpt-bert-transformer-notes.txt", "ROUGE-L"),
    ("gpt-2-small", "inspiration", "llm-pretraining-for-generalists.txt", "translate some names"),
    ("bert-base", "mask_mismatch", "gpt-bert-transformer-notes.txt", "[MASK] never appears downstream"),
    ("transformer", "attention_without_positions", "gpt-bert-transformer-notes.txt", "permutation-invariant"),
    ("transformer", "dropout_ablation", "how-models-learn.txt", "dropping it hurt"),
]


@pytest.fixture(scope="module")
def served(client) -> dict:
    genealogy = client.get("/api/v1/genealogy").json()
    texts = client.get("/api/v1/genealogy/texts").json()
    out = {("texts", f["name"]): f for f in texts["facts"]}
    out.update({(m["key"], f["name"]): f for m in genealogy["models"] for f in m["facts"]})
    return out


@pytest.mark.parametrize(("where", "name", "seed", "words"), FACTS)
def test_each_fact_is_served_with_its_quote(served, where, name, seed, words):
    fact = served[(where, name)]
    src = fact["source"]
    assert src["seed"] == seed and words in src["quote"] and src["quote"] in text(seed), src
    assert not src["paper"] or credits(seed, src["quote"], src["paper"]), src
    for other in fact.get("also", []):
        assert other["quote"] in text(other["seed"]), other
    assert fact["caption"] and src["quote"] not in fact["caption"]  # the caption is the app's words (test_own_words)


def test_papers_are_named_only_where_the_text_credits_them(served):
    assert served[("texts", "mla")]["source"]["paper"].startswith("DeepSeek-AI")  # cited in the MLA sentence
    assert served[("transformer", "dropout_ablation")]["source"]["paper"].startswith("Vaswani")  # "the paper's"
    for key in [("gpt1", "replaced_word_vectors"), ("texts", "bos_empty_prefix"), ("gpt-2-small", "inspiration")]:
        assert served[key]["source"]["paper"] is None, key


def test_learn_shows_the_floor_chinchilla_and_mla(client):
    scaling = client.get("/api/v1/curves/scaling-law").json()
    assert [f["name"] for f in scaling["texts"]] == ["loss_floor", "compute_optimal"]
    kv = client.get("/api/v1/curves/kv-cache").json()
    assert [f["name"] for f in kv["texts"]] == ["mla"]
    for f in scaling["texts"] + kv["texts"]:
        assert f["source"]["quote"] in text(f["source"]["seed"])
    js = {n: (ROOT / "static/js/learn" / n).read_text(encoding="utf-8") for n in ("scaling.js", "kvcache.js")}
    html = (ROOT / "templates/learn.html").read_text(encoding="utf-8")
    assert "b.texts" in js["scaling.js"] and "b.texts" in js["kvcache.js"]
    assert 'id="scaling-texts"' in html and 'id="kv-texts"' in html


def test_the_bos_switch_and_field_name_the_empty_prefix(client):
    schemas = client.app.openapi()["components"]["schemas"]
    shared = [
        n
        for n, sch in schemas.items()
        if "bos_empty_prefix" in sch.get("properties", {}).get("bos", {}).get("description", "")
    ]
    assert "ForwardRequest" in shared and len(shared) >= 5, shared  # BOS_FIELD: every endpoint that shares it
    assert "empty beginning" in schemas["ForwardRequest"]["properties"]["bos"]["description"]
    page = (ROOT / "templates/index.html").read_text(encoding="utf-8")
    assert page.index('id="bos"') < page.index('id="bos-fact"') < page.index("{% endif %}", page.index('id="bos"'))
    js = (ROOT / "static/js/forward/main.js").read_text(encoding="utf-8")
    assert '"/genealogy/texts"' in js and '"bos_empty_prefix"' in js


def permutation(client, text_: str) -> dict:
    r = client.post("/api/v1/forward", json={"text": text_, "include": ["embeddings"]})
    assert r.status_code == 200, r.text
    return r.json()["embeddings"]["permutation"]


def test_the_builtin_model_ignores_order_only_without_its_position_rows(client):
    c = permutation(client, PROMPT)
    T = len(c["order"])
    assert c["pos"] == "learned" and c["swapped"] == [0, T - 1] and sorted(c["order"]) == list(range(T))
    assert c["without_positions"] < 1e-4 < 1e-3 < c["with_positions"]
    assert c["causal_without_positions"] > 1e-3  # the causal mask alone tells the orders apart
    assert len(c["per_token_with"]) == len(c["per_token_without"]) == T
    assert c["fact"]["name"] == "attention_without_positions" and "Dog bites man" in c["fact"]["also"][0]["quote"]
    one = client.post("/api/v1/forward", json={"ids": [5], "include": ["embeddings"]}).json()["embeddings"]
    assert one["permutation"] is None  # one token: no order to change


def serve_tiny(tmp_path, pos: str):
    """A tiny random model with sharp first-block attention (its W_Q, W_K, W_V scaled up), so that where
    a token stands can matter at all."""
    from fastapi.testclient import TestClient

    from gptscope.model import checkpoint as ckpt
    from gptscope.model.gpt import GPT, GPTConfig
    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=61, n_ctx=24, n_layer=2, n_head=4, d_model=32, pos=pos)).eval()
    with torch.no_grad():
        model.blocks[0].attn.c_attn.weight.mul_(20)
    meta = {"name": pos, "tokenizer": {"kind": "chars", "chars": [chr(32 + i) for i in range(61)]}, "step": 0}
    ckpt.save(tmp_path / pos, model, {**meta, "final": True, "corpus": {"name": "shakespeare"}})
    app = create_app(Settings(checkpoint=tmp_path / pos, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    return TestClient(app)


@pytest.mark.parametrize("pos", ["rope", "none"])
def test_a_rope_model_and_one_without_positions(tmp_path, pos):
    with serve_tiny(tmp_path, pos) as client:
        c = permutation(client, "THE DOG BITES THE MAN")
        page = client.get("/").text
    assert c["pos"] == pos and c["without_positions"] < 1e-4
    if pos == "rope":
        assert c["with_positions"] > 1e-3  # RoPE's turn makes order matter
    else:
        assert c["with_positions"] == c["without_positions"]  # nothing of its own to add
        assert "has none of its own" in page
    assert 'id="perm-summary"' in page and 'id="perm-fact"' in page


def test_the_position_stage_draws_the_check():
    js = (ROOT / "static/js/forward/panel_embeddings.js").read_text(encoding="utf-8")
    assert "embeddings.permutation" in js and "textFactBlock(c.fact" in js
