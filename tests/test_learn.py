"""Curves and schedules: every number the /learn page quotes, checked through /api/v1, plus the pure
functions in model/formulas.py against PyTorch's own implementations."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
import torch.nn.functional as F

from gptscope.model import formulas as C
from gptscope.model.gpt import count_params, preset_config
from gptscope.model.schedules import transformer, warmup_cosine, warmup_stable_decay


def get(client, path: str, **params) -> dict:
    r = client.get(f"/api/v1{path}", params=params)
    assert r.status_code == 200, r.text
    json.loads(r.text, parse_constant=lambda c: pytest.fail(f"{path} returned {c}"))  # no NaN / Infinity
    return r.json()


def at(body: dict, step: int) -> float:
    return body["lr"][body["step"].index(step)]


# --------------------------------------------------------------------------------------------
# Learning-rate schedules
# --------------------------------------------------------------------------------------------


def test_transformer_schedule_peaks_near_7e4_at_4000_and_falls_to_1_4e4(client):
    b = get(client, "/schedules/lr", kind="transformer")
    assert b["params"] == {
        "d_model": 512,
        "warmup": 4000,
        "total_steps": 100_000,
        "max_lr": None,
        "min_lr": None,
        "cooldown": None,
    }
    assert b["peak"]["step"] == 4000
    assert b["peak"]["lr"] == pytest.approx(7.0e-4, rel=0.01)  # 512^-0.5 * 4000^-0.5 = 6.988e-4
    assert b["peak"]["lr"] == max(b["lr"])
    assert b["end"] == {"step": 100_000, "lr": pytest.approx(1.4e-4, rel=0.01)}
    assert at(b, 4000) == transformer(4000, 512, 4000)
    assert all(math.isfinite(v) and v > 0 for v in b["lr"])


def test_gpt1_schedule_peaks_at_2_5e4_at_2000_and_ends_at_zero(client):
    b = get(client, "/schedules/lr", kind="gpt1")
    assert b["function"] == "gptscope.model.schedules.warmup_cosine"
    assert b["peak"] == {"step": 2000, "lr": pytest.approx(2.5e-4, rel=1e-12)}
    assert at(b, 2000) == pytest.approx(2.5e-4, rel=1e-12)
    warm = [lr for step, lr in zip(b["step"], b["lr"]) if step < 2000]
    assert len(warm) > 5 and all(a < c for a, c in itertools.pairwise(warm))  # rising during warmup
    assert b["end"]["step"] == 100_000 and b["end"]["lr"] == 0.0
    assert b["lr"][0] == pytest.approx(2.5e-4 / 2000)  # the first update is not wasted at zero


def test_schedule_parameters_are_query_fields(client):
    b = get(client, "/schedules/lr", kind="gpt1", max_lr=1e-3, warmup=100, total_steps=1000, min_lr=1e-4, points=50)
    assert b["peak"] == {"step": 100, "lr": pytest.approx(1e-3)}
    assert b["end"] == {"step": 1000, "lr": pytest.approx(1e-4)}
    assert len(b["step"]) <= 52 and b["step"][0] == 0 and b["step"][-1] == 1000
    t = get(client, "/schedules/lr", kind="transformer", d_model=1024, warmup=8000, total_steps=20_000)
    assert t["peak"] == {"step": 8000, "lr": pytest.approx(transformer(8000, 1024, 8000))}


def planned(rec: dict, step: int) -> float:
    """The rate of the recorded schedule at a step, by the function the trainer calls for its kind."""
    if rec["kind"] == "warmup_stable_decay":
        return warmup_stable_decay(
            step, rec["max_lr"], rec["warmup"], rec["total_steps"], rec["cooldown"], rec["min_lr"]
        )
    return warmup_cosine(step, rec["max_lr"], rec["warmup"], rec["total_steps"], rec["min_lr"])


def check_model_schedule(client, service) -> float:
    """kind=model is the schedule function the trainer called (warmup_cosine or warmup_stable_decay) with
    the checkpoint's recorded parameters, beside the rates the trainer set; returns the largest gap
    between the two, as the API reports it."""
    rec = service.meta.schedule
    b = get(client, "/schedules/lr", kind="model")
    assert b["checkpoint_schedule"] == rec
    assert b["function"] == f"gptscope.model.schedules.{rec['kind']}"
    assert b["params"]["cooldown"] == rec.get("cooldown")
    for step, lr in [*list(zip(b["step"], b["lr"]))[:: max(1, len(b["step"]) // 25)], (b["step"][-1], b["lr"][-1])]:
        assert lr == planned(rec, step)
    hist = service.history
    # a long history comes back thinned to at most 4,000 points, first and last update kept
    by_step = {h["step"] - 1: h["lr"] for h in hist}  # update k used the schedule's step k - 1
    assert len(b["history"]["step"]) == min(len(hist), 4000)
    assert b["history"]["step"][0] == 0 and b["history"]["step"][-1] == hist[-1]["step"] - 1
    assert b["history"]["lr"] == [by_step[s] for s in b["history"]["step"]]
    gap = max(abs(h["lr"] - planned(rec, h["step"] - 1)) for h in hist)  # over every update, not only those sent
    assert b["history_max_abs_diff"] == pytest.approx(gap, abs=1e-15)
    # an edited parameter changes the curve but not the recorded history
    e = get(client, "/schedules/lr", kind="model", max_lr=rec["max_lr"] / 2)
    assert e["peak"]["lr"] == pytest.approx(rec["max_lr"] / 2)
    assert e["history"]["lr"] == b["history"]["lr"] and e["history_max_abs_diff"] is None
    return b["history_max_abs_diff"]


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_model_schedule_of_a_fixed_length_run_is_exactly_the_rates_the_trainer_set(tmp_path, schedule):
    """The schedule /learn plots is the function the trainer called: for a run of --max-steps the
    recorded rates equal the curve to the last bit, for a cosine and for warmup-stable-decay."""
    from fastapi.testclient import TestClient

    from gptscope.model.train import TrainConfig, train
    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat. A dog ran to the river.\n" * 200, encoding="utf-8")
    train(
        TrainConfig(
            corpus=str(text),
            preset="tiny",
            vocab_size=300,
            batch_size=4,
            max_steps=40,
            warmup_steps=5,
            schedule=schedule,
            cooldown=0.3 if schedule == "wsd" else None,
            min_lr_ratio=0.0 if schedule == "wsd" else 0.1,
            precision="fp32",
            device="cpu",
            overrides={"n_ctx": 32, "d_model": 32, "n_head": 2},
        ),
        out=tmp_path / "run",
        progress=False,
    )
    app = create_app(Settings(checkpoint=tmp_path / "run", data_dir=tmp_path / "data", allow_hosts=["testserver"]))
    with TestClient(app) as c:
        assert check_model_schedule(c, app.state.models.served) == 0.0
        b = get(c, "/schedules/lr", kind="model")
        edited = c.get("/api/v1/schedules/lr", params={"kind": "model", "cooldown": 0.5})
    lr = dict(zip(b["step"], b["lr"]))
    if schedule == "wsd":  # held at the peak from warmup's end to step 28 = round(40 * 0.7), then a line to 0
        assert {lr[s] for s in (4, 5, 20, 28)} == {b["peak"]["lr"]} and lr[40] == 0.0
        assert lr[34] == pytest.approx(b["peak"]["lr"] * 6 / 12)
        # another cooldown: the fall starts at step 20 = round(40 * 0.5); the recorded rates stay as they were
        e = edited.json()
        lr2 = dict(zip(e["step"], e["lr"]))
        assert (
            e["params"]["cooldown"] == 0.5
            and lr2[20] == b["peak"]["lr"]
            and lr2[30] == pytest.approx(lr[40] + b["peak"]["lr"] / 2)
        )
        assert e["history"] == b["history"] and e["history_max_abs_diff"] is None
    else:  # a cosine has no cooldown to edit
        assert edited.status_code == 422 and edited.json()["detail"][0]["loc"] == ["query", "cooldown"]


def test_warmup_stable_decay_shape():
    """Warmup as the cosine's, the plateau, and a straight line down over the last share; the decay
    never starts inside warmup."""
    f = [warmup_stable_decay(s, 1.0, 10, 100, 0.25, 0.1) for s in range(101)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0 and set(f[10:76]) == {1.0}
    steps = [b - a for a, b in itertools.pairwise(f[75:])]
    assert all(d == pytest.approx(-0.9 / 25) for d in steps) and f[100] == pytest.approx(0.1)
    assert warmup_stable_decay(10, 1.0, 10, 12, 0.9, 0.0) == 1.0  # 12 * 0.1 < warmup: decay starts at 10
    assert warmup_stable_decay(500, 1.0, 10, 100, 0.25, 0.1) == 0.1


@pytest.mark.parametrize("bad", [{"schedule": "linear"}, {"cooldown": 0.0}, {"cooldown": 1.5}])
def test_trainer_refuses_an_unknown_schedule_or_cooldown_by_name(bad):
    from gptscope.model.train import ConfigError, TrainConfig

    with pytest.raises(ConfigError) as e:
        TrainConfig(max_steps=1, **bad).validate()
    assert e.value.field == next(iter(bad))


def test_model_schedule_of_the_builtin_model_matches_its_history(client, service):
    """The built-in model trained to a time budget: its length was planned after a few updates and
    re-planned a third of the way in, so the early rates follow the first plan; the API reports that
    gap, which stays a small part of the peak rate."""
    gap = check_model_schedule(client, service)
    assert gap < 0.1 * service.meta.schedule["max_lr"]


# --------------------------------------------------------------------------------------------
# GELU
# --------------------------------------------------------------------------------------------


def test_gelu_minimum_and_derivative_at_minus_one(client):
    b = get(client, "/curves/gelu")
    assert b["minimum"]["x"] == pytest.approx(-0.752, abs=5e-4)
    assert b["minimum"]["y"] == pytest.approx(-0.170, abs=5e-4)
    assert b["derivative_at_minus_one"] == {"x": -1.0, "y": pytest.approx(-0.083, abs=5e-4)}
    assert b["relu_derivative_at_minus_one"]["y"] == 0.0
    assert min(b["gelu_exact"]) >= b["minimum"]["y"] - 1e-12  # the root-found minimum is the true one
    i = b["x"].index(-1.0)
    assert b["d_gelu_exact"][i] == b["derivative_at_minus_one"]["y"]


def test_gelu_curves_equal_torch_and_the_gap_is_small(client):
    b = get(client, "/curves/gelu", x_min=-6, x_max=6, points=241)
    x = torch.tensor(b["x"], dtype=torch.float64, requires_grad=True)
    exact, approx = F.gelu(x), F.gelu(x, approximate="tanh")
    assert torch.allclose(exact, torch.tensor(b["gelu_exact"], dtype=torch.float64), atol=1e-12)
    assert torch.allclose(approx, torch.tensor(b["gelu_tanh"], dtype=torch.float64), atol=1e-12)
    (g_exact,) = torch.autograd.grad(exact.sum(), x)
    (g_tanh,) = torch.autograd.grad(F.gelu(x, approximate="tanh").sum(), x)
    assert torch.allclose(g_exact, torch.tensor(b["d_gelu_exact"], dtype=torch.float64), atol=1e-10)
    assert torch.allclose(g_tanh, torch.tensor(b["d_gelu_tanh"], dtype=torch.float64), atol=1e-10)
    assert b["relu"] == [max(0.0, v) for v in b["x"]]
    assert b["gap"] == pytest.approx([t - e for t, e in zip(b["gelu_tanh"], b["gelu_exact"])])
    assert 1e-5 < abs(b["max_abs_gap_band"]["y"]) < 5e-4  # "about four decimal places" over [-2, 2]
    assert -2 <= b["max_abs_gap_band"]["x"] <= 2


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------


def test_cross_entropy_curve_and_baselines(client, service):
    b = get(client, "/curves/cross-entropy")
    i = b["p"].index(0.25)
    assert b["loss"][i] == pytest.approx(1.386, abs=5e-4)
    assert b["marks"][0]["p"] == 0.25 and b["marks"][0]["loss"] == pytest.approx(math.log(4))
    assert b["loss"][b["p"].index(1.0)] == 0.0
    assert b["vocab_size"] == service.model.cfg.vocab_size
    assert b["uniform"]["loss"] == pytest.approx(math.log(service.model.cfg.vocab_size))
    gpt1 = next(x for x in b["baselines"] if x["vocab_size"] == 40_478)
    assert gpt1["loss"] == pytest.approx(10.6, abs=0.01)
    v = get(client, "/curves/cross-entropy", vocab_size=50_257)
    assert v["uniform"]["loss"] == pytest.approx(math.log(50_257))


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_softmax_cross_entropy_gradient_is_p_minus_q_and_sums_to_zero(client, epsilon):
    logits = [2.0, 1.0, 0.5, 0.0, -1.0, 3.0]
    b = get(client, "/curves/cross-entropy", logits=",".join(map(str, logits)), target=2, epsilon=epsilon)["gradient"]
    assert b["grad_sum"] == pytest.approx(0.0, abs=1e-12)
    assert sum(b["p"]) == pytest.approx(1.0) and sum(b["q"]) == pytest.approx(1.0)
    x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(x[None], torch.tensor([2]), label_smoothing=epsilon)
    loss.backward()
    assert b["loss"] == pytest.approx(float(loss.detach()), rel=1e-12)
    assert b["grad"] == pytest.approx(x.grad.tolist(), abs=1e-12)


def test_label_smoothing_floor_is_the_entropy_of_the_smoothed_target(client):
    b = get(client, "/curves/label-smoothing", epsilon=0.1, vocab_size=37_000)
    assert b["floor"] == pytest.approx(1.38, abs=0.005)
    assert b["floor_by_sum"] == pytest.approx(b["floor"], rel=1e-12)
    q = torch.full((37_000,), 0.1 / 37_000, dtype=torch.float64)
    q[5] += 0.9
    assert b["floor"] == pytest.approx(float(-(q * q.log()).sum()), rel=1e-12)
    assert b["q_true"] == pytest.approx(0.9 + 0.1 / 37_000) and b["q_other"] == pytest.approx(2.7e-6, rel=0.01)
    # the smoothed loss is lowest, and equal to the floor, where p = q_true; elsewhere it is higher
    i = b["p"].index(b["best_p"])
    assert b["loss_smoothed"][i] == pytest.approx(b["floor"], rel=1e-9)
    assert min(b["loss_smoothed"]) == pytest.approx(b["floor"], rel=1e-9)
    # the PyTorch loss of a model that predicts the smoothed target exactly is that floor too
    logits = torch.log(q)[None]
    assert float(F.cross_entropy(logits, torch.tensor([5]), label_smoothing=0.1)) == pytest.approx(b["floor"], rel=1e-9)
    assert b["floors"][0] == 0.0 and b["floors"][-1] == pytest.approx(math.log(37_000))
    assert b["epsilons"][5] == pytest.approx(0.1) and b["floors"][5] == pytest.approx(b["floor"])


# --------------------------------------------------------------------------------------------
# Softmax and scale
# --------------------------------------------------------------------------------------------


def test_dividing_by_sqrt_dk_brings_variance_from_64_to_1(client):
    b = get(client, "/curves/softmax-scale", d_k=64, seed=0)
    assert b["variance_raw"] == pytest.approx(64, rel=0.05)
    assert b["variance_scaled"] == pytest.approx(1, rel=0.05)
    assert b["variance_raw"] / b["variance_scaled"] == pytest.approx(64)
    assert sum(b["hist_raw"]["counts"]) == b["samples"] == sum(b["hist_scaled"]["counts"])
    assert get(client, "/curves/softmax-scale", d_k=64, seed=0) == b  # seeded: reproducible
    assert get(client, "/curves/softmax-scale", d_k=64, seed=1)["variance_raw"] != b["variance_raw"]
    # without the scale the softmax saturates as d_k grows; with it, it does not
    raw, scaled = b["sweep_max_weight_raw"], b["sweep_max_weight_scaled"]
    assert raw[-1] > 0.9 and raw[-1] > raw[0] + 0.5
    assert max(scaled) - min(scaled) < 0.15
    assert b["row_max_weight_raw"] == max(b["row_weights_raw"])


def test_temperature_and_shift_invariance(client):
    b = get(client, "/curves/softmax-scale", logits="2,1,0.5,0,-1", temperature=0.5, shift=500)
    assert b["probs_shifted"] == pytest.approx(b["probs_t1"], abs=1e-15)
    assert b["shift_max_abs_diff"] < 1e-15
    assert b["probs_t1"] == pytest.approx(
        torch.softmax(torch.tensor([2, 1, 0.5, 0, -1.0], dtype=torch.float64), 0).tolist()
    )
    assert b["probs_temperature"][0] > b["probs_t1"][0]  # a temperature below 1 sharpens
    hot = get(client, "/curves/softmax-scale", temperature=5)
    assert hot["probs_temperature"][0] < hot["probs_t1"][0]


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------


def test_gpt1_parameter_count_and_embedding_share(client):
    b = get(client, "/params", preset="gpt1")
    assert b["counts"]["seed_convention"] == 116_414_976
    assert b["counts"] == count_params(preset_config("gpt1"))
    assert b["counts"]["token_embedding"] == 31_087_104 and b["counts"]["position_embedding"] == 393_216
    assert b["counts"]["per_block_seed_convention"] == 7_077_888 and b["non_embedding"] == 84_934_656
    assert round(100 * b["token_embedding_share"]) == 27 and round(100 * b["embedding_share"]) == 27
    assert sum(p["count"] for p in b["parts"]) == b["counts"]["total"]


def test_gpt2_sizes_and_a_gpt3_layer(client):
    assert get(client, "/params", preset="gpt2")["counts"]["total"] == 124_439_808
    sizes = {r["name"]: r for r in get(client, "/params/presets")["presets"]}
    assert [sizes[n]["total"] for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")] == sorted(
        sizes[n]["total"] for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
    )
    assert sizes["gpt2-xl"]["total"] == pytest.approx(1.56e9, rel=0.01)
    assert sizes["gpt3"]["per_block"] == 1_811_939_328 == 12 * 12_288**2
    assert sizes["gpt3"]["total"] == pytest.approx(175e9, rel=0.01)
    layer = get(client, "/params", preset="gpt3", n_layer=1)
    assert layer["counts"]["per_block_seed_convention"] == layer["twelve_d_squared"] == 1_811_939_328
    assert layer["counts"]["per_block_seed_convention"] == pytest.approx(1.81e9, rel=0.005)
    # any config by its fields alone (d_mlp defaults to 4 d)
    own = get(client, "/params", vocab_size=1000, n_ctx=128, n_layer=3, n_head=4, d_model=64)
    assert own["preset"] is None and own["config"]["d_mlp"] == 256
    assert get(client, "/params", preset="gpt1", d_model=1024, n_head=16)["config"]["d_mlp"] == 4096


def test_loaded_model_parameter_count(client, service):
    b = get(client, "/params", preset="model")
    assert b["counts"]["total"] == service.model.num_params()


def test_kv_cache_mha_versus_gqa(client):
    b = get(
        client,
        "/curves/kv-cache",
        n_layer=32,
        n_head=32,
        n_kv_head=8,
        d_head=128,
        context=4096,
        batch=1,
        bytes_per_value=2,
    )
    assert b["bytes_mha"] == 2 * 32 * 32 * 128 * 4096 * 2 == 2 * 1024**3
    assert b["bytes_gqa"] * 4 == b["bytes_mha"] and b["ratio"] == 4.0 and b["group_size"] == 4
    assert b["curve_mha"][-1] == b["bytes_mha"] and b["contexts"][0] == 0 and b["curve_mha"][0] == 0
    # GPT-2 small's multi-head cache: 2 x 12 layers x 768 numbers x 2 bytes = 36 KiB per token
    g = get(client, "/curves/kv-cache", n_layer=12, n_head=12, n_kv_head=12, d_head=64, context=1024)
    assert g["bytes_per_token_mha"] == 36 * 1024 and g["bytes_mha"] == 36 * 1024**2


def test_scaling_law_line(client):
    b = get(client, "/curves/scaling-law")
    assert (b["n_c"], b["alpha"]) == (8.8e13, 0.076)
    for n, loss in zip(b["n"], b["loss"]):
        assert loss == pytest.approx((n / 8.8e13) ** -0.076)
    assert b["per_tenfold"] == pytest.approx(0.175, abs=5e-4)
    marks = {m["label"]: m for m in b["marks"]}
    assert marks["GPT-1"]["n"] == 84_934_656
    # from GPT-2 XL (~1.5B) to GPT-3 (~175B) the line lowers ln L by alpha * ln(N3 / N2): about 0.36 nats
    drop = math.log(marks["GPT-2 XL"]["loss"]) - math.log(marks["GPT-3 175B"]["loss"])
    assert drop == pytest.approx(0.076 * math.log(marks["GPT-3 175B"]["n"] / marks["GPT-2 XL"]["n"]))
    assert 0.3 < drop < 0.4


# --------------------------------------------------------------------------------------------
# Optimisers
# --------------------------------------------------------------------------------------------


def _torch_path(opt_cls, start, steps, ravine, **kw):
    p = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    opt = opt_cls([p], **kw)
    xs = [p.detach().clone().tolist()]
    for _ in range(steps):
        opt.zero_grad()
        x, y = p[0], p[1]
        (0.5 * (ravine.a * (x - ravine.x0) ** 2 + ravine.b * (y - ravine.y0) ** 2)).backward()
        opt.step()
        xs.append(p.detach().clone().tolist())
    return xs


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "adamw"])
def test_update_rules_match_torch_optim(name):
    rv, start, steps = C.Ravine(), (-4.0, 2.0), 40
    rules = {
        "sgd": (lambda t, g, s: C.sgd_step(t, g, s, 0.3), torch.optim.SGD, dict(lr=0.3)),
        "momentum": (lambda t, g, s: C.momentum_step(t, g, s, 0.1, 0.9), torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
        "adam": (
            lambda t, g, s: C.adam_step(t, g, s, 0.2, 0.9, 0.999),
            torch.optim.Adam,
            dict(lr=0.2, betas=(0.9, 0.999)),
        ),
        "adamw": (
            lambda t, g, s: C.adamw_step(t, g, s, 0.2, 0.9, 0.999, weight_decay=0.1),
            torch.optim.AdamW,
            dict(lr=0.2, betas=(0.9, 0.999), weight_decay=0.1),
        ),
    }
    update, cls, kw = rules[name]
    ours = C.descend(rv, start, steps, update)
    theirs = _torch_path(cls, start, steps, rv, **kw)
    assert len(ours["x"]) == len(theirs) == steps + 1
    assert [v for x, y in zip(ours["x"], ours["y"]) for v in (x, y)] == pytest.approx(
        [v for xy in theirs for v in xy], abs=1e-9
    )


def test_optimizers_on_the_ravine(client):
    b = get(client, "/curves/optimizers")
    paths = {p["name"]: p for p in b["paths"]}
    assert set(paths) == {"sgd", "momentum", "adam", "adamw", "muon"}
    g = b["grid"]
    assert len(g["z"]) == len(g["y"]) and all(len(row) == len(g["x"]) for row in g["z"])
    rv = C.Ravine(a=b["a"], b=b["b"], x0=b["minimum"]["x"], y0=b["minimum"]["y"])
    assert g["z"][3][5] == pytest.approx(rv.loss(g["x"][5], g["y"][3]))
    for p in paths.values():
        assert len(p["x"]) == len(p["y"]) == len(p["loss"]) == b["steps"] + 1 and not p["diverged"]
        assert (p["x"][0], p["y"][0]) == (b["start"]["x"], b["start"]["y"])
        assert g["x"][0] <= min(p["x"]) and max(p["x"]) <= g["x"][-1]
        assert p["final_loss"] < p["loss"][0]
    # momentum and Adam beat plain SGD along the shallow floor; AdamW's decay keeps it short of x0
    assert paths["momentum"]["final_loss"] < paths["sgd"]["final_loss"]
    assert paths["adam"]["final_loss"] < paths["sgd"]["final_loss"]
    assert abs(paths["adamw"]["x"][-1]) < abs(paths["adam"]["x"][-1])
    # Muon (the two parameters as a diagonal matrix): every step moves each coordinate by exactly lr
    mu = paths["muon"]
    steps = [(abs(mu["x"][i + 1] - mu["x"][i]), abs(mu["y"][i + 1] - mu["y"][i])) for i in range(5)]
    assert all(dx == pytest.approx(0.15) and dy == pytest.approx(0.15) for dx, dy in steps)
    assert mu["final_loss"] < paths["sgd"]["final_loss"]
    # above lr = 2 / b plain SGD blows up, and says so instead of sending infinities
    d = get(client, "/curves/optimizers", lr_sgd=0.6, steps=400)
    sgd = next(p for p in d["paths"] if p["name"] == "sgd")
    assert d["sgd_stability_limit"] == 0.5 and sgd["diverged"] and len(sgd["x"]) < 401


# --------------------------------------------------------------------------------------------
# Bad input: 422 naming the field, never a 500, never NaN
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, params, field",
    [
        ("/schedules/lr", {"kind": "cosine"}, "kind"),
        ("/schedules/lr", {"kind": "transformer", "d_model": 0}, "d_model"),
        ("/schedules/lr", {"kind": "transformer", "warmup": 0}, "warmup"),
        ("/schedules/lr", {"kind": "gpt1", "max_lr": -1}, "max_lr"),
        ("/schedules/lr", {"kind": "gpt1", "max_lr": "nan"}, "max_lr"),
        ("/schedules/lr", {"kind": "gpt1", "max_lr": "inf"}, "max_lr"),
        ("/schedules/lr", {"kind": "gpt1", "min_lr": 1e-3}, "min_lr"),
        ("/schedules/lr", {"kind": "gpt1", "warmup": 5000, "total_steps": 1000}, "warmup"),
        ("/schedules/lr", {"kind": "model", "total_steps": 0}, "total_steps"),
        ("/schedules/lr", {"kind": "gpt1", "points": 1}, "points"),
        ("/curves/gelu", {"x_min": -50}, "x_min"),
        ("/curves/gelu", {"x_min": 2, "x_max": 1}, "x_max"),
        ("/curves/cross-entropy", {"vocab_size": 1}, "vocab_size"),
        ("/curves/cross-entropy", {"logits": "1,two,3"}, "logits"),
        ("/curves/cross-entropy", {"logits": "1"}, "logits"),
        ("/curves/cross-entropy", {"logits": "1,1e9"}, "logits"),
        ("/curves/cross-entropy", {"logits": "1,nan"}, "logits"),
        ("/curves/cross-entropy", {"logits": "1,2", "target": 2}, "target"),
        ("/curves/cross-entropy", {"epsilon": 1.5}, "epsilon"),
        ("/curves/label-smoothing", {"epsilon": -0.1}, "epsilon"),
        ("/curves/label-smoothing", {"vocab_size": 1}, "vocab_size"),
        ("/curves/softmax-scale", {"d_k": 0}, "d_k"),
        ("/curves/softmax-scale", {"d_k": 100_000}, "d_k"),
        ("/curves/softmax-scale", {"d_k": 1024, "samples": 100_000}, "samples"),
        ("/curves/softmax-scale", {"temperature": 0}, "temperature"),
        ("/params", {"preset": "gpt5"}, "preset"),
        ("/params", {"d_model": 100, "n_head": 3}, "n_head"),
        ("/params", {"preset": "gpt1", "n_layer": 0}, "n_layer"),
        ("/curves/kv-cache", {"n_head": 32, "n_kv_head": 5}, "n_kv_head"),
        ("/curves/kv-cache", {"n_head": 8, "n_kv_head": 16}, "n_kv_head"),
        ("/curves/kv-cache", {"bytes_per_value": 0}, "bytes_per_value"),
        ("/curves/scaling-law", {"n_min": 1e9, "n_max": 1e6}, "n_max"),
        ("/curves/scaling-law", {"alpha": 0}, "alpha"),
        ("/curves/optimizers", {"momentum": 1}, "momentum"),
        ("/curves/optimizers", {"lr_adam": 0}, "lr_adam"),
        ("/curves/optimizers", {"steps": 5000}, "steps"),
    ],
)
def test_bad_parameters_get_422_naming_the_field(client, path, params, field):
    r = client.get(f"/api/v1{path}", params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][-1] == field for d in detail), detail


@pytest.mark.parametrize(
    "path, params",
    [
        (
            "/schedules/lr",
            {"kind": "transformer", "d_model": 1, "warmup": 1, "total_steps": 100_000_000, "points": 4000},
        ),
        ("/schedules/lr", {"kind": "gpt1", "max_lr": 10, "min_lr": 10, "warmup": 0, "total_steps": 1}),
        ("/schedules/lr", {"kind": "model", "warmup": 0, "min_lr": 0}),
        ("/curves/gelu", {"x_min": -20, "x_max": 20, "points": 4000}),
        ("/curves/cross-entropy", {"vocab_size": 100_000_000, "logits": "100,-100", "target": 1, "epsilon": 1}),
        ("/curves/label-smoothing", {"epsilon": 1, "vocab_size": 2}),
        ("/curves/label-smoothing", {"epsilon": 0, "vocab_size": 100_000_000}),
        ("/curves/label-smoothing", {"epsilon": 1e-12, "vocab_size": 100_000_000}),
        (
            "/curves/softmax-scale",
            {"d_k": 1024, "samples": 100, "n_keys": 64, "temperature": 0.05, "shift": -1000, "logits": "100,-100"},
        ),
        (
            "/curves/kv-cache",
            {
                "n_layer": 1000,
                "n_head": 1024,
                "n_kv_head": 1,
                "d_head": 4096,
                "context": 10_000_000,
                "batch": 4096,
                "bytes_per_value": 8,
            },
        ),
        ("/curves/scaling-law", {"n_min": 1e3, "n_max": 1e15, "alpha": 1, "n_c": 1e6}),
        (
            "/curves/optimizers",
            {
                "a": 100,
                "b": 100,
                "lr_sgd": 10,
                "lr_momentum": 10,
                "momentum": 0.999,
                "lr_adam": 10,
                "steps": 1000,
                "start_x": 10,
                "start_y": -10,
                "grid": 10,
            },
        ),
        ("/params", {"preset": "gpt3", "n_layer": 1000, "d_model": 65536, "n_head": 1024, "vocab_size": 10_000_000}),
    ],
)
def test_extreme_but_valid_parameters_give_finite_json(client, path, params):
    get(client, path, **params)


def test_curves_index_lists_every_endpoint(client):
    paths = [e["path"] for e in get(client, "/curves")["endpoints"]]
    for p in paths:
        get(client, p.removeprefix("/api/v1"))


def test_learn_page_links_its_json_twin_and_the_nav(client):
    r = client.get("/learn")
    assert r.status_code == 200
    assert r.headers["link"] == '</api/v1/curves>; rel="alternate"; type="application/json"'
    assert '<a href="/learn" aria-current="page">Learning</a>' in r.text
    assert 'import { init } from "/static/js/learn/main.js"; init();' in r.text
    entry = client.get("/static/js/learn/main.js")
    assert entry.status_code == 200
    for module in (
        "schedules",
        "gelu",
        "loss",
        "smoothing",
        "softmax",
        "sizes",
        "kvcache",
        "scaling",
        "optimizers",
    ):
        assert f'from "./{module}.js"' in entry.text
        assert client.get(f"/static/js/learn/{module}.js").status_code == 200
    assert (
        '<a href="/learn" >Learning</a>' in client.get("/tokenizer").text
        or 'href="/learn"' in client.get("/tokenizer").text
    )
