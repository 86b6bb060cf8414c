"""The history before GPT-2 as live examples (GET /api/v1/genealogy/perceptron, /mlp, /reach) and
Mixture-of-Experts' capacity against compute (/genealogy/moe): each answer is checked against
what the example claims, recomputed here from the answer's own numbers."""

from __future__ import annotations

import math

import pytest
import torch

from gptscope.model import history
from gptscope.model.gpt import GPTConfig, count_params


def side(w1: float, w2: float, b: float, x1: float, x2: float) -> int:
    return 1 if w1 * x1 + w2 * x2 + b > 0 else 0


def test_the_perceptron_finds_a_line_when_one_exists(client):
    r = client.get("/api/v1/genealogy/perceptron", params={"data": "separable"}).json()
    assert r["converged"] and r["epochs"][-1]["mistakes"] == 0 and r["epochs"][-1]["accuracy"] == 1.0
    last, pts = r["epochs"][-1], r["points"]
    # the served line puts every served point on its own side
    assert all(
        side(last["w1"], last["w2"], last["b"], a, c) == y for a, c, y in zip(pts["x1"], pts["x2"], pts["label"])
    )
    assert r["epochs"][0]["mistakes"] > 0 and set(pts["label"]) == {0, 1}
    assert r["source"]["seed"] == "llm-pretraining-for-generalists.txt"


@pytest.mark.parametrize("data", ["xor", "circles"])
def test_the_perceptron_never_stops_erring_without_one(client, data):
    r = client.get("/api/v1/genealogy/perceptron", params={"data": data, "epochs": 30}).json()
    assert not r["converged"] and len(r["epochs"]) == 30
    assert all(e["mistakes"] > 0 and e["accuracy"] < 0.9 for e in r["epochs"])


def test_the_update_rule_moves_the_weights_by_lr_times_the_error():
    """Replayed by hand: from zero weights, each mistake adds lr * (y - y_hat) * x; bias by lr * e."""
    x, y, run = history.perceptron("separable", n=12, epochs=1, lr=0.5, seed=3)
    import torch

    order = torch.randperm(12, generator=torch.Generator().manual_seed(4)).tolist()
    w1 = w2 = b = 0.0
    mistakes = 0
    for i in order:
        e = int(y[i]) - side(w1, w2, b, float(x[i, 0]), float(x[i, 1]))
        if e:
            w1, w2, b, mistakes = (
                w1 + 0.5 * e * float(x[i, 0]),
                w2 + 0.5 * e * float(x[i, 1]),
                b + 0.5 * e,
                mistakes + 1,
            )
    assert run[0].mistakes == mistakes
    assert run[0].w == pytest.approx((w1, w2)) and run[0].b == pytest.approx(b)


@pytest.mark.parametrize("data", ["xor", "circles"])
def test_the_mlp_bends_the_boundary_the_perceptron_cannot_draw(client, data):
    r = client.get("/api/v1/genealogy/mlp", params={"data": data}).json()
    assert r["accuracy"] == 1.0 and r["perceptron_accuracy"] < 0.8
    assert r["loss"][-1] < r["loss"][0] / 10 and len(r["loss"]) == len(r["steps"]) and r["steps"][-1] == 400
    assert len(r["lines"]) == r["hidden"] == 8
    k = len(r["grid_axis"])
    assert len(r["grid"]) == k and all(len(row) == k for row in r["grid"])
    assert all(0 <= p <= 1 for row in r["grid"] for p in row)
    # the grid is the trained net: at the grid point nearest each data point it mostly agrees with the label
    axis, pts = r["grid_axis"], r["points"]

    def nearest(v: float) -> int:
        return min(range(k), key=lambda i: abs(axis[i] - v))

    agree = [
        (r["grid"][nearest(b)][nearest(a)] > 0.5) == bool(y) for a, b, y in zip(pts["x1"], pts["x2"], pts["label"])
    ]
    assert sum(agree) / len(agree) > 0.85


def test_the_hand_written_backprop_and_adam_are_autograds_and_torchs():
    x, y = history.points("circles", 30, 3)
    target = y.float().unsqueeze(1)
    torch.manual_seed(1)
    params = [torch.randn(5, 2), torch.randn(5), torch.randn(1, 5), torch.randn(1)]
    loss, grads = history.mlp_gradients(params, x, target)
    leaves = [p.clone().requires_grad_() for p in params]
    w1, b1, w2, b2 = leaves
    ref = torch.nn.functional.binary_cross_entropy_with_logits(torch.tanh(x @ w1.T + b1) @ w2.T + b2, target)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    for g, leaf in zip(grads, leaves):
        torch.testing.assert_close(g, leaf.grad, rtol=1e-5, atol=1e-7)
    # three Adam steps on the same gradients land where torch.optim.Adam's do
    opt = torch.optim.Adam(leaves, lr=0.05)
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    mine = [p.clone() for p in params]
    for t in (1, 2, 3):
        for leaf, g in zip(leaves, grads):
            leaf.grad = g.clone()
        opt.step()
        history.adam_step(mine, grads, m, v, t, 0.05)
    for a, b in zip(mine, leaves):
        torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-7)


def test_one_hidden_unit_is_still_one_line(client):
    r = client.get("/api/v1/genealogy/mlp", params={"data": "xor", "hidden": 1}).json()
    assert r["accuracy"] < 0.9 and len(r["lines"]) == 1  # a line splits xor at best 3 quadrants to 1


def test_reach_each_family_moves_information_as_the_text_says(client):
    r = client.get("/api/v1/genealogy/reach", params={"positions": 16, "kernel": 3, "cnn_layers": 3}).json()
    by = {c["arch"]: c for c in r["curves"]}
    assert list(by) == ["mlp", "cnn", "rnn", "attention"]
    mlp, cnn, rnn, att = (by[a]["sensitivity"] for a in ("mlp", "cnn", "rnn", "attention"))
    assert all(v == 0 for v in mlp[:-1]) and mlp[-1] > 0  # an MLP mixes only within its own position
    seen = 3 * (3 - 1)  # (kernel - 1) x layers back
    assert all(v == 0 for v in cnn[: 15 - seen]) and all(v > 0 for v in cnn[15 - seen :])
    assert rnn[0] < 1e-3 * rnn[-1] and all(v > 0 for v in rnn)  # every step back costs a little
    assert min(att) > 1e-3 * max(att)  # one layer of attention reaches the first position directly
    assert by["attention"]["path"] == [1] * 15 + [0]
    assert by["rnn"]["path"] == list(range(15, -1, -1))
    assert by["mlp"]["path"] == [None] * 15 + [0]
    assert by["cnn"]["path"][15 - seen :] == [math.ceil(d / 2) for d in range(seen, -1, -1)]
    assert by["cnn"]["path"][: 15 - seen] == [None] * (15 - seen)


def test_moe_capacity_grows_a_hundredfold_and_more_while_compute_barely_moves(client):
    r = client.get("/api/v1/genealogy/moe").json()
    rows = r["rows"]
    dense = rows[0]
    xl = GPTConfig(vocab_size=50_257, n_ctx=1024, n_layer=48, n_head=25, d_model=1600)
    assert dense["experts"] == 1 and dense["total"] == count_params(xl)["total"] and dense["capacity_ratio"] == 1
    for row in rows[1:]:
        cfg = GPTConfig(
            vocab_size=50_257, n_ctx=1024, n_layer=48, n_head=25, d_model=1600, n_expert=row["experts"], top_k_experts=2
        )
        assert row["total"] == count_params(cfg)["total"]
        # a token skips experts - 2 MLPs of 2 x 1600 x 6400 weights and their biases per layer
        skipped = 48 * (row["experts"] - 2) * (2 * 1600 * 6400 + 6400 + 1600)
        assert row["active"] == row["total"] - skipped
        assert row["compute_ratio"] < 2
    assert any(100 <= x["capacity_ratio"] <= 1000 for x in rows)
    one = client.get("/api/v1/genealogy/moe", params={"top_k": 1}).json()["rows"]
    for x in one[1:]:  # one expert a token: the dense cost plus the router's 1600 x experts weights a layer
        assert x["flops_per_token"] == dense["flops_per_token"] + 2 * 48 * 1600 * x["experts"]


@pytest.mark.parametrize(
    "path, params, field",
    [
        ("perceptron", {"data": "spiral"}, "data"),
        ("perceptron", {"n": 1000}, "n"),
        ("perceptron", {"lr": 0}, "lr"),
        ("mlp", {"hidden": 0}, "hidden"),
        ("mlp", {"steps": 1001}, "steps"),
        ("reach", {"positions": 1}, "positions"),
        ("reach", {"kernel": 1}, "kernel"),
        ("moe", {"top_k": 0}, "top_k"),
    ],
)
def test_bad_history_input_is_a_422_naming_the_field(client, path, params, field):
    r = client.get(f"/api/v1/genealogy/{path}", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", field], r.text
