"""Token attribution (issue #46): integrated gradients on the input embeddings are complete (their sum is
f(x) - f(baseline) up to the rule's error, which shrinks with steps and is under 1% at the default on the
built-in model; tests/test_ig_convergence.py checks the imported families, issue #62), a copied name's attribution is largest on its earlier occurrence, a 64-token prompt answers
at interactive speed (under 2 s on a quiet machine: benchmarks/lens_ig.py), every position comes as a matrix at once or as a job, and bad input is refused naming the field."""

from __future__ import annotations

import time

import pytest
import torch

from gptscope.model import token_attribution as ta
from gptscope.model.gpt import GPT, GPTConfig, preset_config

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"  # /patch's pair
EDWARD = CAESAR.replace("Caesar", "Edward")
LONG = (
    "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
    "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief that thou her maid "
    "art far more fair than she."
)


def one_token(service, word: str) -> int:
    ids = service.encoding.encode_ordinary(word)
    assert len(ids) == 1, (word, ids)
    return ids[0]


def attribute(client, **body) -> dict:
    r = client.post("/api/v1/token-attribution", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_completeness_error_shrinks_with_steps_and_is_under_1_percent_at_the_default(client, service):
    caesar = one_token(service, " Caesar")
    errors = []
    for steps in (2, 8, 32):
        row = attribute(client, text=CAESAR, target=caesar, steps=steps)["rows"][0]
        c = row["completeness"]
        assert c["difference"] == pytest.approx(row["f_input"] - row["f_baseline"], abs=1e-4)
        assert c["attribution_sum"] == pytest.approx(sum(row["integrated_gradients"]), abs=1e-3)
        errors.append(c["relative_error"])
    assert errors[0] > errors[1] > errors[2]
    default = attribute(client, text=CAESAR)  # 32 Gauss-Legendre points, the top prediction, the zero baseline
    assert default["steps"] == 32 and default["baseline"] == "zero" and "zeros" in default["baseline_description"]
    assert default["quadrature"] == "gauss_legendre" and "Gauss-Legendre" in default["rule"]
    assert default["baseline_reason"].startswith("this model's default")
    assert default["rows"][0]["completeness"]["relative_error"] < 0.01
    assert default["worst_relative_error"] == default["rows"][0]["completeness"]["relative_error"]
    mean = attribute(client, text=CAESAR, baseline="mean")
    assert mean["rows"][0]["completeness"]["relative_error"] < 0.01
    midpoint = attribute(client, text=CAESAR, rule="midpoint")  # the other rule, as before issue #62
    assert midpoint["rows"][0]["completeness"]["relative_error"] < 0.01
    assert mean["rows"][0]["f_baseline"] != default["rows"][0]["f_baseline"]


@pytest.mark.parametrize(("text", "name", "other"), [(CAESAR, " Caesar", " Edward"), (EDWARD, " Edward", " Caesar")])
def test_a_copied_name_owes_most_to_its_earlier_occurrence(client, service, text, name, other):
    """The logit difference between the name the scene repeats and another name: integrated gradients put
    the most on a token that is an earlier mention of the name (and the rest of the methods agree on which)."""
    body = attribute(client, text=text, target=one_token(service, name), contrast=one_token(service, other))
    assert body["metric"] == "logit_difference"
    row, T = body["rows"][0], len(body["tokens"])
    assert row["position"] == T - 1 and row["contrast"]["text"] == other
    mentions = [t["index"] for t in body["tokens"][:-1] if t["text"] == name]
    assert len(mentions) == 2
    ig = row["integrated_gradients"]
    assert max(range(T), key=lambda i: ig[i]) in mentions
    assert max(range(T), key=lambda i: row["gradient_x_input"][i]) in mentions


def test_the_other_methods(client, service):
    body = attribute(client, text=CAESAR, position=10)
    row = body["rows"][0]
    T = len(body["tokens"])
    assert row["position"] == 10 and body["causal"]
    for m in ("integrated_gradients", "gradient_x_input", "occlusion", "rollout"):
        assert len(row[m]) == T and all(v is None for v in row[m][11:]) and all(v is not None for v in row[m][:11])
    assert sum(row["rollout"][:11]) == pytest.approx(1.0, abs=1e-4)
    assert [m["name"] for m in body["methods"]] == ["integrated_gradients", "gradient_x_input", "occlusion", "rollout"]
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
    ):  # occlusion is f(x) minus one run with that token's row zeroed
        ids = torch.tensor([service.encoding.encode_ordinary(CAESAR)[:11]])
        x = service.model.wte(ids).detach()
        x[0, 4] = 0
        with ta.embedded(service.model, x):
            logits, _ = service.model(ids)
    dropped = float(logits[0, 10, row["target"]["id"]].detach())
    assert row["occlusion"][4] == pytest.approx(row["f_input"] - dropped, abs=1e-3)


# The 2-s figure is benchmarks/lens_ig.py's, on a quiet machine (1.10 s on a 2-core AMD EPYC). Here the
# other test worker shares the cores: on that EPYC the same request took 2.02-2.04 s of this process's CPU
# time and 2.05-3.07 s of wall (min of 3) beside it, against 1.05 s alone: under that load the CPU time
# itself grows (the two workers share the caches and memory, perhaps one physical core). So this guard
# bounds the CPU time at 3 s: a request that did its points one pass at a time fails it anyway.
CPU_S = 3.0


def test_a_64_token_prompt_answers_at_interactive_speed(client, service):
    ids = service.encoding.encode_ordinary(LONG)[:64]
    assert len(ids) == 64
    times, walls = [], []
    for _ in range(3):
        t0, w0 = time.process_time(), time.perf_counter()
        attribute(client, ids=ids)
        times.append(time.process_time() - t0)
        walls.append(time.perf_counter() - w0)
    assert min(times) < CPU_S, (times, walls)


def test_every_position_at_once_and_as_a_job(client, service):
    text = "ROMEO:\nBut soft, what light"
    once = attribute(client, text=text, every_position=True, steps=8)
    T = len(once["tokens"])
    assert [r["position"] for r in once["rows"]] == list(range(T))
    assert all(len(r["integrated_gradients"]) == T for r in once["rows"])
    assert once["worst_relative_error"] == max(
        r["completeness"]["relative_error"] for r in once["rows"] if r["completeness"]["relative_error"] is not None
    )
    r = client.post("/api/v1/token-attribution/jobs", json={"text": text, "every_position": True, "steps": 8})
    assert r.status_code == 202, r.text
    job = r.json()
    while job["status"] == "running":
        time.sleep(0.2)
        job = client.get(f"/api/v1/token-attribution/jobs/{job['id']}").json()
    assert job["status"] == "done" and job["done"] == job["total"] == T + 2 + T * (8 + 1)
    assert job["result"] == once


def test_more_work_than_a_request_is_sent_to_the_job(client):
    r = client.post("/api/v1/token-attribution", json={"text": LONG * 2, "every_position": True})
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"][-1] == "steps" and "/api/v1/token-attribution/jobs" in d["msg"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"text": CAESAR, "position": 99}, "position"),
        ({"text": CAESAR, "target": 99999}, "target"),
        ({"text": CAESAR, "target": 5, "contrast": 5}, "contrast"),
        ({"text": CAESAR, "contrast": 99999}, "contrast"),
        ({"text": CAESAR, "steps": 0}, "steps"),
        ({"text": CAESAR, "steps": 5000}, "steps"),
        ({"text": CAESAR, "baseline": "pad"}, "baseline"),
        ({"text": CAESAR, "rule": "simpson"}, "rule"),
        ({"ids": [0, 99999]}, "ids"),
        ({"text": ""}, "text"),
    ],
)
def test_bad_input_is_refused_naming_the_field(client, payload, field):
    r = client.post("/api/v1/token-attribution", json=payload)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][-1] == field


def test_a_contrast_equal_to_the_top_prediction_is_refused(client, service):
    top = attribute(client, text=CAESAR)["rows"][0]["target"]["id"]
    r = client.post("/api/v1/token-attribution", json={"text": CAESAR, "contrast": top})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "contrast"


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_completeness_holds_for_pre_and_post_norm_blocks(norm):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, d_model=16, norm=norm)).eval()
    ids = torch.randint(0, 61, (12,)).tolist()
    for steps in (4, 64):
        (r,) = ta.attribute(model, ids, [ta.Row(11, 3, 7)], steps=steps)
        err = abs(float(r.integrated_gradients.sum()) - (r.f_input - r.f_baseline))
        assert err < (0.05 if steps == 4 else 1e-3) * abs(r.f_input - r.f_baseline)


def test_nanochats_block_is_refused_by_name():
    with pytest.raises(ValueError, match="nanochat's block"):
        ta.check_model(preset_config("nanochat-tiny"))
    model = GPT(preset_config("nanochat-tiny", vocab_size=61, n_ctx=16)).eval()
    with pytest.raises(ValueError, match="value embeddings"):
        ta.attribute(model, [1, 2, 3], [ta.Row(2, 5)])


@pytest.mark.parametrize("stop_at", [3, 4])  # the last block's forward pass (the 3rd ask), its backward (the 4th)
def test_a_cancel_is_heard_inside_a_batched_pass_and_changes_no_number(stop_at):
    """Pace.step asks cancel() before a pass and, through `stoppable`, after each block on the way forward
    and back: a cancel lands inside the pass (no pass reported done), and a run that is not cancelled
    gives the same numbers as one whose pace never asks."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=61, n_ctx=16, n_layer=2, n_head=2, d_model=16)).eval()
    ids, row = torch.randint(0, 61, (12,)).tolist(), ta.Row(11, 3, 7)
    prep = ta.prepare(model, ids, [row])
    asked, done = [], []

    def cancel() -> bool:
        asked.append(1)
        return len(asked) >= stop_at

    with pytest.raises(ta.Cancelled):
        ta.explain_row(model, prep, 0, 8, ta.Pace(cancel=cancel, done=done.append))
    assert len(asked) == stop_at and done == []  # asked before the pass, then by the blocks: 2 forward, 2 back
    plain = ta.explain_row(model, prep, 0, 8)
    paced = ta.explain_row(model, prep, 0, 8, ta.Pace(cancel=lambda: False))
    assert torch.equal(plain.integrated_gradients, paced.integrated_gradients)
    assert all(not b._forward_hooks for b in model.blocks)  # the hooks leave with the pass
