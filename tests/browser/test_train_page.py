"""The training page (/train) in a real headless Chromium: start a short run and watch its curves
grow, get the 409 for a second start, cancel a long run and serve its step-0 snapshot, replay
snapshots with the slider (and open one on /compare against the final model), serve a finished
checkpoint and switch back to the built-in model, start a llama-style run with an architecture
override (and get an impossible one refused), and run experiments, each ending in links to /compare
its runs. Every number the page shows is checked against the API."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# What panel 1 sends for the short run below: the form's defaults (from /openapi.json) with 150 steps
# and a 300-token vocabulary (few BPE merges to learn, so it starts sooner). The `short_run` fixture
# sends the same request, so once the page has trained it the API answers from that finished run
# (cached) instead of training again.
SHORT = {
    "corpus": "shakespeare",
    "preset": "tiny",
    "seed": 1337,
    "max_lr": 0.003,
    "warmup_steps": 30,
    "schedule": "cosine",
    "optimizer": "adamw",
    "muon_lr": 0.02,
    "vocab_size": 300,
    "batch_size": 16,
    "repeats": 0,
    "snapshots": [0, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.5, 0.75, 1],  # the API's default
    "max_steps": 150,
}
TERMINAL = ("done", "cancelled", "failed")


def square(rows: list[list]) -> list[list]:
    """A causal model's attention rows from the API (row q stops at key q) as the T x T map the
    page draws: the masked cells are empty (null)."""
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def api(page, live_url, method, path, **kw):
    resp = page.request.fetch(f"{live_url}/api/v1{path}", method=method, **kw)
    assert resp.status < 300, resp.text()
    return resp.json()


def wait_run(page, live_url, run_id, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = api(page, live_url, "GET", f"/training/{run_id}")
        if body["status"] in TERMINAL:
            return body
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} did not end within {timeout} s")


def open_page(page, live_url):
    resp = page.goto(f"{live_url}/train")
    assert resp.headers["link"] == '</api/v1/checkpoints>; rel="alternate"; type="application/json"'
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    assert page.get_attribute('nav a[href="/train"]', "aria-current") == "page"


def set_form(page, steps):
    """The form starts from the CPU recipe (preset cpu, Muon); a short test run takes the tiny
    preset with AdamW instead."""
    assert page.input_value("#preset") == "cpu" and page.input_value("#optimizer") == "muon"
    assert page.is_visible("#muon-lr")
    page.select_option("#preset", SHORT["preset"])
    page.select_option("#optimizer", SHORT["optimizer"])
    assert not page.is_visible("#muon-lr")  # Muon's rate is shown only when Muon is chosen
    page.fill("#max-lr", str(SHORT["max_lr"]))
    page.fill("#max-steps", str(steps))
    page.click("#more-box summary")  # "more"
    page.fill("#vocab-size", str(SHORT["vocab_size"]))
    page.fill("#batch-size", str(SHORT["batch_size"]))


def start(page):
    with page.expect_response(lambda r: r.url.endswith("/api/v1/training") and r.request.method == "POST") as resp:
        page.click("#start-btn")
    return resp.value


def status_of(page):
    return page.get_attribute("#run-status", "data-status")


def loss_points(page):
    return int(page.get_attribute("#loss-plot", "data-points") or 0)


def unexpected_errors(page, allowed=()):
    """Console errors other than the failed-request lines Chromium logs for answers we provoked."""
    return [e for e in page.console_errors if not any(f"status of {s}" in e for s in allowed)]


def compare_pairs(root) -> list[tuple[str, str]]:
    """The (a, b) checkpoint pairs of the /compare links under `root`, read from their href."""
    out = []
    for href in root.locator("a.exp-compare-link").evaluate_all("links => links.map(l => l.getAttribute('href'))"):
        parts = urlsplit(href)
        q = parse_qs(parts.query)
        assert parts.path == "/compare" and set(q) == {"a", "b"}, href
        out.append((q["a"][0], q["b"][0]))
    return out


@pytest.fixture(scope="module")
def short_run(browser, live_url):
    """The finished short run: the one the first test trained through the page, else trained now."""
    ctx = browser.new_context()
    try:
        resp = ctx.request.post(f"{live_url}/api/v1/training", data=SHORT)
        if resp.status == 409:  # another test's run is still going
            wait_run(ctx, live_url, resp.json()["running_id"])
            resp = ctx.request.post(f"{live_url}/api/v1/training", data=SHORT)
        assert resp.status in (200, 202), resp.text()
        body = wait_run(ctx, live_url, resp.json()["id"])
        assert body["status"] == "done", body
        return api(ctx, live_url, "GET", f"/training/{body['id']}")
    finally:
        ctx.close()


@pytest.fixture(autouse=True)
def no_run_left_going(browser, live_url):
    """A test that ends (or fails) with a run still training cancels it, so the next test's start
    is not refused with 409 because of it."""
    yield
    ctx = browser.new_context()
    try:
        for run in api(ctx, live_url, "GET", "/training"):
            if run["status"] not in TERMINAL:
                ctx.request.post(f"{live_url}/api/v1/training/{run['id']}/cancel")
                wait_run(ctx, live_url, run["id"], timeout=30)
    finally:
        ctx.close()


@pytest.fixture
def builtin_after(browser, live_url):
    """Whatever a test serves, the other browser tests get the built-in model back."""
    yield
    ctx = browser.new_context()
    ctx.request.post(f"{live_url}/api/v1/model", data={"checkpoint": "builtin"})
    ctx.close()


def test_a_short_run_draws_its_curves_while_it_trains(page, live_url, screenshot):
    open_page(page, live_url)
    assert page.is_visible("#progress-empty")  # nothing trained yet in this data folder
    # the cooldown share is asked only for warmup-stable-decay (its default the API's)
    assert page.input_value("#schedule") == "cosine" and page.is_hidden("#cooldown-label")
    page.select_option("#schedule", "wsd")
    assert page.is_visible("#cooldown-label") and page.input_value("#cooldown") == "0.4"
    page.select_option("#schedule", "cosine")
    set_form(page, SHORT["max_steps"])
    resp = start(page)
    assert resp.request.post_data_json == SHORT
    assert resp.status == 202, resp.text()
    run_id = resp.json()["id"]
    page.wait_for_function("(id) => document.getElementById('run-desc').textContent.includes(id)", arg=run_id)

    # the loss curve grows while the run is going (polled about once a second)
    page.wait_for_function("+(document.getElementById('loss-plot').dataset.points || 0) > 0", timeout=60_000)
    first = loss_points(page)
    # a second start while it runs: the 409's message names the running run
    second = start(page)
    if second.status == 409:
        # the response reaches the test before the page's handler has written the message
        page.wait_for_function("(id) => document.getElementById('start-msg').textContent.includes(id)", arg=run_id)
        msg = page.inner_text("#start-msg")
        assert run_id in msg and "already going" in msg
        assert page.locator("#follow-running").inner_text() == f"Show run {run_id}"
    else:  # a fast machine may have finished already: the identical request is then answered from it
        assert second.status == 200 and second.json()["cached"]
    page.wait_for_function("(n) => +document.getElementById('loss-plot').dataset.points > n", arg=first, timeout=30_000)
    assert loss_points(page) > first
    page.wait_for_function("document.getElementById('run-status').dataset.status === 'done'", timeout=60_000)

    body = api(page, live_url, "GET", f"/training/{run_id}")
    page.wait_for_function(
        "(n) => +document.getElementById('loss-plot').dataset.points === n", arg=len(body["history"])
    )
    traces = page.evaluate("""() => Object.fromEntries(['loss-plot', 'lr-plot', 'grad-plot'].map(id =>
        [id, document.getElementById(id).data.map(t => ({name: t.name, x: t.x, y: t.y}))]))""")
    loss = {t["name"]: t for t in traces["loss-plot"]}
    assert loss["train loss"]["y"] == [h["loss"] for h in body["history"]]
    assert loss["validation loss"]["x"] == [e["step"] for e in body["evals"]]
    assert loss["validation loss"]["y"] == [e["val_loss"] for e in body["evals"]]
    uniform = next(t for n, t in loss.items() if n.startswith("uniform guess"))
    assert uniform["y"] == [body["uniform_loss"]] * 2
    assert traces["lr-plot"][0]["y"] == [h["lr"] for h in body["history"]]
    grad = {t["name"]: t for t in traces["grad-plot"]}
    assert grad["whole model"]["y"] == [h["grad_norm"] for h in body["history"]]
    assert grad["block 1"]["y"] == [h["layer_grad_norms"][1] for h in body["history"]]
    stats = page.inner_text("#run-stats")
    assert f"step {SHORT['max_steps']} / {SHORT['max_steps']}" in stats and "tokens/s" in stats
    # what the run computed in, and why (model/precision.py's choice: fp32 where bf16 is emulated)
    assert body["precision"].split(" ")[0] in ("bf16", "fp32") and f"computing in {body['precision']}" in stats
    assert page.get_attribute("#run-progress", "value") == str(SHORT["max_steps"])
    assert page.is_disabled("#cancel-btn")
    # the finished run is listed as a checkpoint to serve
    page.wait_for_selector(f'#ckpt-table button[data-checkpoint="{run_id}"]')
    screenshot(page, "train")
    assert unexpected_errors(page, allowed=("409",)) == []


def test_a_file_that_is_not_utf8_gets_the_apis_message(page, live_url, tmp_path, screenshot):
    open_page(page, live_url)
    page.click("#upload-box summary")
    bad = tmp_path / "photo.txt"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not text at all \x00\x81")
    page.set_input_files("#upload-file", str(bad))
    assert page.input_value("#upload-name") == "photo"
    with page.expect_response(lambda r: r.url.endswith("/api/v1/corpora") and r.request.method == "POST") as resp:
        page.click("#upload-btn")
    assert resp.value.status == 422
    page.wait_for_function("document.getElementById('upload-msg').textContent.includes('UTF-8')")
    msg = page.inner_text("#upload-msg")
    assert resp.value.json()["detail"][0]["msg"] in msg and "UTF-8" in msg
    screenshot(page, "train-upload")
    good = tmp_path / "verse.txt"
    good.write_text("Shall I compare thee to a summer's day?\n" * 400, encoding="utf-8")
    page.fill("#upload-name", "")
    page.set_input_files("#upload-file", str(good))
    with page.expect_response(lambda r: r.url.endswith("/api/v1/corpora") and r.request.method == "POST") as resp:
        page.click("#upload-btn")
    assert resp.value.status == 201
    page.wait_for_function("document.getElementById('corpus').value === 'verse'")
    assert "uploaded" in page.locator("#corpus option[value=verse]").inner_text()
    assert unexpected_errors(page, allowed=("422",)) == []


def test_cancel_keeps_the_step0_snapshot_servable(page, live_url, short_run, screenshot, builtin_after):
    open_page(page, live_url)
    set_form(page, 20_000)
    resp = start(page)
    assert resp.status == 202, resp.text()
    run_id = resp.json()["id"]
    page.wait_for_function(
        "+document.getElementById('run-stats').dataset.step > 0 && "
        "document.getElementById('run-status').dataset.status === 'running'",
        timeout=60_000,
    )
    assert page.is_enabled("#cancel-btn")
    page.click("#cancel-btn")
    page.wait_for_function("document.getElementById('run-status').dataset.status === 'cancelled'", timeout=40_000)
    # the message follows the cancel's own answer, which may come after the status the page polls
    page.wait_for_function("document.getElementById('start-msg').textContent.includes('cancelled at step')")
    body = api(page, live_url, "GET", f"/training/{run_id}")
    assert body["status"] == "cancelled" and body["snapshots"][0] == 0 and body["checkpoint"] is None

    # panel 3 replays what was saved; panel 5 lists the snapshot (no final weights) and serves it
    page.wait_for_function("(id) => document.getElementById('replay-panel').dataset.run === id", arg=run_id)
    assert page.get_attribute("#replay-panel", "data-step") == "0"
    assert not page.is_visible("#replay-compare")  # a cancelled run has no final model to compare with
    row = page.locator(f'#ckpt-table tr[data-run="{run_id}"]')
    expect(row).to_contain_text("no final checkpoint")
    row.locator("select").select_option(f"{run_id}/step-000000")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/model")) as sw:
        row.locator("button.serve").click()
    assert sw.value.ok
    page.wait_for_function(
        "(n) => document.getElementById('ckpt-table').dataset.loaded === n", arg=f"{run_id}/step-000000"
    )
    health = api(page, live_url, "GET", "/health")
    assert health["info"]["train_steps"] == 0 and health["model"] in page.inner_text(".model-badge")
    screenshot(page, "train-cancelled")
    page.click('#ckpt-table button[data-checkpoint="builtin"]')
    page.wait_for_function("document.getElementById('ckpt-table').dataset.loaded === 'builtin'")
    assert unexpected_errors(page) == []


def test_the_slider_replays_each_snapshot(page, live_url, short_run, screenshot):
    run_id, steps = short_run["id"], short_run["snapshots"]
    assert steps[0] == 0 and steps[-1] == SHORT["max_steps"] and len(steps) == len(SHORT["snapshots"])
    open_page(page, live_url)
    page.select_option("#run-select", run_id)
    page.wait_for_function(
        "(id) => document.getElementById('replay-panel').dataset.run === id "
        "&& document.getElementById('replay-panel').dataset.step === '0'",
        arg=run_id,
    )
    text = page.input_value("#replay-text")

    def frame():
        return page.evaluate("""() => ({
            step: +document.getElementById('replay-panel').dataset.step,
            sample: document.querySelector('#replay-sample .gen-part').textContent,
            probs: document.getElementById('replay-next').data[0].x,
            attn: document.getElementById('replay-attn').data[0].z,
            title: document.getElementById('replay-attn').layout.title.text })""")

    def slide(i):
        page.eval_on_selector("#replay-step", "(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", i)
        page.wait_for_function("(s) => +document.getElementById('replay-panel').dataset.step === s", arg=steps[i])
        return frame()

    f0 = frame()
    last = slide(len(steps) - 1)
    api_last = api(page, live_url, "GET", f"/training/{run_id}/replay", params={"step": steps[-1], "text": text})
    assert last["sample"] == api_last["sample"]
    assert last["probs"] == [c["prob"] for c in api_last["forward"]["next_token"][:10]][::-1]
    assert last["attn"] == square(api_last["forward"]["attention"]["pattern"][0][0])
    assert last["sample"] != f0["sample"] and last["probs"] != f0["probs"] and last["attn"] != f0["attn"]
    assert max(last["probs"]) > max(f0["probs"])  # the trained model is surer of its next token
    assert page.inner_text("#replay-step-label") == f"step {steps[-1]} of {SHORT['max_steps']}"

    # sliding back is answered from the page's cache: no new request
    back = slide(0)
    assert back == f0
    mid = slide(len(steps) // 2)
    assert mid["step"] == steps[len(steps) // 2]
    for s in (steps[0], steps[-1], mid["step"]):  # each frame was fetched once (the page also prefetches the others)
        assert len([u for u in page.requests if f"/{run_id}/replay?step={s}&" in u]) == 1

    page.select_option("#replay-layer", "1")
    page.select_option("#replay-head", "2")
    page.wait_for_function("document.getElementById('replay-attn').layout.title.text.startsWith('layer 1, head 2')")
    frame_api = api(page, live_url, "GET", f"/training/{run_id}/replay", params={"step": mid["step"], "text": text})
    assert frame()["attn"] == square(frame_api["forward"]["attention"]["pattern"][1][2])
    screenshot(page, "train-replay")
    assert unexpected_errors(page) == []


def test_serve_a_finished_run_then_the_builtin_model(page, live_url, short_run, builtin_after):
    run_id = short_run["id"]
    builtin_name = api(page, live_url, "GET", "/health")["model"]
    open_page(page, live_url)
    page.click(f'#ckpt-table button[data-checkpoint="{run_id}"]')
    page.wait_for_function("(id) => document.getElementById('ckpt-table').dataset.loaded === id", arg=run_id)
    health = api(page, live_url, "GET", "/health")
    assert health["model"] == f"run-{run_id}" and health["info"]["vocab_size"] <= SHORT["vocab_size"]
    assert health["model"] in page.inner_text(".model-badge")
    assert page.locator(f'#ckpt-table button[data-checkpoint="{run_id}"]').inner_text() == "✓ serving"
    # the forward-pass page now looks inside the trained run
    page.click("#ckpt-msg a")
    page.wait_for_url(f"{live_url}/")
    assert f"run-{run_id}" in page.inner_text(".model-badge")
    open_page(page, live_url)
    page.click('#ckpt-table button[data-checkpoint="builtin"]')
    page.wait_for_function("document.getElementById('ckpt-table').dataset.loaded === 'builtin'")
    assert api(page, live_url, "GET", "/health")["model"] == builtin_name
    assert builtin_name in page.inner_text(".model-badge")


def fast_causal_mask(experiments: list[dict]) -> dict:
    """The real causal-mask experiment (its labels, question and overrides are the API's) with each
    variant's 600 steps cut to 120 on the short run's small vocabulary, so the page trains it in a
    test within seconds rather than a minute or more."""
    exp = json.loads(json.dumps(next(e for e in experiments if e["name"] == "causal-mask")))
    for v in exp["variants"]:
        assert v["request"]["max_steps"] == 600
        v["request"].update(vocab_size=SHORT["vocab_size"], batch_size=8, max_steps=120)
    return exp


def test_the_causal_mask_experiment_compares_its_variants(page, live_url, screenshot):
    exp = fast_causal_mask(api(page, live_url, "GET", "/experiments"))
    page.route(
        "**/api/v1/experiments",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps([exp])),
    )
    open_page(page, live_url)
    card = page.locator("#exp-causal-mask")
    assert exp["question"] in card.inner_text()
    card.locator("button.exp-run").click()
    page.wait_for_function(
        "['done', 'failed'].includes(document.getElementById('exp-causal-mask').dataset.state)", timeout=120_000
    )
    assert card.get_attribute("data-state") == "done", card.locator(".exp-msg").inner_text()
    assert card.locator(".look-for").inner_text().endswith(exp["what_to_look_for"])
    listed = {r["id"]: r for r in api(page, live_url, "GET", "/training")}
    ids = [
        next(i for i, r in listed.items() if r["request"] == v["request"] and r["status"] == "done")
        for v in exp["variants"]
    ]
    traces = page.evaluate(
        "() => document.querySelector('#exp-causal-mask .exp-loss').data.map(t => ({name: t.name, y: t.y}))"
    )
    for v, run_id in zip(exp["variants"], ids):
        body = api(page, live_url, "GET", f"/training/{run_id}")
        train = next(t for t in traces if t["name"] == f"{v['label']} · train")
        assert train["y"] == [h["loss"] for h in body["history"]]
    # each variant's steps and final validation loss, and one link to /compare the two runs
    rows = card.locator(".exp-summary tbody tr")
    checkpoints = {c["name"]: c for c in api(page, live_url, "GET", "/checkpoints")}
    for i, run_id in enumerate(ids):
        assert rows.nth(i).get_attribute("data-run") == run_id
        assert rows.nth(i).get_attribute("data-steps") == str(exp["variants"][i]["request"]["max_steps"])
        assert f"{checkpoints[run_id]['val_loss']:.4f}" in rows.nth(i).inner_text()
    assert compare_pairs(card) == [(ids[0], ids[1])]
    samples = card.locator(".sample-grid figure")
    assert samples.count() == 2
    for i, run_id in enumerate(ids):
        final = max(api(page, live_url, "GET", f"/training/{run_id}")["snapshots"])
        frame = api(page, live_url, "GET", f"/training/{run_id}/replay", params={"step": final})
        assert frame["sample"] in samples.nth(i).inner_text()
    screenshot(page, "train-experiment")
    # the drawn experiment is in the URL; opened again, the page redraws it from those finished runs
    # and trains nothing (no POST /api/v1/training)
    assert parse_qs(urlsplit(page.url).query)["exp"] == ["causal-mask"]
    posts = []
    # (POST /api/v1/training-plan only counts the form's snapshots: it trains nothing)
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" and "/training-plan" not in r.url else None)
    page.reload()
    page.wait_for_function("document.getElementById('exp-causal-mask')?.dataset.state === 'done'", timeout=30_000)
    assert [r.get_attribute("data-run") for r in rows.all()] == ids and posts == []
    assert compare_pairs(card) == [(ids[0], ids[1])] and samples.count() == 2
    assert unexpected_errors(page) == []


def test_the_snapshot_compare_link_follows_the_slider(page, live_url, short_run, screenshot):
    run_id, steps = short_run["id"], short_run["snapshots"]
    assert short_run["status"] == "done" and short_run["checkpoint"] == run_id
    open_page(page, live_url)
    page.select_option("#run-select", run_id)
    page.wait_for_function("(id) => document.getElementById('replay-panel').dataset.run === id", arg=run_id)
    link = page.locator("#replay-compare")
    assert link.is_visible() and link.inner_text() == "compare this snapshot with the final model"

    def target():
        parts = urlsplit(link.get_attribute("href"))
        q = parse_qs(parts.query)
        assert parts.path == "/compare" and set(q) == {"a", "b"}
        return q["a"][0], q["b"][0]

    for i in (0, len(steps) // 2, 1):
        page.eval_on_selector("#replay-step", "(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", i)
        assert target() == (f"{run_id}/step-{steps[i]:06d}", run_id)
    # the link opens /compare on the snapshot and the final model
    with page.expect_navigation():
        link.click()
    page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
    shown = parse_qs(page.get_attribute("body", "data-shown"))
    assert shown["a"] == [f"{run_id}/step-{steps[1]:06d}"] and shown["b"] == [run_id]
    assert page.input_value("#ckpt-a") == f"{run_id}/step-{steps[1]:06d}" and page.input_value("#ckpt-b") == run_id
    screenshot(page, "train-replay-compare")
    assert unexpected_errors(page) == []


def test_the_start_form_sends_llama_style_and_an_override(page, live_url, short_run, screenshot):
    open_page(page, live_url)
    vocab = page.input_value("#vocab-size")
    page.select_option("#preset", "llama-style")
    llama = api(page, live_url, "GET", f"/params?preset=llama-style&vocab_size={vocab}")
    assert llama["config"]["pos"] == "rope" and llama["config"]["mlp"] == "swiglu"
    page.wait_for_function(
        "(n) => document.getElementById('preset-info').textContent.includes(n)",
        arg=f"{llama['counts']['total']:,} parameters",
    )
    assert "RoPE" in page.inner_text("#preset-info") and "grouped-query" in page.inner_text("#preset-info")
    # the architecture box starts closed, its fields "as the preset" (the preset's own choice named)
    assert not page.is_visible("#arch-pos")
    page.click("#arch-box summary")
    assert page.input_value("#arch-pos") == "" and "RoPE" in page.locator("#arch-pos option").first.inner_text()
    assert page.get_attribute("#arch-kv", "placeholder") == f"preset: {llama['config']['n_kv_head']}"

    # an impossible combination: named before sending, and the API's 422 shown when sent anyway
    page.fill("#arch-kv", "3")
    page.wait_for_selector("#arch-error:not([hidden])")
    assert "must be divisible by n_kv_head (3)" in page.inner_text("#arch-error")
    page.fill("#max-steps", "5")
    refused = start(page)
    assert refused.status == 422 and refused.request.post_data_json["overrides"] == {"n_kv_head": 3}
    detail = refused.json()["detail"][0]["msg"]
    assert detail.startswith("Value error, overrides: ")
    page.wait_for_function("document.getElementById('start-msg').textContent.includes('cannot be built')")
    msg = page.inner_text("#start-msg")
    assert (
        "cannot be built" in msg and detail.removeprefix("Value error, overrides: ") in msg and "Value error" not in msg
    )
    screenshot(page, "train-arch-refused")

    # a possible one: llama-style with one key/value head (multi-query), sent as the only override
    page.fill("#arch-kv", "1")
    page.wait_for_function(
        "document.getElementById('arch-error').hidden && "
        "document.getElementById('arch-info').textContent.includes('n_kv_head=1')"
    )
    page.click("#more-box summary")
    page.fill("#vocab-size", str(SHORT["vocab_size"]))
    page.fill("#batch-size", "4")
    resp = start(page)
    assert resp.status == 202, resp.text()
    sent = resp.request.post_data_json
    assert sent["preset"] == "llama-style" and sent["overrides"] == {"n_kv_head": 1} and sent["max_steps"] == 5
    body = wait_run(page, live_url, resp.json()["id"], timeout=180)
    assert body["status"] == "done", body
    assert body["request"]["preset"] == "llama-style" and body["request"]["overrides"]["n_kv_head"] == 1
    assert all(v is None for k, v in body["request"]["overrides"].items() if k != "n_kv_head")
    # back to the preset: nothing is sent as overrides any more
    page.click("#arch-reset")
    page.wait_for_function("document.getElementById('arch-info').textContent === ''")
    page.fill("#seed", "1338")
    again = start(page)
    assert again.status == 202 and "overrides" not in again.request.post_data_json
    assert wait_run(page, live_url, again.json()["id"], timeout=180)["request"]["overrides"]["n_kv_head"] is None
    assert unexpected_errors(page, allowed=("422",)) == []


def fast_gqa(experiments: list[dict]) -> dict:
    """The real gqa experiment (three variants, a time budget each), with every request made tiny
    and 3 s long so the page can train it in a test; the labels and overrides are the API's."""
    exp = json.loads(json.dumps(next(e for e in experiments if e["name"] == "gqa")))
    for v in exp["variants"]:
        v["request"].update(
            preset="tiny", vocab_size=SHORT["vocab_size"], batch_size=8, time_budget=3.0, max_steps=None
        )
    return exp


def test_every_experiment_is_listed_with_its_variants(page, live_url):
    open_page(page, live_url)
    listed = api(page, live_url, "GET", "/experiments")
    names = {e["name"] for e in listed}
    assert {"positions", "rmsnorm", "swiglu", "gqa", "moe", "muon", "llama-style"} <= names
    for exp in listed:
        card = page.locator(f"#exp-{exp['name']}")
        assert card.locator(".variant").count() == len(exp["variants"])
        for i, v in enumerate(exp["variants"]):
            assert v["label"] in card.locator(".variant").nth(i).inner_text()
        budget = exp["variants"][0]["request"]["time_budget"]
        want = (
            f"Run ({len(exp['variants'])} runs of {budget:g} s each)"
            if budget
            else f"Run ({len(exp['variants'])} short runs)"
        )
        assert card.locator("button.exp-run").inner_text() == want
    gqa = page.locator("#exp-gqa")
    assert gqa.get_attribute("data-variants") == "3" and "60 s budget" in gqa.inner_text()
    assert "n_kv_head=2" in gqa.locator(".variant").nth(1).inner_text()
    # an experiment the URL names but this data folder has not trained is not trained on opening:
    # its card says so and waits for Run (an unknown name is ignored)
    posts = []
    # (POST /api/v1/training-plan only counts the form's snapshots: it trains nothing)
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" and "/training-plan" not in r.url else None)
    page.goto(f"{live_url}/train?exp=weight-tying,no-such-experiment")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    tying = page.locator("#exp-weight-tying")
    assert "Not trained in this data folder yet" in tying.locator(".exp-msg").inner_text()
    assert tying.get_attribute("data-state") is None and not tying.locator(".exp-results").is_visible()
    assert posts == []
    assert unexpected_errors(page) == []


def test_a_finished_three_variant_experiment_links_its_runs_to_compare(page, live_url, short_run, screenshot):
    exp = fast_gqa(api(page, live_url, "GET", "/experiments"))
    page.route(
        "**/api/v1/experiments",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps([exp])),
    )
    answers = []  # the page's POST /api/v1/training answers, in order
    page.on(
        "response",
        lambda r: answers.append(r) if r.url.endswith("/api/v1/training") and r.request.method == "POST" else None,
    )
    open_page(page, live_url)
    card = page.locator("#exp-gqa")
    assert card.locator("button.exp-run").inner_text() == "Run (3 runs of 3 s each)"
    card.locator("button.exp-run").click()
    page.wait_for_function(
        "['done', 'failed'].includes(document.getElementById('exp-gqa').dataset.state)", timeout=300_000
    )
    assert card.get_attribute("data-state") == "done", card.locator(".exp-msg").inner_text()
    assert [r.status for r in answers] == [202] * 3 or all(r.status in (200, 202) for r in answers)
    started = [r.json()["id"] for r in answers]
    assert len(started) == 3
    bodies = [api(page, live_url, "GET", f"/training/{i}") for i in started]
    for v, body in zip(exp["variants"], bodies):
        assert body["status"] == "done" and body["request"]["time_budget"] == 3.0
        assert body["request"]["overrides"]["n_kv_head"] == v["request"]["overrides"]["n_kv_head"]

    # the loss curves against the step, one pair per variant
    traces = page.evaluate(
        "() => document.querySelector('#exp-gqa .exp-loss').data.map(t => ({name: t.name, x: t.x, y: t.y}))"
    )
    for v, body in zip(exp["variants"], bodies):
        train = next(t for t in traces if t["name"] == f"{v['label']} · train")
        assert train["x"] == [h["step"] for h in body["history"]] and train["y"] == [h["loss"] for h in body["history"]]
        val = next(t for t in traces if t["name"] == f"{v['label']} · validation")
        assert val["y"] == [e["val_loss"] for e in body["evals"]]
    # each variant's steps reached and final validation loss, as the API has them
    checkpoints = {c["name"]: c for c in api(page, live_url, "GET", "/checkpoints")}
    rows = card.locator(".exp-summary tbody tr")
    assert rows.count() == 3 and "steps reached" in card.locator(".exp-summary thead").inner_text()
    for i, body in enumerate(bodies):
        row = rows.nth(i)
        assert row.get_attribute("data-run") == body["id"] and row.get_attribute("data-steps") == str(body["step"])
        assert exp["variants"][i]["label"] in row.inner_text() and f"{body['step']:,}" in row.inner_text()
        assert f"{checkpoints[body['checkpoint']]['val_loss']:.4f}" in row.inner_text()
    # three variants: the second and the third, each against the first
    assert compare_pairs(card) == [
        (bodies[0]["checkpoint"], bodies[1]["checkpoint"]),
        (bodies[0]["checkpoint"], bodies[2]["checkpoint"]),
    ]
    assert [b["checkpoint"] for b in bodies] == started
    screenshot(page, "train-experiment-gqa")
    assert unexpected_errors(page) == []


def test_a_finished_run_downloads_as_a_gguf_file(page, live_url, short_run, tmp_path):
    """The checkpoints table's GGUF button runs POST /api/v1/export/model as a job and, once done, the
    browser downloads the file: llama.cpp's, with the run's tensors."""
    run_id = short_run["id"]
    open_page(page, live_url)
    with page.expect_download(timeout=60_000) as dl:
        page.click(f'#ckpt-table button[data-export="{run_id}"][data-format="gguf"]')
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.suffix == ".gguf" and path.read_bytes()[:4] == b"GGUF"
    assert "written as gpt2" in page.inner_text("#ckpt-msg")
