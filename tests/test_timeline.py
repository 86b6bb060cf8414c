"""A run's timeline (model/timeline.py): the log-spaced default snapshots and their plan (count, steps,
disk), the in-context-learning score, the phase-change finder, and the heads-over-training answer
that carries both for a short run trained through the API."""

from __future__ import annotations

import itertools
import math
import time

import pytest
import torch

from gptscope.model import timeline
from gptscope.server.schemas.training import TrainingRequest

FAST = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "small"}


# --- the schedule ----------------------------------------------------------------------------------


def test_the_default_schedule_is_log_spaced_early_and_the_requests_default():
    f = timeline.TIMELINE_SNAPSHOTS
    assert f[0] == 0.0 and f[-1] == 1.0 and list(f) == sorted(set(f)) and 10 <= len(f) <= 12
    ratios = [b / a for a, b in itertools.pairwise(f[1:7])]  # the early points: each about twice the last
    assert all(1.8 <= r <= 2.2 for r in ratios), ratios
    assert sum(x <= 0.1 for x in f) >= 6  # most of them in the first tenth of the run
    gaps = [b - a for a, b in itertools.pairwise(f)]
    assert gaps[1] < gaps[-1] / 10  # much denser early than late
    assert TrainingRequest(max_steps=10).snapshots == list(f)


def test_snapshot_steps_round_as_the_trainer_and_merge_on_a_short_run():
    assert timeline.snapshot_steps(timeline.TIMELINE_SNAPSHOTS, 1000) == [
        0,
        5,
        10,
        20,
        40,
        80,
        150,
        300,
        500,
        750,
        1000,
    ]
    assert timeline.snapshot_steps(timeline.TIMELINE_SNAPSHOTS, 60) == [0, 1, 2, 5, 9, 18, 30, 45, 60]
    assert timeline.snapshot_steps([0, 0.5, 1], 7) == [0, 4, 7]


def test_the_plan_counts_the_snapshots_and_their_disk_before_a_run(client):
    r = client.post("/api/v1/training-plan", json={**FAST, "max_steps": 60, "optimizer": "adamw"})
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["steps"] == [0, 1, 2, 5, 9, 18, 30, 45, 60] and p["count"] == 9
    assert p["weights_bytes"] == 4 * p["params"] and p["with_optimizer"] == 7  # not step 0, nor the last
    assert p["optimizer_bytes"] == 4 * 2 * p["params"]  # AdamW: two float32 moments per parameter
    assert p["bytes_total"] == 9 * p["weights_bytes"] + 7 * p["optimizer_bytes"]
    old = client.post("/api/v1/training-plan", json={**FAST, "max_steps": 60, "snapshots": [0, 0.5, 1]}).json()
    assert old["steps"] == [0, 30, 60] and old["count"] == 3 and old["with_optimizer"] == 1
    timed = client.post("/api/v1/training-plan", json={**FAST, "time_budget": 5}).json()
    assert timed["steps"] is None and timed["count"] == len(timeline.TIMELINE_SNAPSHOTS)
    assert timed["with_optimizer"] == len(timeline.TIMELINE_SNAPSHOTS) - 2
    bigger = client.post("/api/v1/training-plan", json={**FAST, "max_steps": 60, "overrides": {"n_layer": 4}}).json()
    assert bigger["params"] > p["params"] and bigger["bytes_total"] > p["bytes_total"]
    bad = client.post("/api/v1/training-plan", json={**FAST, "max_steps": 60, "snapshots": [0.1] * 13})
    assert bad.status_code == 422 and "snapshots" in bad.json()["detail"][0]["loc"]
    both = client.post("/api/v1/training-plan", json={**FAST, "max_steps": 60, "time_budget": 5})
    assert both.status_code == 422 and both.json()["detail"][0]["loc"][-1] == "max_steps"  # as POST /training says


# --- the in-context-learning score -----------------------------------------------------------------


class Uniform(torch.nn.Module):
    """Every token equally likely at every position: it reads nothing."""

    def forward(self, x):
        return torch.zeros(*x.shape, 16), None


class Copier(torch.nn.Module):
    """An induction head by hand: at each position, the token that followed the last earlier copy of
    the current token is made likely (uniform where the token has not occurred before). `flip` makes
    it unlikely instead: a model that gets its context backwards."""

    def __init__(self, flip: bool = False) -> None:
        super().__init__()
        self.flip = flip

    def forward(self, x):
        logits = torch.zeros(*x.shape, 16)
        for b, row in enumerate(x.tolist()):
            for t, tok in enumerate(row):
                before = [j for j in range(t) if row[j] == tok]
                if before:
                    logits[b, t, row[before[-1] + 1]] = -5.0 if self.flip else 5.0
        return logits, None


def periodic(n_windows: int, T: int) -> torch.Tensor:
    row = torch.tensor([3, 1, 4, 15, 9, 2, 6, 5, 13, 8, 7, 12, 0, 10, 11, 14]).repeat(T // 16 + 2)
    return torch.stack([row[i : i + T + 1] for i in range(n_windows)])


def test_icl_score_is_zero_for_a_model_that_ignores_context_and_negative_for_one_that_uses_it():
    w = periodic(4, 100)
    flat = timeline.icl_score(Uniform(), w)
    assert flat.score == 0.0 and flat.early_loss == pytest.approx(math.log(16), abs=1e-4)
    assert flat.early == (10, 20) and flat.late == (90, 100) and flat.windows == 4
    uses = timeline.icl_score(Copier(), w)
    assert uses.score < -1.0 and uses.late_loss < uses.early_loss  # late tokens, seen before, are easy
    worse = timeline.icl_score(Copier(flip=True), w)
    assert worse.score > 0  # a model that gets its context backwards scores above 0


def test_icl_score_of_a_real_gpt_untrained_is_near_zero():
    from gptscope.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=16, n_ctx=40, n_layer=1, n_head=2, d_model=32, dropout=0.0)).eval()
    s = timeline.icl_score(m, periodic(8, 40))
    assert abs(s.score) < 0.2 and s.loss == pytest.approx(math.log(16), abs=0.5)
    with pytest.raises(ValueError):
        timeline.icl_score(m, torch.zeros(3, dtype=torch.long))


def test_held_out_windows_are_spread_and_bounded():
    ids = torch.arange(1000)
    w = timeline.held_out_windows(ids, 64, count=4)
    assert w.shape == (4, 65) and w[0, 0] == 0 and w[-1, -1] == 999
    assert (w[:, 1:] - w[:, :-1] == 1).all()  # consecutive tokens of the text
    assert timeline.held_out_windows(ids, 64).shape[0] == timeline.icl_window_count(64) == 32
    assert timeline.icl_window_count(1024) == 4
    assert timeline.held_out_windows(torch.arange(50), 64).shape == (0, 65)  # too short for one


# --- the phase-change finder -----------------------------------------------------------------------


def test_phase_change_finds_the_largest_rise():
    series = [(300, 0.62), (0, 0.02), (100, 0.03), (200, 0.6), (400, 0.61)]  # any order
    pc = timeline.phase_change(series, min_rise=0.05)
    assert (pc.from_step, pc.step) == (100, 200) and pc.clear
    assert (pc.before, pc.after) == (0.03, 0.6) and pc.share == pytest.approx(0.57 / 0.6)
    wobble = timeline.phase_change([(0, 0.02), (10, 0.021), (20, 0.02)], min_rise=0.05)
    assert wobble.step == 10 and not wobble.clear
    assert timeline.phase_change([(0, 0.5), (10, 0.4), (20, 0.1)]) is None  # only falls
    assert timeline.phase_change([(0, 0.3), (10, 0.3)]) is None  # flat
    assert timeline.phase_change([(0, 0.3)]) is None
    assert timeline.phase_change([(0, 0.1), (5, float("nan")), (10, 0.5)]).from_step == 0  # NaN left out


# --- over training, through the API ----------------------------------------------------------------


def finished(c, req):
    run_id = c.post("/api/v1/training", json=req).json()["id"]
    t = time.time()
    while time.time() - t < 60:
        body = c.get(f"/api/v1/training/{run_id}").json()
        if body["status"] not in ("starting", "running"):
            return body
        time.sleep(0.1)
    raise AssertionError("the run did not finish")


def test_heads_over_training_carry_the_icl_score_and_a_phase_change(tclient, tmp_path):
    req = {**FAST, "max_steps": 20, "seed": 5}  # the default, log-spaced snapshots
    plan = tclient.post("/api/v1/training-plan", json=req).json()
    body = finished(tclient, req)
    assert body["status"] == "done" and body["snapshots"] == plan["steps"] == [0, 1, 2, 3, 6, 10, 15, 20]
    run_dir = tclient.app.state.jobs["training"].runs_dir / body["id"] / "snapshots"
    on_disk = sum(f.stat().st_size for f in run_dir.rglob("*.safetensors"))
    assert on_disk == pytest.approx(plan["bytes_total"], rel=0.05)  # the plan's disk cost is what was written

    h = tclient.get(f"/api/v1/training/{body['id']}/heads").json()
    snaps = h["snapshots"]
    assert [s["step"] for s in snaps] == plan["steps"]
    for s in snaps:
        icl = s["icl"]
        assert icl["text"] == "run" and icl["windows"] >= 4 and icl["early"] == [6, 12] and icl["late"] == [58, 64]
        assert icl["score"] == pytest.approx(icl["late_loss"] - icl["early_loss"], abs=2e-4)
    first, last = snaps[0]["icl"], snaps[-1]["icl"]
    assert abs(first["score"]) < 0.15 and first["loss"] == pytest.approx(math.log(300), abs=0.4)  # untrained
    assert last["loss"] < first["loss"] - 1.0  # the held-out loss falls as it trains

    pc = h["phase_change"]
    best = [s["best"]["induction"] for s in snaps]
    rises = [b - a for a, b in itertools.pairwise(best)]
    if max(rises) <= 0:
        assert pc is None
        return
    i = rises.index(max(rises)) + 1
    assert (pc["from_step"], pc["step"]) == (snaps[i - 1]["step"], snaps[i]["step"])
    assert (pc["induction_before"], pc["induction_after"]) == (best[i - 1], best[i])
    assert (pc["icl_before"], pc["icl_after"]) == (snaps[i - 1]["icl"]["score"], snaps[i]["icl"]["score"])
    assert pc["clear"] == (max(rises) >= 0.05) and f"steps {pc['from_step']:,} and {pc['step']:,}" in pc["summary"]
