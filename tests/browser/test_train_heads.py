"""/train panel 4 (heads over training) and the loss chart's unigram / bigram lines, in a real
headless Chromium. A short run with five snapshots is trained through the API on a small uploaded
text, on a server of its own (so the /train tests that expect an empty data folder are not
disturbed); the page must draw, for that run, one point per snapshot for every role and for the
in-context score, each role's threshold, and the two entropy lines, all with the API's numbers.
A second server on the same data folder then finds the run on disk and draws the same panel."""

from __future__ import annotations

import time

import pytest
from apihelp import TERMINAL, api_json, finished_run

from gptscope.server.config import BUILTIN_CHECKPOINT

pytestmark = pytest.mark.browser

TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
CORPUS = "heads-small"
RUN = {
    "preset": "tiny",
    "vocab_size": 300,
    "batch_size": 8,
    "corpus": CORPUS,
    "max_steps": 60,
    "snapshots": [0, 0.25, 0.5, 0.75, 1],
    "seed": 7,
}
ROLES = {"previous-token", "first-token", "current-token", "local", "duplicate-token", "induction"}
# Okabe–Ito: the only colours a role may be drawn in
OKABE_ITO = {"#0072B2", "#E69F00", "#009E73", "#56B4E9", "#D55E00", "#CC79A7", "#F0E442", "#222222", "#999999"}


def fmt(x: float, digits: int) -> str:
    """lib/format.js's decimal: fixed digits, or scientific notation below 1e-3 (and at 1e5 or more)."""
    return (
        f"{x:.2e}".replace("e-0", "e-").replace("e+0", "e+")
        if x != 0 and not 1e-3 <= abs(x) < 1e5
        else f"{x:.{digits}f}"
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gptscope-heads-data")


@pytest.fixture(scope="module")
def trained(browser, serve_app, data_dir):
    """(url, run status): a finished 60-step run with snapshots at steps 0, 15, 30, 45 and 60."""
    with serve_app(BUILTIN_CHECKPOINT, data_dir) as url:
        ctx = browser.new_context()
        try:
            body = finished_run(ctx, url, CORPUS, TEXT, RUN)
            assert body["snapshots"] == [0, 15, 30, 45, 60]
        finally:
            ctx.close()
        yield url, body


def open_run(page, url, run_id):
    page.goto(f"{url}/train")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.select_option("#run-select", run_id)


def traces(page, plot):
    return page.evaluate(
        """(id) => document.getElementById(id).data.map(t => ({
        name: t.name, x: Array.from(t.x), y: Array.from(t.y), color: t.line && t.line.color,
        dash: t.line && t.line.dash, symbol: t.marker && t.marker.symbol, legend: t.showlegend }))""",
        plot,
    )


def check_heads_panel(page, heads):
    """The panel's two charts against GET /training/{id}/heads."""
    run_id, snaps = heads["run"], heads["snapshots"]
    n = len(snaps)
    page.wait_for_function(
        "([id, n]) => { const g = document.getElementById('heads-roles-plot'); "
        "return g.dataset.run === id && +g.dataset.points === n; }",
        arg=[run_id, n],
        timeout=60_000,
    )
    page.wait_for_function("(id) => document.getElementById('heads-incontext-plot').dataset.run === id", arg=run_id)
    assert page.is_visible("#heads-body") and not page.is_visible("#heads-empty")
    steps = [s["step"] for s in snaps]

    drawn = {t["name"]: t for t in traces(page, "heads-roles-plot")}
    assert {r["name"] for r in heads["roles"]} == ROLES
    colours, symbols = set(), set()
    for role in heads["roles"]:
        name = role["name"]
        line = drawn[name]  # the role's best head at every snapshot: one point per snapshot
        assert line["x"] == steps
        assert line["y"] == [s["best"][name] for s in snaps]
        thr = drawn[f"{name} threshold"]
        assert thr["y"] == [role["threshold"]] * 2 and thr["dash"] == "dash" and thr["color"] == line["color"]
        assert thr["x"][0] <= steps[0] and thr["x"][1] >= steps[-1]
        colours.add(line["color"])
        symbols.add(line["symbol"])
    assert len(drawn) == 2 * len(ROLES)
    assert len(colours) == len(ROLES) and colours <= OKABE_ITO, colours  # colour-blind-safe, one per role
    assert len(symbols) == len(ROLES)  # told apart without colour too

    ic = {t["name"]: t for t in traces(page, "heads-incontext-plot")}
    score = ic["in-context score"]
    assert score["x"] == steps
    assert score["y"] == [s["in_context"]["in_context_score"] for s in snaps]
    zero = next(t for name, t in ic.items() if name.startswith("0"))
    assert zero["y"] == [0, 0]

    # the summary says plainly whether any role passed, from the API's counts
    summary = page.inner_text("#heads-summary")
    ever = [r for r in ROLES if any(s["role_counts"][r] > 0 for s in snaps)]
    if ever:
        assert "First passed:" in summary and all(r in summary for r in ever)
    else:
        assert f"No role passes its threshold at any of the {n} snapshots" in summary
    assert page.get_attribute("#heads-panel", "data-passing") == str(len(ever))
    last = snaps[-1]["in_context"]
    assert f"In-context score at step {steps[-1]}: {fmt(last['in_context_score'], 3)} nats" in summary

    # the roles' definitions and thresholds, as the API gives them
    rows = page.locator("#heads-roles-table tbody tr")
    assert rows.count() == len(ROLES)
    for i, role in enumerate(heads["roles"]):
        text = rows.nth(i).text_content()  # inside the closed <details>
        assert role["name"] in text and role["definition"] in text and f"{role['threshold']:.3f}" in text


def test_roles_and_in_context_score_over_training(page, trained, screenshot):
    url, body = trained
    run_id = body["id"]
    open_run(page, url, run_id)
    heads = api_json(page, url, "GET", f"/training/{run_id}/heads")
    assert [s["step"] for s in heads["snapshots"]] == body["snapshots"]
    check_heads_panel(page, heads)

    # the loss chart: the uniform guess, and the training text's unigram and bigram entropies
    assert body["unigram_loss"] is not None and body["bigram_loss"] is not None
    assert body["bigram_loss"] < body["unigram_loss"] < body["uniform_loss"]
    page.wait_for_function(
        "([id, n]) => { const g = document.getElementById('loss-plot'); "
        "return g.dataset.run === id && +g.dataset.points === n; }",
        arg=[run_id, len(body["history"])],
    )
    loss = {t["name"]: t for t in traces(page, "loss-plot")}
    unigram = next(t for name, t in loss.items() if "unigram" in name)
    bigram = next(t for name, t in loss.items() if "bigram" in name)
    assert unigram["y"] == [body["unigram_loss"]] * 2 and f"{body['unigram_loss']:.3f}" in unigram["name"]
    assert bigram["y"] == [body["bigram_loss"]] * 2 and f"{body['bigram_loss']:.3f}" in bigram["name"]
    assert next(t for name, t in loss.items() if name.startswith("uniform guess"))["y"] == [body["uniform_loss"]] * 2
    assert len({unigram["color"], bigram["color"]}) == 2 and unigram["dash"] != bigram["dash"]
    stats = page.inner_text("#run-stats")
    assert f"unigram {body['unigram_loss']:.3f}" in stats and f"bigram {body['bigram_loss']:.3f}" in stats
    page.locator("#heads-panel").scroll_into_view_if_needed()
    screenshot(page, "train-heads")
    assert page.console_errors == []


def test_a_run_on_disk_gets_the_same_panel(page, trained, serve_app, data_dir):
    """A new start of the app finds the run in its data folder and scores its snapshots again."""
    _, body = trained
    run_id = body["id"]
    with serve_app(BUILTIN_CHECKPOINT, data_dir) as url:
        restored = api_json(page, url, "GET", f"/training/{run_id}")
        assert restored["snapshots"] == body["snapshots"]
        assert restored["unigram_loss"] == body["unigram_loss"] and restored["bigram_loss"] == body["bigram_loss"]
        open_run(page, url, run_id)
        heads = api_json(page, url, "GET", f"/training/{run_id}/heads")
        check_heads_panel(page, heads)
        assert page.console_errors == []


def test_a_run_without_snapshots_says_so(page, trained):
    url, _ = trained
    run_id = api_json(page, url, "POST", "/training", data={**RUN, "max_steps": 3, "snapshots": [], "seed": 8})["id"]
    deadline = time.monotonic() + 120
    while api_json(page, url, "GET", f"/training/{run_id}")["status"] not in TERMINAL:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    open_run(page, url, run_id)
    page.wait_for_function("document.getElementById('heads-empty').textContent.includes('saved no snapshots')")
    assert not page.is_visible("#heads-body")
    assert not any(f"/training/{run_id}/heads" in u for u in page.requests)
    assert page.console_errors == []
