"""Supernodes found automatically and a graph's trust figures (issue #64): the grouping and the scores on
hand-made numbers; every effect is the real model's change when features are taken out (a hand-made run
with their transcoder outputs zeroed); on the Caesar prompt the proposed groups each carry an
intervention effect, the Roman-name features form one, and the trust figures agree with the graph."""

from __future__ import annotations

import pytest
import torch
from test_attribution import IDS, tiny

from gptscope.model import attribution as at
from gptscope.model import supernodes as sn
from gptscope.model.gpt import hook_name

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"


def test_features_linked_above_the_threshold_form_the_groups():
    sim = torch.tensor(
        [
            [1.0, 0.9, 0.1, 0.0, 0.0],
            [0.9, 1.0, 0.2, 0.0, 0.7],
            [0.1, 0.2, 1.0, 0.8, 0.0],
            [0.0, 0.0, 0.8, 1.0, 0.0],
            [0.0, 0.7, 0.0, 0.0, 1.0],
        ]
    )
    assert sn.linked_groups(sim, 0.65) == [[0, 1, 4], [2, 3]]
    assert sn.linked_groups(sim, 0.85) == [[0, 1]]
    single = torch.tensor([-1.0, -2.0, 0.5, -0.5, 1.0])
    # group [0, 1, 4] took out together lowers the target by 2: members 0 and 1 agree (3 of |effect| 5)
    s, agreement, coverage = sn.score([[0, 1, 4], [2, 3]], [-2.0, 0.1], single)
    assert (s, agreement, coverage) == pytest.approx((3.5 / 5, 3.5 / 5, 1.0))
    assert sn.rank_correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert sn.rank_correlation(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)


@torch.no_grad()
def test_an_ablation_effect_is_the_hand_made_run_with_those_outputs_removed():
    model, codes = tiny("gpt2")
    with torch.inference_mode():
        tr = at.trace(model, codes, IDS)
    target = at.Target(None, len(IDS) - 1, up=3, down=4)
    group = [i for i in range(len(tr.act)) if int(tr.layer[i]) == 1][:3]
    (effect,) = sn.ablation_effects(model, codes, tr, target, [group])
    removed = torch.zeros_like(tr.mlp_out[1])
    for i in group:
        removed[int(tr.position[i])] += tr.act[i] * tr.decoder[i]
    # the same run by hand: block 1's MLP output minus those features' writes (its input does not change)
    with model.hooks([(hook_name("hook_mlp_out", 1), lambda out, _n: out - removed[None])]):
        logits, _ = model(torch.tensor([IDS]))
    want = float(logits[0, -1, 3] - logits[0, -1, 4]) - float(tr.logits[3] - tr.logits[4])
    assert effect == pytest.approx(want, abs=1e-9) and abs(effect) > 1e-6


def test_the_replacement_with_its_errors_added_back_is_the_real_model():
    """replaced_logits (every MLP by its transcoder, attention live) differs from the real model by what the
    transcoders miss; with perfect stand-ins (the MLP itself) it is the real model."""
    model, codes = tiny("llama-gqa")
    blocks = list(model.blocks)

    class Exact(torch.nn.Module):
        def __init__(self, li: int) -> None:
            super().__init__()
            self.mlp = blocks[li].mlp

        def forward(self, x):
            return self.mlp(x), None

    with torch.no_grad():
        real, _ = model(torch.tensor([IDS]), last_only=True)
        exact = sn.replaced_logits(model, [Exact(i) for i in range(len(blocks))], IDS)
        rough = sn.replaced_logits(model, codes, IDS)
    torch.testing.assert_close(exact, real[0, -1], atol=1e-10, rtol=0)
    assert float((rough - real[0, -1]).abs().max()) > 1e-3


@pytest.fixture(scope="module")
def caesar_groups(client):
    r = client.post("/api/v1/attribution/supernodes", json={"text": CAESAR})
    assert r.status_code == 200, r.text
    return r.json()


def test_each_proposed_supernode_carries_its_intervention_effect(caesar_groups):
    g = caesar_groups
    assert g["target"] == "logit(' Caesar')" and g["candidates"] == 40
    chosen = next(s for s in g["signals"] if s["signal"] == g["signal"])
    assert chosen["score"] == max(s["score"] for s in g["signals"] if s["available"])
    assert {s["signal"] for s in g["signals"]} == {"decoder", "coactivation", "targets"}
    assert g["groups"] and all(len(x["members"]) >= 2 and x["effect"] != 0 for x in g["groups"])
    caesar = next(x for x in g["groups"] if x["name"] == "' Caesar'")
    members = {(m["source"]["layer"], m["source"]["feature"], m["source"]["position"]) for m in caesar["members"]}
    assert {(0, 638, 7), (0, 638, 18), (2, 531, 7), (2, 531, 18)} <= members
    assert caesar["effect"] < -1.0 and all(m["effect"] < 0 for m in caesar["members"])
    assert caesar["members_effect"] == pytest.approx(sum(m["effect"] for m in caesar["members"]), abs=1e-4)


def test_the_trust_panel_agrees_with_the_graph(client):
    r = client.post("/api/v1/attribution/trust", json={"text": CAESAR})
    assert r.status_code == 200, r.text
    t = r.json()
    graph = client.post("/api/v1/attribution", json={"text": CAESAR}).json()
    assert t["error_share"] == pytest.approx(graph["error_influence"], abs=1e-6)
    assert t["target_real"] == pytest.approx(graph["model_value"], abs=1e-4)
    assert t["top1_real"] == t["top1_replaced"] == " Caesar" and 0 < t["kl"] < 1
    assert len(t["checked"]) == 20 and t["sign_agreement"] >= 0.8
    first = t["checked"][0]
    assert (first["source"]["layer"], first["source"]["feature"], first["source"]["position"]) == (0, 638, 18)
    assert first["edge"] > 0 > first["effect"]
    # the top paths: the Roman-name feature feeds its block-2 twin, then the answer; every edge checked
    assert len(t["paths"]) == 5 and t["path_agreement"] >= 0.8
    top = t["paths"][0]
    assert (top["source"]["feature"], top["via"]["feature"], top["via"]["position"]) == (638, 531, 18)
    (fg, gt) = top["edges"]
    assert fg["real"] == pytest.approx(-fg["weight"], rel=0.2) and gt["real"] < 0 < gt["weight"]
    influences = [p["influence"] for p in t["paths"]]
    assert influences == sorted(influences, reverse=True)


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("supernodes", {"candidates": 1}, "candidates"),
        ("supernodes", {"signal": "words"}, "signal"),
        ("trust", {"token": 99999}, "token"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client, route, body, field):
    r = client.post(f"/api/v1/attribution/{route}", json={"text": CAESAR, **body})
    assert r.status_code == 422, r.text
    assert ".".join(str(x) for x in r.json()["detail"][0]["loc"][1:]) == field
