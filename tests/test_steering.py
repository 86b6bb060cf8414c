"""Probes and steering with honest baselines (issue #66): the shipped verse-or-prose task; the README's probe
curve and its table of four steering methods, recomputed; what each method adds, checked against its
definition; the same prompts and draws for every method; the job (progress, cancel); refusals naming the
field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_jobs import finish, until

from gptscope.model import steering as ms
from gptscope.model import tasks
from gptscope.model.gpt import GPT
from gptscope.server import steering_jobs

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"task": "form", "n_prompts": 3, "new_tokens": 6, "strengths": [0.5], "prefix_examples": [1]}


@pytest.fixture(scope="module")
def default(client):
    """The README's request: the defaults on the form task."""
    r = client.post("/api/v1/steering", json={"task": "form"})
    assert r.status_code == 200, r.text
    return r.json()


def readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text[text.index("## Steering, against its baselines") :].split("\n## ")[0]


def test_the_form_task_tells_verse_from_prose_by_the_line_starts():
    assert (
        tasks.form_of("Is this a dagger which I see before me,\nThe handle toward my hand? Come,\nLet me clutch thee.")
        == "verse"
    )
    assert (
        tasks.form_of("I have of late--but\nwherefore I know not--lost all my mirth, forgone all\ncustom of exercises")
        == "prose"
    )
    assert tasks.form_of("Two lines\nonly") is None  # too short to tell
    assert tasks.form_of("One\nTwo\nthree\nFour\n") is None  # mixed
    task = tasks.builtin("form")
    assert task.labels == ["verse", "prose"] and task.counts(task.test) == {"verse": 300, "prose": 300}
    assert {e.play for e in task.test} <= set(tasks.GENRE_TEST_PLAYS)
    assert not {e.play for e in task.train} & set(tasks.GENRE_TEST_PLAYS)
    assert all(tasks.form_of(e.text) == task.labels[e.label] for e in task.train[:200] + task.test[:200])


def test_the_readme_probe_curve_beats_both_baselines(client):
    r = client.post("/api/v1/probes", json={"task": "form"})
    assert r.status_code == 200, r.text
    a = r.json()
    acc = [p["accuracy"] for p in a["layers"]]
    control = [p["control_accuracy"] for p in a["layers"]]
    assert all(x > c + 0.1 and x > a["majority_baseline"] + 0.3 for x, c in zip(acc, control))
    text = " ".join(readme_section().split())
    assert f"**{100 * min(acc):.1f}–{100 * max(acc):.1f}%**" in text
    assert (
        f"gets {100 * min(control):.1f}–{100 * max(control):.1f}% and the majority label {100 * a['majority_baseline']:.1f}%"
        in text
    )


def test_the_readme_table_is_what_the_api_answers(default):
    rows = {m["method"]: m for m in default["methods"]}
    assert all(m["available"] for m in rows.values()) and default["layer"] == 3 and default["concept"] == "prose"
    titles = {"diffmean": "DiffMean", "probe": "probe direction", "sae": "SAE feature", "prompt": "prompt prefix"}
    section = readme_section()
    for method, title in titles.items():
        line = next(x for x in section.splitlines() if x.startswith(f"| {title} |"))
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        for cell, point in zip(cells, rows[method]["points"], strict=True):
            score, fluency = (float(x) for x in cell.split(", "))
            # two decimals; a sampled token may flip on another CPU's rounding, hence the margin
            assert abs(score - point["concept_score"]) < 0.02 and abs(fluency - point["fluency"]) < 0.02, (title, cell)
    base = default["unsteered"]
    assert f"(unsteered: {base['concept_score']:.2f}, {base['fluency']:.2f})" in " ".join(section.split())
    assert f"SAE feature #{rows['sae']['sae_feature']}" in section
    assert f"the layer-{default['judge']['layer']} probe" in " ".join(section.split())
    # the finding in words: DiffMean beats the SAE feature at every strength, per nat of fluency too
    for dm, sae in zip(rows["diffmean"]["points"], rows["sae"]["points"]):
        assert dm["concept_score"] - base["concept_score"] > 0 and dm["fluency"] < sae["fluency"]


def test_every_method_shares_the_prompts_and_the_unsteered_judge(default):
    n = len(default["prompts"])
    assert n == 16 and default["unsteered"]["strength"] == 0
    for m in default["methods"]:
        for p in m["points"]:
            assert len(p["generations"]) == len(p["concept_scores"]) == len(p["losses"]) == n
            assert p["concept_score"] == pytest.approx(sum(p["concept_scores"]) / n, abs=1e-4)
            assert p["fluency"] == pytest.approx(sum(p["losses"]) / n, abs=1e-4)
    assert [p["strength"] for p in default["methods"][0]["points"]] == [0.25, 0.5, 1.0]
    assert default["methods"][-1]["prefix_tokens"] == sorted(default["methods"][-1]["prefix_tokens"])


def tiny_model() -> GPT:
    from gptscope.model.config import GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, n_ctx=32, n_layer=2, n_head=2, d_model=16, d_mlp=32)).eval()


def test_a_steered_generation_is_the_plain_one_with_the_vector_added_at_every_position():
    """model/steering.generate (batched, KV cache, hook) against a loop of full forward passes with the same
    vector added by hand after block 0."""
    model = tiny_model()
    vector = torch.randn(16)
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8]]
    sampling = ms.Sampling(new_tokens=5, temperature=1.0, seed=3)
    got = ms.generate(model, prompts, sampling, (ms.steer_hook(0), vector))
    from gptscope.model.sampling import sample_next

    for i, p in enumerate(prompts):
        ids = list(p)
        with model.hooks([(ms.steer_hook(0), lambda x, _n: x + vector)]):
            for step in range(5):
                logits, _ = model(torch.tensor([ids]))
                ids.append(sample_next(logits[0, -1], 1.0, None, None, 3 + i, step).token)
        assert got[i] == ids[len(p) :]
    # without a vector: the model's own draws, and the loss of a continuation given its prompt
    plain = ms.generate(model, prompts, sampling)
    ids = torch.tensor([prompts[0] + plain[0]])
    with torch.no_grad():
        logits, _ = model(ids)
    want = torch.nn.functional.cross_entropy(logits[0, 2:-1], ids[0, 3:])
    assert ms.continuation_loss(model, prompts[:1], plain[:1])[0] == pytest.approx(float(want), abs=1e-5)


def test_the_directions_point_to_the_concept():
    from gptscope.model.probes import LayerProbe

    W = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    probe = LayerProbe(0, 1.0, 1.0, W, torch.zeros(3), torch.eye(3, 2))
    direction, dm = ms.concept_direction(probe, 2)
    assert torch.equal(direction, W[2] - W[:2].mean(0)) and torch.equal(dm, torch.eye(3, 2)[2])
    two = LayerProbe(0, 1.0, 1.0, W[:2], torch.zeros(2), torch.tensor([1.0, -1.0]))
    assert torch.equal(ms.concept_direction(two, 0)[1], torch.tensor([-1.0, 1.0]))
    assert torch.equal(ms.concept_direction(two, 0)[0], W[0] - W[1])
    means = torch.tensor([[0.0, 1.0], [0.0, 3.0], [5.0, 0.0]])
    assert ms.sae_concept_feature(means, torch.tensor([1, 1, 0]), 1) == (1, 2.0)


def test_the_job_reports_progress_and_cancels(client, monkeypatch):
    r = client.post("/api/v1/steering/jobs", json=SMALL)
    assert r.status_code == 202 and r.json()["total"] == (1 + 3 + 1 + 2) * 6
    done = finish(client, f"/api/v1/steering/jobs/{r.json()['id']}")
    assert done["status"] == "done" and done["done"] == done["total"], done["error"]
    assert [len(m["points"]) for m in done["result"]["methods"]] == [1, 1, 1, 1]
    assert len(done["result"]["unsteered"]["generations"]) == 3
    real = steering_jobs.STEERINGS.compute

    def after_cancel(service, plan, on_chunk, cancel):  # a job that cannot end before it is cancelled
        until(cancel, 10)
        return real(service, plan, on_chunk, cancel)

    monkeypatch.setattr(steering_jobs.STEERINGS, "compute", after_cancel)
    r = client.post("/api/v1/steering/jobs", json={**SMALL, "seed": 1})
    body = client.post(f"/api/v1/steering/jobs/{r.json()['id']}/cancel").json()
    assert body["status"] in ("cancelled", "running")
    assert finish(client, f"/api/v1/steering/jobs/{r.json()['id']}")["status"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"task": "form", "concept": "sonnet"}, "concept", "not a label"),
        ({"task": "form", "layer": 6}, "layer", "0..5"),
        ({"task": "form", "sae": "nope"}, "sae", "nope"),
        ({"task": "form", "prefix_examples": [16]}, "prefix_examples", "n_ctx 256"),
        ({"task": "form", "prompts": ["x" * 600]}, "prompts.0", "n_ctx 256"),
        (
            {
                "task": "form",
                "n_prompts": 32,
                "new_tokens": 100,
                "strengths": [1, 2, 3, 4, 5, 6, 7, 8],
                "prefix_examples": [1],
            },
            "strengths",
            "limit",
        ),
        ({}, "task", "either"),
        ({"task": "form", "strengths": [0]}, "strengths.0", "greater than 0"),
        ({"task": "form", "new_tokens": 129}, "new_tokens", "128"),
    ],
)
def test_bad_input_is_refused_naming_the_field(client, body, field, words):
    r = client.post("/api/v1/steering", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert ".".join(str(x) for x in detail["loc"][1:]) == field and words in detail["msg"], detail


def test_a_layer_without_an_sae_leaves_that_method_out_and_says_why(client):
    verse = [
        "Shall I compare thee\nTo a summer's day?\nThou art more lovely",
        "When I do count\nThe clock that tells\nThe time",
    ]
    prose = [
        "I have of late lost\nall my mirth, forgone\nall custom of exercises",
        "man delights not\nme: no, nor woman\nneither, though by your",
    ]
    examples = [{"text": t + f" {i}", "label": "verse"} for t in verse for i in range(5)]
    examples += [{"text": t + f" {i}", "label": "prose"} for t in prose for i in range(5)]
    body = {**SMALL, "task": None, "examples": examples, "concept": "prose", "layer": 1, "prompt_tokens": 3}
    r = client.post("/api/v1/steering", json=body)
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["task"] == "examples" and a["n_train"] + a["n_test"] == 20 and a["hook_name"] == "blocks.1.hook_resid_post"
    sae = next(m for m in a["methods"] if m["method"] == "sae")
    assert not sae["available"] and sae["points"] == [] and "no SAE at blocks.1.hook_resid_post" in sae["reason"]


def test_the_likelihood_judge_is_the_models_own_and_says_how_good_it_is(client):
    r = client.post("/api/v1/steering", json={**SMALL, "judge": "likelihood"})
    assert r.status_code == 200, r.text
    a = r.json()
    j = a["judge"]
    assert j["kind"] == "likelihood" and j["layer"] is None and len(j["prefix_tokens"]) == 2
    assert j["accuracy"] > 0.6  # on 20 held-out passages of each label, where always one label gets 0.5
    for m in a["methods"]:
        assert all(0 <= s <= 1 for p in m["points"] for s in p["concept_scores"])
    # the same draws as the probe judge's run: only the scores differ
    probe = client.post("/api/v1/steering", json=SMALL).json()
    assert probe["unsteered"]["generations"] == a["unsteered"]["generations"]
    assert probe["unsteered"]["losses"] == a["unsteered"]["losses"]
