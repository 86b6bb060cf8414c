"""GPT-1's second stage: the tasks' splits, the classifier and its loss, the CSV loader, the jobs
API, serving a saved classifier, and the CLI."""

from __future__ import annotations

import json
import random
import time

import pytest
import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model import finetune as ft
from gptscope.model import tasks
from gptscope.server import cli

# ---- the built-in tasks' splits -------------------------------------------------------------


@pytest.mark.slow  # builds each task from all 37 plays (about 2 s each)
@pytest.mark.parametrize("name", ["genre", "speaker"])
def test_task_halves_share_no_line_and_training_has_no_held_out_play(name):
    task = tasks.builtin(name)
    held_out = {p.name for p in tasks.plays() if p.held_out}
    assert held_out == set(task.excluded_plays) and held_out  # the plays in the corpus's last 10%
    assert not {ex.play for ex in task.train} & held_out
    assert not set(task.train_plays) & held_out
    train_lines = {line for ex in task.train for line in ex.text.splitlines()}
    test_lines = {line for ex in task.test for line in ex.text.splitlines()}
    assert not train_lines & test_lines
    assert len(task.train) > 400 and len(task.test) > 100
    assert all(n > 0 for n in task.counts(task.train).values())


def test_held_out_plays_are_exactly_those_reaching_into_the_last_tenth():
    from gptscope.model import corpus

    full = corpus.shakespeare().text
    cut = len(full) - len(corpus.shakespeare().split()[1])
    for p in tasks.plays():
        end = full.index(p.text) + len(p.text)
        assert p.held_out == (end > cut), p.name


def test_genre_task_splits_by_whole_play():
    task = tasks.builtin("genre")
    assert set(task.test_plays) == set(tasks.GENRE_TEST_PLAYS)
    assert not set(task.train_plays) & set(task.test_plays)
    assert {ex.play for ex in task.test} == set(tasks.GENRE_TEST_PLAYS)
    assert task.counts(task.test) == {"comedy": 300, "history": 300, "tragedy": 300}
    assert task.chance == pytest.approx(1 / 3)


def test_passages_are_lines_of_one_speech():
    text = "ACT I\n\nHAMLET:\nline one of hamlet's speech here\nline two\n[Exit]\n\nHORATIO:\nHail to your lordship, my good and honest friend.\n"
    got = tasks.passages(text)
    assert got == [
        ("HAMLET", "line one of hamlet's speech here\nline two"),
        ("HORATIO", "Hail to your lordship, my good and honest friend."),
    ]


# ---- the CSV loader ----------------------------------------------------------------------------


def good_csv(n: int = 40) -> bytes:
    return ("text,label\n" + "".join(f"example number {i},{'ab'[i % 2]}\n" for i in range(n))).encode()


@pytest.mark.parametrize(
    "data,message",
    [
        (b"words,label\nx,a\n", "csv row 1: the header must be text,label"),
        (b"text,label\nhello,a\n,b\n", "csv row 3: text is empty"),
        (b"text,label\nhello,a\nbye,\n", "csv row 3: label is empty"),
        (b"text,label\nhello,a\nbye,b,extra\n", "csv row 3: 3 fields, the header has 2"),
        (b"text,label\nhello,a\nbye\xff,b\n", "csv row 3: not valid UTF-8"),
        (b"text,label\n" + b"x" * 2001 + b",a\n", "csv row 2: text is 2,001 characters; the limit is 2,000"),
        (b"text,label\nhello,a\nbye,a\n", "at least 2 different labels"),
        (b'text,label\n"unclosed,a\n', "csv row"),
    ],
)
def test_csv_loader_refuses_bad_rows_naming_the_row(data, message):
    with pytest.raises(tasks.TaskError, match=message.replace("(", r"\(")):
        tasks.from_csv(data, "mine")


def test_csv_loader_splits_by_hash_with_no_shared_text():
    task = tasks.from_csv(good_csv(200), "mine")
    assert task.labels == ["a", "b"] and len(task.train) + len(task.test) == 200
    assert 20 <= len(task.test) <= 60
    assert not {e.text for e in task.train} & {e.text for e in task.test}
    assert tasks.from_csv(good_csv(200), "mine").sha256 == task.sha256  # fixed: the same file, the same split
    pair = tasks.from_csv(
        b"text,label,text_b\n"
        + b"".join(b"a%d,x,b%d\n" % (i, i) for i in range(20))
        + b"".join(b"c%d,y,d%d\n" % (i, i) for i in range(20)),
        "pairs",
    )
    assert all(e.text_b for e in pair.train)


# ---- the classifier --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin():
    return ckpt.load(ckpt.Path(__file__).resolve().parents[1] / "model" / "builtin")


def test_special_tokens_frame_the_input_and_are_new_learned_rows(builtin):
    enc = ft.classifier_encoding(builtin.encoding(), builtin.model.cfg.vocab_size)
    specials = ft.special_ids(builtin.model.cfg.vocab_size)
    assert specials == {"start": 2048, "delimiter": 2049, "extract": 2050}
    ids = ft.format_ids(enc, specials, "To be, or not", "that is the question", n_ctx=128)
    assert ids[0] == 2048 and ids[-1] == 2050 and ids.count(2049) == 1
    assert enc.decode(ids) == "<|start|>To be, or not<|delim|>that is the question<|extract|>"
    long = ft.format_ids(enc, specials, "word " * 500, None, n_ctx=40, max_text=None)
    assert len(long) == 40 and long[-1] == 2050
    clf = ft.build(builtin.model, "finetune", 3, seed=0)
    V = builtin.model.cfg.vocab_size
    assert clf.gpt.wte.weight.shape[0] == V + 3
    assert torch.equal(clf.gpt.wte.weight[:V], builtin.model.wte.weight)  # pretrained rows kept
    assert clf.gpt.wte.weight.requires_grad
    scratch = ft.build(builtin.model, "scratch", 3, seed=0)
    assert not torch.equal(scratch.gpt.wte.weight[:V], builtin.model.wte.weight)
    probe = ft.build(builtin.model, "probe", 3, seed=0)
    assert [n for n, p in probe.named_parameters() if p.requires_grad] == ["head.weight", "head.bias"]


def test_lm_targets_are_the_text_tokens_only():
    specials = {"start": 10, "delimiter": 11, "extract": 12}
    _idx, last, _y, lm = ft.collate([[10, 3, 4, 5, 12], [10, 7, 12]], [0, 1], specials)
    assert last.tolist() == [4, 2]
    assert lm.tolist() == [[3, 4, 5, -1, -1], [7, -1, -1, -1, -1]]


def test_aux_loss_changes_the_gradient_exactly_as_its_weight_says(builtin):
    enc = ft.classifier_encoding(builtin.encoding(), builtin.model.cfg.vocab_size)
    clf = ft.build(builtin.model, "finetune", 3, seed=0).eval()  # no dropout: the same function each call
    rows = [ft.format_ids(enc, clf.specials, t, None, 128) for t in ("My lord, the king", "Good morrow", "Away!")]
    batch = ft.collate(rows, [0, 1, 2], clf.specials)

    def grads(lam: float) -> torch.Tensor:
        clf.zero_grad()
        l_cls, l_lm = clf.losses(*batch)
        (l_cls + lam * l_lm).backward()
        return torch.cat([p.grad.flatten() for p in clf.parameters() if p.grad is not None])

    g0, g05, g1 = grads(0.0), grads(0.5), grads(1.0)
    lm_part = g1 - g0
    assert lm_part.norm() > 1e-3  # the LM loss does reach the weights
    torch.testing.assert_close(g05, g0 + 0.5 * lm_part, rtol=1e-4, atol=1e-6)
    clf.zero_grad()
    l_cls, _ = clf.losses(batch[0], batch[1], batch[2], None)
    l_cls.backward()
    assert clf.head.weight.grad is not None


def synthetic_task(n: int = 160) -> tasks.Task:
    """Separable: the label is whether the passage mentions apples or stones."""
    rng = random.Random(0)
    fill = ["the", "a", "green", "old", "small", "we", "saw", "under", "bright", "tree"]
    exs = []
    for i in range(n):
        label = i % 2
        words = [*rng.sample(fill, 5), ["apples", "stones"][label]]
        exs.append(tasks.Example(f"{i} " + " ".join(words), label))
    cut = 3 * n // 4
    return tasks.Task("synthetic", "csv", "apples or stones", ["apples", "stones"], exs[:cut], exs[cut:])


@pytest.mark.slow  # fine-tunes the built-in model for 40 steps
def test_finetune_learns_a_tiny_separable_task(builtin):
    p = ft.prepare(builtin.model, "builtin", builtin.encoding(), synthetic_task())
    result, clf = ft.run_cell(p, "finetune", 0, lm_weight=0.5, seed=0, steps=40, keep_model=True)
    assert result["accuracy"] >= 0.95, result
    assert result["n_train"] == 120 and clf is not None


def test_subset_covers_every_label_and_is_seeded():
    enc = ft.Encoded([[i] for i in range(30)], [i % 3 for i in range(30)])
    a, b = ft.subset(enc, 3, 6, seed=1), ft.subset(enc, 3, 6, seed=1)
    assert a.ids == b.ids and sorted(a.labels) == [0, 0, 1, 1, 2, 2]
    assert ft.subset(enc, 3, 6, seed=2).ids != a.ids
    assert ft.subset(enc, 3, 0, seed=1) is enc and ft.subset(enc, 3, 99, seed=1) is enc


@pytest.mark.slow  # fine-tunes the built-in model
def test_cells_are_cached_and_a_saved_classifier_loads_back(builtin, tmp_path):
    p = ft.prepare(builtin.model, "builtin", builtin.encoding(), synthetic_task(40))
    first, clf = ft.run_cell(p, "finetune", 16, seed=3, steps=3, cache_dir=tmp_path / "cache", keep_model=True)
    again, none = ft.run_cell(p, "finetune", 16, seed=3, steps=3, cache_dir=tmp_path / "cache")
    assert again == {**first, "cached": True} and none is None
    other, _ = ft.run_cell(p, "probe", 16, seed=3, steps=3, cache_dir=tmp_path / "cache")
    assert not other["cached"]
    ft.save_classifier(tmp_path / "clf", clf, builtin.meta, p.task, first, command="test")
    back = ft.load_classifier(ckpt.load(tmp_path / "clf"))
    assert torch.equal(back.head.weight, clf.head.weight)
    x = torch.tensor([ft.format_ids(p.enc, clf.specials, "green apples", None, 128)])
    last = torch.tensor([x.size(1) - 1])
    torch.testing.assert_close(back(x, last)[0], clf.eval()(x, last)[0])
    assert ckpt.load(tmp_path / "clf").encoding().decode([2048, 2050]) == "<|start|><|extract|>"


def test_probe_cells_of_a_seed_share_the_test_features_and_score_as_a_full_forward_would(builtin):
    """A probe's GPT is frozen, so its test examples' h_l^m are computed by the first probe cell of a
    seed and reused by the next (a job's other sizes): the scores are those of a forward pass per batch."""
    p = ft.prepare(builtin.model, "builtin", builtin.encoding(), synthetic_task(40))
    first, clf = ft.run_cell(p, "probe", 8, seed=1, steps=3, keep_model=True)
    assert set(p.probe_test) == {1} and p.probe_test[1].shape == (len(p.test.labels), builtin.model.cfg.d_model)
    kept = p.probe_test[1]
    second, _ = ft.run_cell(p, "probe", 16, seed=1, steps=3)
    assert p.probe_test[1] is kept and second["n_train"] == 16  # reused, not computed again
    acc, loss = ft.evaluate(clf, p.test)  # the full forward, batch by batch
    assert first["accuracy"] == round(acc, 4) and first["test_loss"] == pytest.approx(round(loss, 4), abs=2e-4)
    ft.run_cell(p, "probe", 8, seed=2, steps=3)  # another seed draws other special-token rows
    assert set(p.probe_test) == {1, 2} and not torch.equal(p.probe_test[1], p.probe_test[2])
    ft.run_cell(p, "finetune", 8, seed=3, steps=1)  # a fine-tuned GPT changes: nothing is kept for it
    assert set(p.probe_test) == {1, 2}


# ---- the API ---------------------------------------------------------------------------------


def wait(client, job_id: str, timeout: float = 240) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout:
        job = client.get(f"/api/v1/finetune/{job_id}").json()
        if job["status"] != "running":
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still running")


def test_tasks_endpoint_and_csv_upload(client):
    r = client.get("/api/v1/finetune/tasks")
    assert r.status_code == 200
    by = {t["name"]: t for t in r.json()["tasks"]}
    assert by["genre"]["labels"] == ["comedy", "history", "tragedy"] and by["genre"]["n_test"] == 900
    assert set(by["genre"]["excluded_plays"]) == {"macbeth", "othello", "romeo-and-juliet", "timon-of-athens"}
    bad = client.post(
        "/api/v1/finetune/tasks", files={"file": ("t.csv", b"text,label\nok,a\n,b\n")}, data={"name": "mine"}
    )
    assert bad.status_code == 422 and "csv row 3: text is empty" in bad.json()["detail"][0]["msg"]
    ok = client.post("/api/v1/finetune/tasks", files={"file": ("t.csv", good_csv())}, data={"name": "mine"})
    assert ok.status_code == 201 and ok.json()["labels"] == ["a", "b"]
    assert "mine" in {t["name"] for t in client.get("/api/v1/finetune/tasks").json()["tasks"]}
    builtin_name = client.post("/api/v1/finetune/tasks", files={"file": ("t.csv", good_csv())}, data={"name": "genre"})
    assert builtin_name.status_code == 422


@pytest.mark.parametrize(
    "body,field",
    [
        ({"task": "nope"}, "task"),
        ({"task": "genre", "methods": ["probe"], "save_as": "x"}, "save_as"),
        ({"task": "genre", "sizes": [16, 16]}, "sizes"),
        ({"task": "genre", "methods": ["probe", "probe"]}, "methods"),
        ({"task": "genre", "sizes": [-1]}, "sizes"),
        ({"task": "genre", "checkpoint": "no-such-run"}, "checkpoint"),
        ({"task": "genre", "lm_weight": 11}, "lm_weight"),
    ],
)
def test_finetune_refuses_bad_requests_naming_the_field(client, body, field):
    r = client.post("/api/v1/finetune", json=body)
    assert r.status_code in (404, 422), r.text
    detail = r.json()["detail"]
    if r.status_code == 422:  # the field the detail's loc names, not merely a word in its message
        assert detail[0]["loc"][:2] == ["body", field], detail
    else:
        assert field in detail


@pytest.mark.slow  # fine-tunes the built-in model in four cells, twice
def test_a_job_runs_saves_and_its_classifier_is_served_and_explained(client):
    body = {"task": "mine", "methods": ["finetune", "probe"], "sizes": [8, 0], "steps": 4, "save_as": "mine-clf"}
    client.post("/api/v1/finetune/tasks", files={"file": ("t.csv", good_csv())}, data={"name": "mine"})
    r = client.post("/api/v1/finetune", json=body)
    assert r.status_code == 202, r.text
    job = wait(client, r.json()["id"])
    assert job["status"] == "done", job
    assert [(c["method"], c["size"]) for c in job["cells"]] == [
        ("finetune", 8),
        ("finetune", 0),
        ("probe", 8),
        ("probe", 0),
    ]
    assert all(0 <= c["accuracy"] <= 1 for c in job["cells"]) and job["saved_as"] == "models/mine-clf"
    assert job["cells"][0]["n_train"] == 8 and job["cells"][1]["n_train"] > 8
    again = wait(client, client.post("/api/v1/finetune", json={**body, "save_as": None}).json()["id"])
    assert [c["cached"] for c in again["cells"]] == [True] * 4
    assert [c["accuracy"] for c in again["cells"]] == [c["accuracy"] for c in job["cells"]]

    assert client.post("/api/v1/classify", json={"text": "hi"}).status_code == 422  # a language model is served
    served = client.post("/api/v1/model", json={"checkpoint": "models/mine-clf"})
    try:
        assert served.status_code == 200, served.text
        info = served.json()["info"]["classifier"]
        assert info["labels"] == ["a", "b"] and info["special_tokens"]["extract"] == "<|extract|>"
        res = client.post("/api/v1/classify", json={"text": "example number 7"}).json()
        assert res["text"] == "<|start|>example number 7<|extract|>" and res["tokens"][0]["text"] == "<|start|>"
        block = res["result"]
        assert sum(block["probs"]) == pytest.approx(1, abs=1e-4) and block["at_extract"]
        assert block["predicted"] == max(range(2), key=lambda i: block["logits"][i])
        dec = block["decomposition"]
        assert dec["target_text"] == info["labels"][block["predicted"]]
        assert dec["logit"] == pytest.approx(block["logits"][block["predicted"]], abs=1e-4)
        assert abs(dec["residual_error"]) < 1e-3 and any(c["name"] == "output bias" for c in dec["contributions"])
        n_layer, n_head = served.json()["info"]["n_layer"], served.json()["info"]["n_head"]
        assert len(block["attention"]) == n_layer and all(len(layer) == n_head for layer in block["attention"])
        assert all(abs(sum(row) - 1) < 1e-3 for layer in block["attention"] for row in layer)
        mean0 = [sum(h[k] for h in block["attention"][0]) / n_head for k in range(len(res["tokens"]))]
        assert block["attention_mean"][0] == pytest.approx(mean0, abs=2e-4)
        assert info["example"].startswith("<|start|>") and info["example"].endswith("<|extract|>")
        html = client.get("/").text  # the forward page opens on that input, in the format the classifier reads
        assert "&lt;|start|&gt;" in html and 'id="classifier-panel"' in html
        trace = client.post("/api/v1/forward", json={"text": res["text"], "include": ["classifier"]}).json()
        assert trace["classifier"]["probs"] == block["probs"]  # the page and a tool see the same numbers
    finally:
        client.post("/api/v1/model", json={"checkpoint": "builtin"})
    lm = client.post("/api/v1/forward", json={"text": "hi", "include": ["classifier"]})
    assert lm.status_code == 200 and lm.json()["classifier"] is None  # as rope and moe: only where it applies


def test_cancel_and_unknown_job(client):
    assert client.get("/api/v1/finetune/0123456789ab").status_code == 404
    r = client.post("/api/v1/finetune", json={"task": "genre", "methods": ["scratch"], "sizes": [16], "steps": 5000})
    assert r.status_code == 202
    busy = client.post("/api/v1/finetune", json={"task": "genre", "methods": ["probe"], "sizes": [16]})
    assert busy.status_code == 409
    job = client.post(f"/api/v1/finetune/{r.json()['id']}/cancel").json()
    assert job["status"] == "cancelled" and job["cells"] == []


@pytest.mark.slow  # fine-tunes the built-in model in four cells
def test_cli_finetune_prints_progress_and_one_json_line(tmp_path, capsys):
    csv = tmp_path / "apples.csv"
    csv.write_bytes(good_csv(60))
    rc = cli.main(
        [
            "finetune",
            "--csv",
            str(csv),
            "--methods",
            "finetune,scratch",
            "--sizes",
            "8,all",
            "--steps",
            "3",
            "--data-dir",
            str(tmp_path),
            "--save-as",
            "apples",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert [c["method"] for c in result["cells"]] == ["finetune", "finetune", "scratch", "scratch"]
    assert result["saved_as"] == "models/apples" and (tmp_path / "models" / "apples" / "checkpoint.json").is_file()
    assert "accuracy" in err and "chance" in err
    assert cli.main(["finetune", "--task", "nope", "--data-dir", str(tmp_path)]) == 2
