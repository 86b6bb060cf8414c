"""Issue #26's six captions, each true for the model being served: tested on a model where the old text
was wrong (a post-norm or sandwich block, grouped-query attention, another corpus, o200k's and
cl100k's unassigned ids, gradient-norm clipping, BERT's segments and heads)."""

from __future__ import annotations

import html
import re

import pytest
import torch
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.model.train import TrainConfig
from gptscope.server.app import create_app
from gptscope.server.config import Settings

CHARS = [chr(32 + i) for i in range(61)]  # space to backslash: capitals, digits, punctuation
SMALL = dict(vocab_size=61, n_ctx=24, n_layer=2, n_head=4, d_model=32)


def serve(tmp_path, name: str, corpus: str = "shakespeare", **switches) -> TestClient:
    torch.manual_seed(0)
    meta = {
        "name": name,
        "tokenizer": {"kind": "chars", "chars": CHARS},
        "step": 0,
        "final": True,
        "corpus": {"name": corpus},
    }
    folder = tmp_path / name
    ckpt.save(folder, GPT(GPTConfig(**{**SMALL, **switches})).eval(), meta)
    return TestClient(create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=tmp_path / "data")))


def text_of(page: str, element_id: str) -> str:
    m = re.search(rf'<p[^>]*id="{element_id}"[^>]*>(.*?)</p>', page, re.S)
    assert m, element_id
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).split())


@pytest.mark.parametrize(
    ("norm", "norm_type", "caption", "says"),
    [
        ("pre", "layernorm", "ln-caption", "this model normalises first, as GPT-2 does"),
        ("post", "layernorm", "ln-caption", "normalises after each residual add, as GPT-1"),
        ("post", "rmsnorm", "rms-caption", "normalises after each residual add, as GPT-1"),
        ("both", "layernorm", "ln-caption", "normalises on both sides of each sublayer"),
    ],
)
def test_the_norm_caption_says_where_the_served_model_normalises(tmp_path, norm, norm_type, caption, says):
    with serve(tmp_path, f"{norm}-{norm_type}", norm=norm, norm_type=norm_type) as client:
        page = client.get("/").text
    shown = text_of(page, caption)
    assert says in shown
    if norm != "pre":
        assert "normalises first" not in shown


def test_the_kv_cache_of_a_grouped_query_model_counts_key_value_heads(tmp_path):
    with serve(tmp_path, "gqa", n_kv_head=2) as client:
        r = client.post("/api/v1/generate/step", json={"ids": [5, 6, 7, 8], "step": 0, "seed": 1}).json()
    c = r["cache"]
    assert (c["kv_heads"], c["n_head"], c["d_head"]) == (2, 4, 8)
    assert c["numbers"] == c["layers"] * 2 * c["positions"] * c["kv_heads"] * c["d_head"]
    assert c["numbers"] != c["layers"] * 2 * c["positions"] * c["d_model"]  # the old caption's factors


def test_the_encodings_count_their_unassigned_ids(client):
    encodings = {e["name"]: e for e in client.get("/api/v1/encodings").json()["encodings"]}
    for name, unassigned in (("o200k_base", 19), ("cl100k_base", 16), ("gpt2", 0)):
        e = encodings[name]
        assert e["unassigned_ids"] == unassigned
        assert e["vocab_size"] == e["mergeable_tokens"] + len(e["special_tokens"]) + e["unassigned_ids"]
    assert encodings["cl100k_base"]["mergeable_tokens"] + len(encodings["cl100k_base"]["special_tokens"]) == 100_261


def test_the_gradient_caption_says_the_norm_is_clipped(client):
    page = client.get("/train").text
    shown = " ".join(
        html.unescape(re.sub(r"<[^>]+>", "", page.split('id="grad-caption">', 1)[1].split("</figcaption>")[0])).split()
    )
    assert (
        f"over {TrainConfig.grad_clip}, the trainer scales the gradient down to norm {TrainConfig.grad_clip}" in shown
    )
    assert "Steps bigger than a limit are clipped" not in page


@pytest.mark.parametrize(
    ("corpus", "says"),
    [
        ("shakespeare", "so Shakespeare-like prompts"),
        ("sonnets.txt", "trained on sonnets.txt, so prompts written like that text"),
        ("unknown (imported)", "does not say what text it was trained on"),
    ],
)
def test_the_prompt_caption_names_the_served_models_corpus(tmp_path, corpus, says):
    with serve(tmp_path, "m", corpus=corpus) as client:
        page = client.get("/").text
    caption = " ".join(
        html.unescape(
            re.sub(r"<[^>]+>", "", page.split('<h2 id="prompt-h">Prompt</h2>', 1)[1].split("</p>")[0])
        ).split()
    )
    assert says in caption
    if corpus != "shakespeare":
        assert "Shakespeare" not in caption


def test_the_bert_caption_names_segments_and_both_heads(client):
    shown = text_of(client.get("/learn").text, "bert-caption")
    assert "segment embedding" in shown and "masked language modelling" in shown and "next-sentence prediction" in shown
    assert "the same stack of blocks with a different attention mask" not in shown


@pytest.mark.parametrize(
    ("norm", "norm_type", "says", "not_says"),
    [
        ("pre", "layernorm", "apply the final LayerNorm and the output layer", "no final norm"),
        ("pre", "rmsnorm", "apply the final RMSNorm and the output layer", "LayerNorm"),
        ("post", "layernorm", "has no final norm", "final LayerNorm"),
        ("both", "layernorm", "apply the final LayerNorm and the output layer", "no final norm"),
    ],
)
def test_the_logit_lens_caption_applies_the_norm_the_served_model_has(tmp_path, norm, norm_type, says, not_says):
    """A post-norm model (GPT-1's shape) has no final norm: its lens is the output layer alone
    (its ln_final is an identity), and the caption must not say otherwise."""
    with serve(tmp_path, f"lens-{norm}-{norm_type}", norm=norm, norm_type=norm_type) as client:
        page = client.get("/").text
        compare = client.get("/compare").text
    shown = text_of(page, "lens-caption")
    assert says in shown and not_says not in shown
    assert "post-norm model" in text_of(compare, "lens-caption")  # two models: it says what each one does
