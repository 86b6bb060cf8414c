"""The steering panel of /features in a real headless Chromium (issue #66): a small request run from the
form as a job draws exactly the API's answer for the same request (both charts, the table, the
generations side by side), the URL carries the settings and a reload restores them (and, with steer=1,
the answer), a bad input shows the API's 422 naming the field, nothing is logged as an error and the
figures are laid out without a fault."""

from __future__ import annotations

import pytest
from apihelp import api_json
from exporting import layout_faults

pytestmark = pytest.mark.browser

FORM = {"#steer-strengths": "1", "#steer-prefix": "1", "#steer-prompts": "4", "#steer-tokens": "8", "#steer-seed": "3"}
REQUEST = {
    "task": "form",
    "concept": "verse",
    "strengths": [1],
    "prefix_examples": [1],
    "n_prompts": 4,
    "new_tokens": 8,
    "seed": 3,
}
PLOTS = ["steer-score-plot", "steer-fluency-plot"]


def drawn_ys(page, plot: str) -> list[list[float]]:
    page.wait_for_function(f"+document.getElementById('{plot}').dataset.drawn >= 1")
    return page.evaluate(f"document.getElementById('{plot}').data.map((t) => Array.from(t.y))")


def check_answer(page, api: dict) -> None:
    methods = [m for m in api["methods"] if m["available"]]
    assert [m["method"] for m in methods][-1] == "prompt"
    for key, plot in zip(("concept_score", "fluency"), PLOTS, strict=True):
        base = api["unsteered"][key]
        assert drawn_ys(page, plot) == [[p[key] for p in m["points"]] for m in methods] + [[base, base]]
    for m in methods:
        row = page.inner_text(f'#steer-table tr[data-method="{m["method"]}"]')
        p = m["points"][0]
        assert f"{100 * p['concept_score']:.1f}%" in row and f"{p['fluency']:.3f}" in row
    unsteered = page.inner_text('#steer-table tr[data-method="unsteered"]')
    assert f"{100 * api['unsteered']['concept_score']:.1f}%" in unsteered
    probe = next(m for m in methods if m["method"] == "probe")
    assert f"{probe['cosine_with_diffmean']:.3f}" in page.inner_text('#steer-table tr[data-method="probe"]')
    summary = page.inner_text("#steer-summary")
    assert f"{100 * api['judge']['accuracy']:.1f}%" in summary and api["judge"]["hook_name"] in summary
    assert page.locator("#steer-gens tbody tr").count() == len(api["prompts"])
    first = page.eval_on_selector_all("#steer-gens tbody tr:first-child .cont", "els => els.map((e) => e.textContent)")
    want = [api["unsteered"]] + [m["points"][0] for m in methods]
    assert first == [p["generations"][0].replace("\n", "↵\n") for p in want]  # a line break shown


def test_steering_four_ways_draws_the_apis_answer_and_keeps_its_settings(page, live_url):
    page.goto(f"{live_url}/features")
    page.wait_for_selector('#steering-panel[data-state="idle"]', state="attached")
    page.wait_for_selector('#steer-concept option[value="verse"]', state="attached")
    page.select_option("#steer-concept", "verse")
    for sel, value in FORM.items():
        page.fill(sel, value)
    page.click("#steer-run")
    page.wait_for_selector('#steering-panel[data-state="ready"]', state="attached", timeout=60_000)
    api = api_json(page, live_url, "POST", "/steering", data=REQUEST)
    check_answer(page, api)
    assert page.get_attribute("#steer-progress", "aria-valuenow") == "100"
    for part in ("steer_concept=verse", "steer_strengths=1", "steer_prefix=1", "steer_prompts=4", "steer_tokens=8"):
        assert part in page.url
    assert "steer=1" in page.url
    assert layout_faults(page, PLOTS) == []
    assert page.console_errors == []
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    panel = page.locator("#steering-panel")
    assert panel.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1")

    # a reload restores the form and, with steer=1, the same answer
    page.reload()
    page.wait_for_selector('#steering-panel[data-state="ready"]', state="attached", timeout=60_000)
    assert page.input_value("#steer-concept") == "verse" and page.input_value("#steer-tokens") == "8"
    assert page.input_value("#steer-strengths") == "1" and page.input_value("#steer-seed") == "3"
    check_answer(page, api)

    # the API's own 422, naming the field
    page.fill("#steer-strengths", "0")
    page.click("#steer-run")
    page.wait_for_selector('#steering-panel[data-state="error"]', state="attached")
    resp = page.request.post(f"{live_url}/api/v1/steering/jobs", data={**REQUEST, "strengths": [0]})
    assert resp.status == 422
    msg = resp.json()["detail"][0]["msg"]
    assert f"strengths.0: {msg}" in page.inner_text("#steer-note")
    assert "steer=1" not in page.url and "steer_strengths=0" in page.url
    # the refusal asked for is the one console error (the browser logs a resource's 422)
    assert len(page.console_errors) == 1 and "status of 422" in page.console_errors[0], page.console_errors
    assert "/api/v1/steering/jobs" in page.console_errors[0]
