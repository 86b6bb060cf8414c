"""A run's timeline through the API (POST /api/v1/timeline/jobs), on the run the README's finding reads:
/train's "Watch an induction head form" experiment's run with repeated spans, trained here through
POST /api/v1/training with the default log-spaced snapshots (in float32, as the README says).

The timeline must find the induction head's phase change at the snapshot the README names, with the
in-context-learning scores around it, and the shipped pair's circuit at five snapshots or more; its
numbers must be the snapshots' own (a head's score, the circuit's edges, the SAE matching) and a
second job must read them from what the first kept. About 3 minutes on one core: the run is most of it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gptscope.model import timeline
from gptscope.server.experiments import EXPERIMENTS

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[1] / "README.md"


def until_done(c, url: str, timeout: float = 300.0) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        body = c.get(url).json()
        if body["status"] not in ("queued", "starting", "running"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"{url} did not finish in {timeout} s")


@pytest.fixture(scope="module")
def run(tmp_path_factory, service):
    """The experiment's second variant (repeated spans), trained through the API in float32, on one torch
    thread: beside the other test worker, a second thread spin-waits (1,500 steps took 5 minutes on two)."""
    from fastapi.testclient import TestClient

    from gptscope.server import jobs
    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    mp = pytest.MonkeyPatch()
    mp.setattr(jobs, "JOB_THREADS", 1)

    app = create_app(
        Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path_factory.mktemp("tl"), allow_hosts=["testserver"]),
        service=service,
    )
    exp = next(e for e in EXPERIMENTS if e.name == "induction-heads")
    req = exp.variants[1].request.model_dump()
    assert (
        req["repeats"] == 1.0 and req["snapshots"] == list(timeline.TIMELINE_SNAPSHOTS) and req["precision"] == "fp32"
    )
    with TestClient(app) as c:
        r = c.post("/api/v1/training", json=req)
        assert r.status_code == 202, r.text
        body = until_done(c, f"/api/v1/training/{r.json()['id']}")
        assert body["status"] == "done", body.get("error")
        assert body["precision"].startswith("fp32"), body["precision"]
        yield c, body
    mp.undo()


@pytest.fixture(scope="module")
def answer(run):
    c, body = run
    r = c.post("/api/v1/timeline/jobs", json={"run": body["id"]})
    assert r.status_code == 202, r.text
    job = until_done(c, f"/api/v1/timeline/jobs/{r.json()['id']}")
    assert job["status"] == "done", job["error"]
    assert job["done"] == job["total"] == len(body["snapshots"]) and job["partial"] is None
    return job["result"]


def readme_finding() -> dict:
    """The numbers of the README's timeline finding."""
    text = " ".join(README.read_text(encoding="utf-8").replace("**", "").split())
    m = re.search(
        r"best induction score jumps from ([\d.]+) to ([\d.]+) between steps ([\d,]+) and ([\d,]+)"
        r".*?in-context-learning score goes from ([+-][\d.]+) to ([+-][\d.]+)"
        r".*?circuit .*? at (\d+) snapshots.*?keeps (\d+)% .*? with (\d+) of (\d+) edges",
        text,
        re.S,
    )
    assert m, "the README's timeline finding is not where the test looks for it"
    g = m.groups()
    return {
        "before": float(g[0]),
        "after": float(g[1]),
        "from_step": int(g[2].replace(",", "")),
        "step": int(g[3].replace(",", "")),
        "icl_before": float(g[4]),
        "icl_after": float(g[5]),
        "circuits": int(g[6]),
        "recovered": int(g[7]),
        "edges": int(g[8]),
        "total_edges": int(g[9]),
    }


def test_the_phase_change_is_where_the_readme_says_with_the_icl_score_around_it(run, answer):
    _, body = run
    steps = [s["step"] for s in answer["snapshots"]]
    assert steps == body["snapshots"] == timeline.snapshot_steps(timeline.TIMELINE_SNAPSHOTS, 1500)
    pc = answer["phase_change"]
    f = readme_finding()
    assert pc["clear"] and (pc["from_step"], pc["step"]) == (f["from_step"], f["step"])
    assert pc["induction_before"] == pytest.approx(f["before"], abs=0.06)
    assert pc["induction_after"] == pytest.approx(f["after"], abs=0.06)
    assert pc["induction_after"] >= pc["threshold"] > pc["induction_before"]  # a head passes the role's threshold
    # the noisiest number: CPUs that sum in another order have given +0.35 to +0.43 after the jump
    assert pc["icl_before"] == pytest.approx(f["icl_before"], abs=0.1)
    assert pc["icl_after"] == pytest.approx(f["icl_after"], abs=0.1)
    by_step = {s["step"]: s for s in answer["snapshots"]}
    assert pc["icl_before"] == by_step[pc["from_step"]]["icl"]["score"]  # the snapshots' own scores
    assert pc["induction_after"] == by_step[pc["step"]]["best"]["induction"]
    assert f"between steps {pc['from_step']:,} and {pc['step']:,}" in answer["summary"]
    # the previous-token head (the induction head's other half) has grown by the jump
    prev = [s["best"]["previous-token"] for s in answer["snapshots"]]
    assert by_step[pc["step"]]["best"]["previous-token"] > 3 * prev[0]
    jumps = {j["series"]: j for j in answer["jumps"]}
    assert jumps["best induction score"]["step"] == pc["step"]
    # an induction head needs a head before it that looks one back: the best of each is where it must be
    at = by_step[pc["step"]]["scores"]
    assert argmax(at["induction"])[0] == 1 and argmax(at["previous-token"])[0] == 0


def argmax(rows: list[list[float]]) -> tuple[int, int]:
    return max(((li, h) for li, row in enumerate(rows) for h in range(len(row))), key=lambda lh: rows[lh[0]][lh[1]])


def test_the_pairs_circuit_forms_at_five_snapshots_or_more(answer):
    f = readme_finding()
    with_circuit = [s for s in answer["snapshots"] if s["circuit"]]
    assert len(with_circuit) >= 5 and abs(len(with_circuit) - f["circuits"]) <= 1 and answer["pair"] == "dead-caesar"
    last = answer["snapshots"][-1]["circuit"]
    # the share kept varies with the CPU's float order more than the rest (86% and 96% seen for the README's run)
    assert last["recovered"] >= 0.8 and round(100 * last["recovered"]) == pytest.approx(f["recovered"], abs=15)
    assert last["edges"] == pytest.approx(f["edges"], abs=6) and last["total_edges"] == f["total_edges"]
    # the answer goes through a head that became an induction head: its values, then the logits
    final = answer["snapshots"][-1]["scores"]["induction"][1]
    heads = {int(h) for e in last["top"][:3] for h in re.findall(r"a1\.h(\d+)", e)}
    assert any(final[h] >= answer["phase_change"]["threshold"] for h in heads), (last["top"], final)
    assert all(abs(s["circuit"]["effect"]) >= 0.1 for s in with_circuit)
    for e in answer["edges"]:
        assert len(e["scores"]) == len(e["in_circuit"]) == len(answer["snapshots"])
        if e["appears"] is not None:  # in every circuit from that step on
            k = answer["steps"].index(e["appears"])
            assert all(e["in_circuit"][k:]) and (k == 0 or not e["in_circuit"][k - 1])
    tops = [s["circuit"]["top"] for s in with_circuit]
    assert set(last["top"]) <= {e["name"] for e in answer["edges"]} and all(tops)


def test_every_snapshot_carries_its_loss_split_lenses_and_sae(answer):
    first, last = answer["snapshots"][0], answer["snapshots"][-1]
    assert last["loss"] < first["loss"] - 2.0  # it learned
    for s in answer["snapshots"]:
        kinds = {k["kind"]: k for k in s["loss_by_kind"]}
        assert set(kinds) == set(timeline.TOKEN_KINDS) and sum(k["share"] for k in kinds.values()) == pytest.approx(
            1, abs=1e-3
        )
        mean = sum(k["loss"] * k["share"] for k in kinds.values() if k["loss"] is not None)
        assert mean == pytest.approx(s["loss"], abs=2e-3)  # the split adds back up to the loss
        assert s["icl"]["score"] == pytest.approx(s["icl"]["late_loss"] - s["icl"]["early_loss"], abs=2e-4)
        stages = s["lens"]
        assert [x["stage"] for x in stages] == ["embed", "block 0", "block 1"] and stages[-1]["logit_kl"] < 1e-4
        assert all(x["tuned_kl"] is not None for x in stages)
        assert len(s["scores"]["induction"]) == answer["n_layer"] and s["sae"]["alive"] > 0
    # a tuned lens reads the middle of a trained model better than the logit lens does
    assert last["lens"][1]["tuned_kl"] < last["lens"][1]["logit_kl"]
    feats = answer["features"]
    assert feats["layer"] == 1 and 0 <= feats["same_snapshot_share"] <= 1 and feats["count"] >= len(feats["lineages"])
    for s, prev in zip(answer["snapshots"][1:], answer["snapshots"]):
        assert s["sae"]["kept"] + s["sae"]["born"] == s["sae"]["alive"]
        assert s["sae"]["kept"] + s["sae"]["died"] == prev["sae"]["alive"]


def test_a_second_job_reads_what_the_first_kept_and_a_new_one_cancels(run, answer):
    c, body = run
    r = c.post("/api/v1/timeline/jobs", json={"run": body["id"]})
    again = until_done(c, f"/api/v1/timeline/jobs/{r.json()['id']}", 60)["result"]
    assert all(s["seconds"] == 0 for s in again["snapshots"])
    assert [s["best"] for s in again["snapshots"]] == [s["best"] for s in answer["snapshots"]]
    listed = c.get("/api/v1/timeline/runs").json()
    assert {"run": body["id"], "steps": body["snapshots"]} in listed
    slow = c.post("/api/v1/timeline/jobs", json={"run": body["id"], "lens_tokens": 500_000}).json()
    url = f"/api/v1/timeline/jobs/{slow['id']}"
    end = time.time() + 30
    while c.get(url).json()["status"] in ("queued", "starting") and time.time() < end:
        time.sleep(0.05)
    t0 = time.time()
    stopped = c.post(f"{url}/cancel").json()
    assert stopped["status"] == "cancelled" and time.time() - t0 < 5 and stopped["result"] is None


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"run": "no-such-run"}, None, "no run with snapshots"),
        ({"run": "../../etc"}, "run", "pattern"),
        ({"run": "models/../x"}, "run", "pattern"),
        ({"run": "RUN", "pair": "indirect-object"}, "pair", "does not fit"),
        ({"run": "RUN", "sae_layer": 7}, "sae_layer", "0..1"),
        ({"run": "RUN", "min_cosine": 1.5}, "min_cosine", "less than or equal"),
        ({"run": "RUN", "sae_tokens": 10**9}, "sae_tokens", "less than or equal"),
    ],
)
def test_bad_requests_are_refused_by_field_before_any_work(run, body, field, words):
    c, trained = run
    body = {k: (trained["id"] if v == "RUN" else v) for k, v in body.items()}
    r = c.post("/api/v1/timeline/jobs", json=body)
    if field is None:
        assert r.status_code == 404 and words in r.json()["detail"]
        return
    assert r.status_code == 422, (body, r.text[:300])
    detail = r.json()["detail"][0]
    assert detail["loc"][-1] == field and (words in detail["msg"] or words in detail["msg"].lower()), detail
