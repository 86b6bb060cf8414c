"""Issue #46 in a real headless Chromium: stage 6 reads the stream with the tuned lens and switches back
to the logit lens, with both lenses' figures; stage 11 colours the prompt's tokens by integrated
gradients and draws every position's matrix from its job. Every number is the API's; the URL keeps the
settings; no console error."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from test_forward_stages import api, drawn, draws, plot_data, query_of

pytestmark = pytest.mark.browser

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"
CAESAR_ID, EDWARD_ID = 1188, 1580


def test_the_lenses_and_the_token_attribution_draw_from_the_api(page, live_url):
    params = {"text": CAESAR, "lens": "tuned-s0", "ig_target": CAESAR_ID, "stage": "all"}  # stages 6 and 11
    page.goto(f"{live_url}/?{urlencode(params)}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    body = {"text": CAESAR, "include": ["logit_lens", "tuned_lens"], "lens": "tuned-s0"}
    trace = api(page, live_url, "/forward", body)

    # stage 6: the tuned lens on show, its held-out figures beside the logit lens's
    drawn(page, "lens-plot")
    assert page.get_attribute("#lens-plot", "data-lens") == "tuned-s0"
    assert plot_data(page, "lens-plot")[0]["z"] == trace["tuned_lens"]["actual_next_prob"]
    drawn(page, "lens-kl-plot")
    lines = {t["name"]: t for t in plot_data(page, "lens-kl-plot")}
    held = trace["tuned_lens"]["held_out"]["stages"]
    assert lines["logit lens"]["y"][:-1] == [s["logit_kl"] for s in held][:-1]
    assert lines["tuned lens tuned-s0"]["y"][:-1] == [s["tuned_kl"] for s in held][:-1]
    assert f"{held[0]['tuned_kl']:.3f}" in page.inner_text("#lens-figures")
    before = draws(page, "lens-plot")
    page.select_option("#lens-pick", "")
    page.wait_for_function("document.getElementById('lens-plot').dataset.lens === 'logit'")
    drawn(page, "lens-plot", before + 1)
    assert plot_data(page, "lens-plot")[0]["z"] == trace["logit_lens"]["actual_next_prob"]
    assert "lens" not in query_of(page.url)

    # stage 11: the logit difference " Caesar" - " Edward" (typed) at the last position, token by token
    page.locator("#inputs-panel").scroll_into_view_if_needed()
    page.wait_for_selector('#inputs-panel[data-state="ready"]', state="attached", timeout=60_000)
    page.fill("#ta-word", "Edward")
    page.click("#ta-word-contrast")
    page.wait_for_function(
        f"JSON.parse(document.getElementById('inputs-panel').dataset.request || '{{}}').contrast === {EDWARD_ID}"
    )
    page.wait_for_selector('#inputs-panel[data-state="ready"]', state="attached", timeout=60_000)
    ta = api(page, live_url, "/token-attribution", {"text": CAESAR, "target": CAESAR_ID, "contrast": EDWARD_ID,
                                                     "position": len(trace["tokens"]) - 1, "steps": 32, "baseline": "zero"})  # fmt: skip
    row = ta["rows"][0]
    shown = page.eval_on_selector_all("#ta-tokens .ta-tok", "s => s.map(x => +x.dataset.value)")
    assert shown == row["integrated_gradients"]
    assert float(page.get_attribute("#ta-error", "data-value")) == row["completeness"]["error"]
    assert "Caesar" in page.get_attribute("#ta-tokens .ta-tok[data-index='7']", "title")
    assert "Edward" in page.inner_text("#ta-contrast") and page.input_value("#ta-contrast") == str(EDWARD_ID)

    # every position: a job, then the matrix
    page.check("#ta-every")
    page.wait_for_function("JSON.parse(document.getElementById('inputs-panel').dataset.request || '{}').every_position === true",
                           timeout=120_000)  # fmt: skip
    drawn(page, "ta-matrix-plot")
    z = plot_data(page, "ta-matrix-plot")[0]["z"]
    assert len(z) == len(trace["tokens"]) and z[-1] == row["integrated_gradients"]
    q = query_of(page.url)
    assert q["ig_every"] == "1" and q["ig_contrast"] == str(EDWARD_ID)
    assert page.console_errors == []
