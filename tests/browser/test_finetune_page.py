"""The /train page's fine-tuning section (GPT-1's second stage) in a real headless Chromium: pick the
built-in genre task, then the speaker task (each one's labels and counts as the API lists them),
start a small job on the speaker task from the form (finetune and probe, 16 and 64 examples, 8
steps, saved: its 134 test passages score each cell in a fraction of the time of the genre task's
900), watch the accuracy curve and the table fill with the API's numbers, serve the saved
classifier and read its prediction on the forward page (label probabilities summing to 1, the
winning label's logit decomposed) and export its panel as a file that draws with no network; a CSV
with a bad row is refused by row number on the page, a good one becomes a task."""

from __future__ import annotations

import json
import time

import pytest
from apihelp import api_json
from exporting import check_offline, live_exports, page_path
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SAVE_AS = "speaker-clf-browser"
TERMINAL = ("done", "cancelled", "failed")


def open_train(page, live_url, query=""):
    page.goto(f"{live_url}/train{query}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")


def wait_job(page, live_url, job_id, timeout=90):
    deadline = time.monotonic() + timeout  # the CPU may be shared
    while (body := api_json(page, live_url, "GET", f"/finetune/{job_id}"))["status"] not in TERMINAL:
        assert time.monotonic() < deadline, f"job {job_id} did not end: {body['current']}"
        time.sleep(0.3)
    return body


def test_finetune_from_the_page_then_serve_the_classifier(browser, page, live_url, screenshot, tmp_path):
    open_train(page, live_url)
    tasks = {t["name"]: t for t in api_json(page, live_url, "GET", "/finetune/tasks")["tasks"]}
    assert {"genre", "speaker"} <= set(tasks)
    page.select_option("#ft-task", "genre")
    genre = tasks["genre"]
    info = page.locator("#ft-task-info")
    expect(info).to_contain_text(genre["description"])
    for label in genre["labels"]:
        row = page.locator(f'#ft-counts tr[data-label="{label}"] td')
        assert row.nth(1).inner_text() == f"{genre['train_counts'][label]:,}"
        assert row.nth(2).inner_text() == f"{genre['test_counts'][label]:,}"
    for play in genre["test_plays"][:2]:
        expect(info).to_contain_text(play)
    assert "task=genre" in page.url
    # the job is Hamlet's speakers: 134 test passages to score each cell on, where genre has 900
    page.select_option("#ft-task", "speaker")
    speaker = tasks["speaker"]
    expect(info).to_contain_text(speaker["description"])
    for label in speaker["labels"]:
        row = page.locator(f'#ft-counts tr[data-label="{label}"] td')
        assert row.nth(1).inner_text() == f"{speaker['train_counts'][label]:,}"
        assert row.nth(2).inner_text() == f"{speaker['test_counts'][label]:,}"
    assert "task=speaker" in page.url

    for box in page.locator('input[name="ft-method"]').all():
        box.set_checked(box.get_attribute("value") in ("finetune", "probe"))
    page.fill("#ft-sizes", "16, 64")
    page.fill("#ft-steps", "8")
    page.fill("#ft-save-as", SAVE_AS)
    with page.expect_response(lambda r: r.url.endswith("/api/v1/finetune") and r.request.method == "POST") as resp:
        page.click("#ft-start")
    assert resp.value.status in (200, 202), resp.value.text()
    sent = json.loads(resp.value.request.post_data)
    assert sent["task"] == "speaker" and sent["methods"] == ["finetune", "probe"] and sent["sizes"] == [16, 64]
    assert sent["steps"] == 8 and sent["save_as"] == SAVE_AS
    job_id = resp.value.json()["id"]

    job = wait_job(page, live_url, job_id)
    assert job["status"] == "done", job
    panel = page.locator("#finetune-panel")
    expect(panel).to_have_attribute("data-status", "done", timeout=10_000)
    assert f"job={job_id}" in page.url
    expect(page.locator("#ft-curve")).to_have_attribute("data-points", "4")
    assert page.get_attribute("#ft-curve", "data-traces") == "2"
    # the curve: one line per method, x = examples trained on, y = the API's accuracies; chance dashed
    traces = page.evaluate(
        "() => document.getElementById('ft-curve').data.map((t) => ({name: t.name, x: t.x, y: t.y, dash: t.line.dash}))"
    )
    by_method = {
        m: sorted((c["n_train"], c["accuracy"]) for c in job["cells"] if c["method"] == m)
        for m in ("finetune", "probe")
    }
    assert [list(zip(t["x"], t["y"])) for t in traces[:2]] == [
        [tuple(p) for p in by_method["finetune"]],
        [tuple(p) for p in by_method["probe"]],
    ]
    assert traces[-1]["dash"] == "dash" and set(traces[-1]["y"]) == {job["chance"]}
    assert page.evaluate("() => document.getElementById('ft-curve').layout.xaxis.type") == "log"
    rows = page.locator("#ft-cells tbody tr")
    expect(rows).to_have_count(4)
    for i, cell in enumerate(job["cells"]):
        assert rows.nth(i).get_attribute("data-method") == cell["method"]
        assert float(rows.nth(i).get_attribute("data-accuracy")) == cell["accuracy"]
    expect(page.locator("#ft-progress")).to_have_attribute("value", "4")

    # serve the saved classifier, then read it on the forward page
    expect(page.locator("#ft-saved")).to_be_visible()
    checkpoint = page.get_attribute("#ft-saved", "data-checkpoint")
    assert checkpoint == f"models/{SAVE_AS}"
    try:
        page.click("#ft-serve")
        expect(page.locator("#ft-forward-link")).to_be_visible(timeout=30_000)
        health = api_json(page, live_url, "GET", "/health")
        cls = health["info"]["classifier"]
        assert cls["task"] == "speaker" and cls["labels"] == speaker["labels"]
        screenshot(page, "finetune-section")
        page.click("#ft-forward-link")
        page.wait_for_selector('#classifier-panel[data-ready="1"]', state="attached", timeout=30_000)
        prompt = page.input_value("#prompt")
        assert prompt.startswith(cls["special_tokens"]["start"]) and prompt.endswith(cls["special_tokens"]["extract"])
        assert page.get_attribute("#classifier-panel", "data-at-extract") == "true"
        probs = [
            float(p) for p in page.locator("#cl-logits tbody tr").evaluate_all("rs => rs.map((r) => r.dataset.prob)")
        ]
        assert len(probs) == len(speaker["labels"]) and abs(sum(probs) - 1) < 1e-4
        winner = page.locator("#cl-logits tr.winner")
        expect(winner).to_have_count(1)
        assert winner.get_attribute("data-label") == page.inner_text("#cl-predicted")
        assert float(winner.get_attribute("data-prob")) == max(probs)
        # the panel's numbers are the API's, for the same prompt
        res = api_json(page, live_url, "POST", "/forward", data={"text": prompt, "include": ["classifier"]})[
            "classifier"
        ]
        assert probs == res["probs"]
        page.locator("#cl-dc-plot").scroll_into_view_if_needed()
        expect(page.locator("#cl-dc-plot")).to_have_attribute("data-target", str(res["predicted"]))
        assert float(page.get_attribute("#cl-dc-logit", "data-value")) == res["decomposition"]["logit"]
        assert abs(float(page.get_attribute("#cl-dc-error", "data-value"))) < 1e-3
        page.locator("#cl-attn-plot").scroll_into_view_if_needed()
        n_layer, n_head = len(res["attention"]), len(res["attention"][0])
        expect(page.locator("#cl-attn-plot")).to_have_attribute("data-rows", str(n_layer))  # the heads' mean per layer
        page.select_option("#cl-head", "all")
        expect(page.locator("#cl-attn-plot")).to_have_attribute("data-rows", str(n_layer * n_head))
        page.select_option("#cl-head", "0")
        expect(page.locator("#cl-attn-plot")).to_have_attribute("data-rows", str(n_layer))
        screenshot(page, "finetune-classifier-panel")
        assert not page.console_errors, page.console_errors
        # the classifier panel (only a fine-tuned model has it) as a file: it draws offline, and its
        # hovers give the live page's numbers
        path = page_path(page)
        done, skipped = live_exports(page, live_url, path, tmp_path, panels={"classifier"})
        assert {fig for fig, *_ in done} == {"cl-probs-plot", "cl-attn-plot", "cl-dc-plot"}, skipped
        check_offline(browser, [(path, *e) for e in done])
        assert not page.console_errors, page.console_errors
    finally:
        api_json(page, live_url, "POST", "/model", data={"checkpoint": "builtin"})


def test_csv_upload_refuses_a_bad_row_and_adds_a_good_task(page, live_url):
    open_train(page, live_url)
    page.click("#ft-upload-box summary")
    bad = "text,label\nto be or not to be,tragedy\n,comedy\n"
    page.set_input_files("#ft-upload-file", {"name": "bad.csv", "mimeType": "text/csv", "buffer": bad.encode()})
    page.fill("#ft-upload-name", "bad-task")
    with page.expect_response(
        lambda r: r.url.endswith("/api/v1/finetune/tasks") and r.request.method == "POST"
    ) as resp:
        page.click("#ft-upload-btn")
    assert resp.value.status == 422
    msg = page.locator("#ft-upload-msg")
    expect(msg).to_have_class("note bad")
    expect(msg).to_contain_text("row 3")  # the bad row, by its line number

    lines = ["text,label"] + [
        f"a line about the {w} number {i},{'sea' if i % 2 else 'land'}" for i, w in enumerate(["ship", "field"] * 20)
    ]
    page.set_input_files(
        "#ft-upload-file", {"name": "good.csv", "mimeType": "text/csv", "buffer": "\n".join(lines).encode()}
    )
    page.fill("#ft-upload-name", "sea-land")
    page.click("#ft-upload-btn")
    expect(msg).to_have_class("note ok")
    expect(page.locator("#ft-task")).to_have_value("sea-land")
    task = next(t for t in api_json(page, live_url, "GET", "/finetune/tasks")["tasks"] if t["name"] == "sea-land")
    assert task["source"] == "csv" and sorted(task["labels"]) == ["land", "sea"]
    expect(page.locator("#ft-task-info")).to_contain_text("uploaded CSV")
    open_train(page, live_url, "?task=sea-land")  # the URL picks the task
    expect(page.locator("#ft-task")).to_have_value("sea-land")
