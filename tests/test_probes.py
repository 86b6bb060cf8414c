"""Linear probes (issue #66) through the API, on the built-in model: a shipped task's probe beats the
majority baseline and the random-model control; shuffled labels fall back to the majority; bad input is
refused naming the field; the same request gives the same numbers."""

from __future__ import annotations

import random

import pytest

from gptscope.model import tasks
from gptscope.model.probes import MAX_EXAMPLES

URL = "/api/v1/probes"


def _genre_examples(n: int, shuffle: bool) -> list[dict]:
    task = tasks.builtin("genre")
    rng = random.Random(0)
    picked = rng.sample(task.train, n)
    labels = [task.labels[e.label] for e in picked]
    if shuffle:
        rng.shuffle(labels)
    return [{"text": e.text, "label": label} for e, label in zip(picked, labels)]


def test_genre_probe_beats_the_majority_and_the_random_model(client):
    r = client.post(URL, json={"task": "genre"})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["labels"] == ["comedy", "history", "tragedy"] and a["stage"] == "resid_post" and a["pool"] == "mean"
    assert len(a["layers"]) == 6 and [p["layer"] for p in a["layers"]] == list(range(6))
    assert a["n_train"] == sum(a["train_counts"].values()) and a["n_test"] == sum(a["test_counts"].values())
    best = next(p for p in a["layers"] if p["layer"] == a["best_layer"])
    assert best["accuracy"] == max(p["accuracy"] for p in a["layers"])
    # measured: best 0.585 (layer 5), majority 0.31, control at that layer 0.41
    assert best["accuracy"] > a["majority_baseline"] + 0.15
    assert best["accuracy"] > best["control_accuracy"] + 0.1
    assert all(p["directions"] is None for p in a["layers"])


def test_shuffled_labels_give_about_the_majority(client):
    r = client.post(URL, json={"examples": _genre_examples(300, shuffle=True)})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["n_train"] + a["n_test"] == 300
    assert max(p["accuracy"] for p in a["layers"]) < a["majority_baseline"] + 0.1


def test_same_request_same_numbers_and_directions(client):
    body = {"examples": _genre_examples(40, shuffle=False), "include_directions": True, "seed": 3}
    body["examples"] = [e for e in body["examples"] if e["label"] != "history"]  # two labels: one direction
    a, b = client.post(URL, json=body).json(), client.post(URL, json=body).json()
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    assert len(a["labels"]) == 2
    d = a["layers"][0]["directions"]
    assert len(d["probe"]) == 1 and len(d["probe"][0]) == 192 and len(d["diffmean"]) == 1
    other = client.post(URL, json={**body, "seed": 4}).json()
    assert [p["accuracy"] for p in other["layers"]] == [p["accuracy"] for p in a["layers"]]  # the seed is the control's


def _refused(client, body: dict, field: str) -> str:
    r = client.post(URL, json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(field in d["loc"] for d in detail), detail
    return str(detail)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"examples": []}, "examples"),
        ({"examples": [{"text": "To be", "label": "a"}, {"text": "or not", "label": "a"}]}, "examples"),
        ({"examples": [{"text": f"line {i}", "label": str(i % 2)} for i in range(MAX_EXAMPLES + 1)]}, "examples"),
        ({"task": "weather"}, "task"),
        ({}, "task"),
        ({"task": "genre", "examples": [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]}, "examples"),
        ({"examples": [{"text": "", "label": "x"}, {"text": "b", "label": "y"}]}, "text"),
        ({"task": "genre", "stage": "resid_mid"}, "stage"),
    ],
)
def test_bad_input_is_refused_naming_the_field(client, body, field):
    _refused(client, body, field)


def test_one_label_says_why(client):
    body = {"examples": [{"text": "To be", "label": "a"}, {"text": "or not", "label": "a"}]}
    assert "at least 2 labels" in _refused(client, body, "examples")


def test_a_probe_over_the_memory_budget_is_refused_naming_the_field(client):
    from gptscope.server import memory

    total = memory.BUDGET.total
    memory.BUDGET.configure(2**20)  # 1 MiB: less than the random model's weights
    try:
        body = {"examples": [{"text": "To be", "label": "a"}, {"text": "or not", "label": "b"}]}
        assert "memory" in _refused(client, body, "examples")
    finally:
        memory.BUDGET.configure(total)
