"""Attention inside attribution graphs (issue #64), in float64 on GPT-2's block, a Llama block (grouped-query
attention, RoPE, q/k norms) and a mixture-of-experts block: every edge into a target is, for each block on its
path, its bypass plus one part per head, adding up to the edge; a block off the path carries none of it; a head's
score at (query, key) is the sum of its terms over the sources at both ends, and a source's part of the query is
what that source alone puts there in the frozen model; a capped score is refused."""

from __future__ import annotations

import pytest
import torch
from test_attribution import IDS, tiny

from gptscope.model import attribution as at
from gptscope.model import attribution_heads as ah

SPLIT_BLOCKS = ["gpt2", "llama-gqa", "moe"]


@pytest.fixture(scope="module", params=SPLIT_BLOCKS)
def traced(request):
    model, codes = tiny(request.param)
    with torch.inference_mode():
        tr = at.trace(model, codes, IDS)
    return request.param, model, codes, tr


def targets(tr: at.Trace) -> list[at.Target]:
    """The logit difference at the last position and a block-2 feature at position 7."""
    feat = int(tr.feature[(tr.layer == 2) & (tr.position == 7)][0])
    return [at.Target(None, len(IDS) - 1, up=3, down=4), at.Target(2, 7, feat)]


def test_head_loadings_add_up_to_every_edge_for_every_block_on_the_path(traced):
    _, model, codes, tr = traced
    for target in targets(tr):
        hl = ah.head_loadings(model, codes, tr, target)
        assert hl.layers == [0, 1, 2] and hl.n_head == 4
        carried = 0.0
        for kind in ("tokens", "features", "errors"):
            whole = getattr(hl.whole, kind)[0]
            assert float(whole.abs().max()) > 1e-3
            for i in range(len(hl.layers)):
                heads = [hl.part(kind, i, h) for h in range(hl.n_head)]
                torch.testing.assert_close(hl.part(kind, i, None) + sum(heads), whole, atol=1e-10, rtol=0)
                carried += sum(float(x.abs().sum()) for x in heads)
        assert carried > 1e-2  # the heads do carry part of the edges


def test_a_block_before_a_source_carries_none_of_its_edges(traced):
    """A feature of block 1 writes after block 1's attention: blocks 0 and 1 are off its path, block 2 on it."""
    _, model, codes, tr = traced
    hl = ah.head_loadings(model, codes, tr, targets(tr)[0])
    of_block_1 = torch.nonzero(tr.layer == 1).flatten()
    for i, li in enumerate(hl.layers):
        parts = torch.stack([hl.part("features", i, h)[of_block_1] for h in range(hl.n_head)])
        if li <= 1:
            assert float(parts.abs().max()) < 1e-12
            torch.testing.assert_close(hl.part("features", i, None)[of_block_1], hl.whole.features[0, of_block_1])
        else:
            assert float(parts.abs().max()) > 1e-4


def test_qk_terms_add_up_to_the_real_score(traced):
    _, model, _codes, tr = traced
    for layer, head, q, k in [(2, 1, 9, 4), (1, 3, 6, 6), (0, 0, 5, 2), (2, 3, 9, 0)]:
        t = ah.qk_terms(model, tr, layer, head, q, k)
        n_sources = len(IDS) + int((tr.layer < layer).sum()) + layer * len(IDS)
        assert t.terms().shape == (n_sources + 1, n_sources + 1)
        assert abs(float(t.terms().sum()) - t.score) < 1e-10 and abs(t.score) > 1e-6


def test_a_sources_part_of_the_query_is_what_it_alone_puts_there(traced):
    """Token 3's row of Q: the frozen model's query with only that token's embedding in, minus the query with
    no source at all (each MLP writing only its transcoder's bias)."""
    _, model, codes, tr = traced
    layer, head, q = 2, 1, 9
    t = ah.qk_terms(model, tr, layer, head, q, 4)
    scales = ah.score_scales(model, tr.ids, layer)
    bias = torch.stack([c.b_dec for c in codes])[None, :, None, :].expand(1, *tr.mlp_out.shape)
    one = torch.zeros(1, *tr.embed.shape, dtype=tr.embed.dtype)
    one[0, 3] = tr.embed[3]
    with torch.no_grad():
        runs = [ah.stream_entering(model, tr, e, bias, layer) for e in (one, torch.zeros_like(one))]
        (q_one, _), (q_none, _) = (ah.frozen_qk(model, tr, x, layer, scales) for x in runs)
    torch.testing.assert_close(t.Q[3], q_one[0, head, q] - q_none[0, head, q], atol=1e-10, rtol=0)
    torch.testing.assert_close(t.Q[-1], q_none[0, head, q], atol=1e-10, rtol=0)  # the constant: no source in


def test_a_capped_score_has_no_qk_terms():
    model, _codes = tiny("families")
    with pytest.raises(ValueError, match="caps its attention scores"):
        ah.check_scores(model)


def test_a_long_prompts_rows_in_several_passes_give_the_same_numbers(traced, monkeypatch):
    _, model, codes, tr = traced
    target = targets(tr)[0]
    whole_hl, whole_qk = ah.head_loadings(model, codes, tr, target), ah.qk_terms(model, tr, 2, 1, 9, 4)
    per_row = 24 * 4 * model.cfg.n_layer * len(IDS) * model.cfg.d_model
    monkeypatch.setattr(at, "ROW_BYTES", 3 * per_row)  # three rows a pass
    assert at.rows_per_batch(model.cfg, len(IDS)) == 3
    hl, qk = ah.head_loadings(model, codes, tr, target), ah.qk_terms(model, tr, 2, 1, 9, 4)
    torch.testing.assert_close(hl.variants.features, whole_hl.variants.features, atol=1e-12, rtol=0)
    torch.testing.assert_close(qk.terms(), whole_qk.terms(), atol=1e-12, rtol=0)


# ---- the API on the built-in model ---------------------------------------------------------------------------

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"


@pytest.fixture(scope="module")
def caesar_heads(client):
    r = client.post("/api/v1/attribution/heads", json={"text": CAESAR, "top": 10})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def caesar_qk(client):
    r = client.post("/api/v1/attribution/qk", json={"text": CAESAR, "layer": 5, "head": 2, "key": 18, "top": 10})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_api_splits_each_edge_exactly_and_sums_the_terms(caesar_heads, caesar_qk):
    h = caesar_heads
    assert h["target"] == "logit(' Caesar')" and h["layers"] == [0, 1, 2, 3, 4, 5] and h["max_error"] < 1e-4
    for e in h["edges"]:
        for b in e["blocks"]:
            assert abs(b["bypass"] + sum(b["heads"]) - e["weight"]) < 1e-4
    assert len(h["carried"]) == 6 and all(len(row) == h["n_head"] for row in h["carried"])
    q = caesar_qk
    assert abs(q["terms_sum"] - q["score"]) < 1e-4 and 0 < q["attention"] < 1
    kinds = sum(k["value"] for k in q["kinds"])
    assert abs(kinds - q["score"]) < 1e-3


def test_the_readme_finding_is_what_the_api_says(caesar_heads, caesar_qk):
    from pathlib import Path

    text = " ".join((Path(__file__).parents[1] / "README.md").read_text("utf-8").replace("**", "").split())
    top = caesar_heads["edges"][0]
    assert (top["source"]["layer"], top["source"]["feature"], top["source"]["position"]) == (0, 638, 18)
    last = top["blocks"][-1]
    assert last["layer"] == 5 and max(range(4), key=lambda h: last["heads"][h]) == 2
    q = caesar_qk
    key = [s for s in q["key_sources"] if s["source"]["kind"] == "feature"]
    query = [s for s in q["query_sources"] if s["source"]["kind"] == "feature"]
    const = next(s for s in q["query_sources"] if s["source"]["kind"] == "constant")
    l3 = next(s for s in query if (s["source"]["layer"], s["source"]["feature"]) == (3, 587))
    shown = [
        f"L0 #638's +{top['weight']:.2f} from position 18 is +{last['heads'][2]:.2f} through head 5.2, "
        f"+{last['heads'][3]:.2f} through 5.3 and +{last['bypass']:.2f} past block 5's heads",
        f"to position 18 ({q['score']:.2f}; attention {q['attention']:.2f})",
        f"(L0 #638 +{key[0]['value']:.2f}, L2 #531 +{key[1]['value']:.2f})",
        f'(L4 #546 +{query[0]["value"]:.2f} on ",", L3 #587 +{l3["value"]:.2f} on',
        f"and +{const['value']:.2f} from the biases",
    ]
    assert [(s["source"]["layer"], s["source"]["feature"]) for s in key[:2]] == [(0, 638), (2, 531)]
    assert (query[0]["source"]["layer"], query[0]["source"]["feature"]) == (4, 546)
    for words in shown:
        assert words in text, words


@pytest.mark.parametrize(
    ("route", "body", "field", "words"),
    [
        ("qk", {"layer": 5, "head": 4, "key": 3}, "head", "0..3"),
        ("qk", {"layer": 5, "head": 1, "key": 40}, "key", "after the query"),
        ("qk", {"layer": 6, "head": 1, "key": 3}, "layer", "0..5"),
        ("heads", {"layer": 3, "position": 2, "feature": 5}, "feature", "not active"),
        ("heads", {"layer": 3}, "position", "layer, position and feature"),
        ("heads", {"token": 5000}, "token", "outside the vocabulary"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client, route, body, field, words):
    r = client.post(f"/api/v1/attribution/{route}", json={"text": CAESAR, **body})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert ".".join(str(x) for x in detail["loc"][1:]) == field and words in detail["msg"], detail
