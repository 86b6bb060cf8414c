"""/timeline in a real headless Chromium: a short run trained through the API on a small uploaded text,
on a server of its own, is read by the page (POST /api/v1/timeline/jobs, small SAEs and lenses). The
charts must carry the job's numbers (the ICL and in-context scores, the loss, every head's induction
score), the slider must have one position per snapshot and move every panel's step, the phase change
(or the words for none) and the summary must show, a second start must cancel, and an exported panel
must redraw offline; no console error and no layout fault."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from apihelp import api_json, decimal, finished_run, pct
from conftest import watched_page
from exporting import check_offline, layout_faults, live_exports

from gptscope.server.config import BUILTIN_CHECKPOINT

pytestmark = pytest.mark.browser

TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
CORPUS = "timeline-small"
RUN = {
    "preset": "tiny",
    "vocab_size": 300,
    "batch_size": 8,
    "corpus": CORPUS,
    "max_steps": 40,
    "seed": 7,
    "repeats": 1.0,
}  # the default snapshots: 0, 1, 2, 3, 6, 12, 20, 30, 40
SMALL = "sae_tokens=2048&lens_tokens=2048"


@pytest.fixture(scope="module")
def served(serve_app, tmp_path_factory):
    with serve_app(BUILTIN_CHECKPOINT, tmp_path_factory.mktemp("gptscope-timeline-data")) as url:
        yield url


@pytest.fixture(scope="module")
def context(browser, served):
    """A context of this module's own (the shared one would start the built-in model's server too), with a
    keeper page that keeps Plotly compiled from page to page (conftest.shared_context)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(15_000)
    ctx.new_page().goto(f"{served}/api/v1/health")
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def trained(context, served):
    """(url, run status): a finished 40-step run with the default (log-spaced) snapshots."""
    body = finished_run(context, served, CORPUS, TEXT, RUN)
    assert len(body["snapshots"]) >= 5, body["snapshots"]
    return served, body


@pytest.fixture
def page(context):
    pg = watched_page(context)
    try:
        yield pg
    finally:
        pg.close()


def traces(page, plot):
    return page.evaluate(
        """(id) => document.getElementById(id).data.map(t => ({ name: t.name, x: Array.from(t.x || []),
        y: Array.from(t.y || []), z: t.z ? t.z.map((r) => Array.from(r)) : null }))""",
        plot,
    )


def shapes(page, plot):
    return page.evaluate("(id) => document.getElementById(id).layout.shapes || []", plot)


def opened(page, url, run_id, extra=""):
    """The page on `run_id` with small SAEs and lenses, its job done: the job's timeline."""
    page.goto(f"{url}/timeline?run={run_id}&{SMALL}{extra}")
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
    assert page.get_attribute("#run-panel", "data-status") == "done", page.inner_text("#progress-text")
    job = api_json(page, url, "GET", f"/timeline/jobs/{page.get_attribute('#run-panel', 'data-job')}")
    assert job["status"] == "done" and job["result"]["run"] == run_id
    return job["result"]


def scrub_to(page, i, step):
    page.evaluate(
        "(i) => { const s = document.getElementById('scrub'); s.value = String(i); s.dispatchEvent(new Event('input')); }",
        i,
    )
    for now in ("loss-now", "icl-now", "heads-now", "circuit-now", "features-now", "lens-now"):
        page.wait_for_function("([id, s]) => document.getElementById(id).dataset.step === s", arg=[now, str(step)])


def check_charts(page, t):
    snaps = t["snapshots"]
    x = [s["step"] + 1 for s in snaps]  # a log axis: step + 1
    icl = {tr["name"]: tr for tr in traces(page, "icl-plot")}
    assert icl["ICL score (held-out text)"]["y"] == [s["icl"]["score"] for s in snaps]
    assert icl["ICL score (held-out text)"]["x"] == x
    assert icl["in-context score (random tokens shown twice)"]["y"] == [
        s["in_context"]["in_context_score"] for s in snaps
    ]
    loss = {tr["name"]: tr for tr in traces(page, "loss-plot")}
    assert loss["held-out loss"]["y"] == [s["loss"] for s in snaps]
    assert loss["trainer's validation loss"]["y"] == [s["val_loss"] for s in snaps]
    kind = snaps[-1]["loss_by_kind"][0]
    assert loss[f"{kind['kind']} tokens"]["y"][-1] == kind["loss"]
    # the heads map: one row per head (layer-major), one column per snapshot, the induction scores
    assert page.input_value("#role") == "induction"
    z = traces(page, "heads-map")[0]["z"]
    n_head = t["n_head"]
    assert len(z) == t["n_layer"] * n_head
    assert z == [[s["scores"]["induction"][r // n_head][r % n_head] for s in snaps] for r in range(len(z))]
    best = {tr["name"]: tr for tr in traces(page, "best-plot")}
    for role in t["roles"]:
        assert best[role["name"]]["y"] == [s["best"][role["name"]] for s in snaps]
        assert best[f"{role['name']} threshold"]["y"] == [role["threshold"]] * 2
    lens = traces(page, "lens-logit-map")[0]["z"]
    assert lens == [[s["lens"][k]["logit_kl"] for s in snaps] for k in range(len(snaps[0]["lens"]))]


def check_phase_and_summary(page, t):
    pc = t["phase_change"]
    text = page.inner_text("#phase-text")
    if pc is None:
        assert text.startswith("No phase change")
    else:
        assert text == pc["summary"]
        band = [s for s in shapes(page, "icl-plot") if s["type"] == "rect"]
        assert [(b["x0"], b["x1"]) for b in band] == [(pc["from_step"] + 1, pc["step"] + 1)]
    assert page.inner_text("#summary-text") == t["summary"]
    rows = page.locator("#jumps-table tbody tr")
    assert rows.count() == len(t["jumps"])
    for k, j in enumerate(t["jumps"]):
        cells = rows.nth(k).locator("td").all_inner_texts()
        assert cells[0] == j["series"] and cells[-1] == pct(j["share"])


def check_step_views(page, t, i):
    s = t["snapshots"][i]
    step = s["step"]
    circuit = page.inner_text("#circuit-now")
    c = s["circuit"]
    if t["pair"] is None:
        assert circuit.startswith("No circuit is followed")
    elif c is None:
        assert circuit.startswith(f"No circuit at step {step}:") and t["pair"] in circuit
        if s["pair_effect"] is not None:  # how far short of a circuit it falls, in the API's number
            assert f"{decimal(s['pair_effect'], 3)} nats, under the {decimal(t['min_effect'], 1)}" in circuit, circuit
    else:
        assert f"keeps {c['edges']:,} of {c['total_edges']:,} edges" in circuit and pct(c["recovered"]) in circuit
        assert page.locator("#circuit-top li").all_inner_texts() == c["top"]
    a = s["sae"]
    feats = page.inner_text("#features-now")
    assert feats.startswith(f"At step {step}: {a['alive']:,} of {a['features']:,} features alive"), feats
    if i > 0:
        assert f"{a['born']:,} born, {a['died']:,} died and {a['kept']:,} kept" in feats
    assert f"FVU {decimal(a['fvu'])}" in feats
    assert page.inner_text("#icl-now").startswith(f"At step {step}: ICL score {decimal(s['icl']['score'])} nats")
    assert page.inner_text("#loss-now").startswith(f"At step {step}: held-out loss {decimal(s['loss'])} nats")
    # the slider's step on the charts: a line at step + 1, a box around the heatmaps' column
    assert [sh["x0"] for sh in shapes(page, "icl-plot") if sh["type"] == "line"] == [step + 1]
    assert [(sh["x0"], sh["x1"]) for sh in shapes(page, "heads-map")] == [(i - 0.5, i + 0.5)]


def test_the_page_draws_the_timeline_and_its_slider_moves_every_panel(page, trained, screenshot):
    url, body = trained
    run_id = body["id"]
    assert {"run": run_id, "steps": body["snapshots"]} in api_json(page, url, "GET", "/timeline/runs")
    t = opened(page, url, run_id)
    n = len(t["snapshots"])
    assert t["steps"] == body["snapshots"]
    assert page.input_value("#run") == run_id
    assert page.get_attribute("#scrub", "max") == str(n - 1) and page.input_value("#scrub") == str(n - 1)
    assert page.get_attribute("#scrub-bar", "data-points") == str(n)
    assert page.inner_text("#progress-text").startswith(f"all {n} snapshots read")
    # the pair field suggests the pairs that fit the run's tokenizer, as the answer names them (this small
    # run's vocabulary fits none); before a run is read, the served model's
    assert (
        offered_pairs(page) == t["pairs"] and t["pair"] is None and page.get_attribute("#pair", "list") == "pair-list"
    )
    check_charts(page, t)
    check_phase_and_summary(page, t)
    check_step_views(page, t, n - 1)
    for i in (2, 0):
        scrub_to(page, i, t["steps"][i])
        check_step_views(page, t, i)
        assert parse_qs(urlsplit(page.url).query)["step"] == [str(t["steps"][i])]  # kept in the URL
    assert layout_faults(page) == []
    screenshot(page, "timeline")
    assert page.console_errors == []

    # the URL's step is where a new visit starts
    opened(page, url, run_id, f"&step={t['steps'][2]}")
    assert page.input_value("#scrub") == "2" and page.get_attribute("#circuit-now", "data-step") == str(t["steps"][2])
    assert page.console_errors == []


def offered_pairs(page) -> list[str]:
    return page.eval_on_selector_all("#pair-list option", "os => os.map((o) => o.value)")


def test_a_second_start_can_be_cancelled_and_a_refusal_names_its_field(page, trained):
    url, body = trained
    page.goto(f"{url}/timeline")  # no run named: nothing starts, and the pairs offered are the served model's
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
    served = [p["name"] for p in api_json(page, url, "GET", "/patch/pairs")]
    assert offered_pairs(page) == served and "dead-caesar" in served
    opened(page, url, body["id"])
    page.fill("#lens-tokens", "4096")  # nothing read with these settings yet: the job has work to do
    page.click("#start")
    page.wait_for_function("() => ['running', 'queued'].includes(document.getElementById('run-panel').dataset.status)")
    page.click("#cancel")
    page.wait_for_function("() => document.getElementById('run-panel').dataset.status === 'cancelled'")
    assert page.inner_text("#progress-text").startswith("cancelled after")
    assert page.is_disabled("#cancel")
    # a number the API refuses: its 422 is shown by the form, the field marked
    page.fill("#sae-tokens", "-1")
    page.click("#start")
    page.wait_for_selector("#form-error:not([hidden])")
    assert page.inner_text("#form-error").startswith("sae_tokens:")
    assert page.get_attribute("#sae-tokens", "aria-invalid") == "true"
    assert len(page.console_errors) == 1 and "422" in page.console_errors[0]  # the refused request's own line


def test_an_exported_panel_redraws_offline(page, trained, browser, tmp_path):
    url, body = trained
    path = f"/timeline?run={body['id']}&{SMALL}"
    done, _ = live_exports(page, url, path, tmp_path, panels=["icl"])
    assert [fig for fig, *_ in done] == ["icl-plot"]
    check_offline(browser, [(path, *row) for row in done])
    assert page.console_errors == []
