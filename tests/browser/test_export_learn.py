"""/learn's "HTML" downloads: every panel with a figure that addDownloads decorated and the page
drew is exported through the HTML button of its last such figure (one load of the page; every
figure's bar has the button), and each panel's file is then opened from disk with every request refused: it must draw each of its figures and answer a hover with the same
text (the same numbers) as the live page did (the helpers of tests/browser/exporting.py). An edited
field travels with its panel's file, which redraws what it has answers for and says that any other
setting needs the running app."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from exporting import PROBE, check_offline, live_exports

pytestmark = pytest.mark.browser

FIGURES = 33  # the decorated figures of /learn's 17 panels (static/js/learn/*.js, figureBars)
# the page's URL state: an edited field, and a pair of kept schedule curves drawn under the new ones
KEPT = ["/schedules/lr?kind=transformer&d_model=512&warmup=4000", "/schedules/lr?kind=gpt1&max_lr=0.00025&warmup=2000"]
LEARN = f"/learn?t-warmup=8000&schedule-kept={quote(json.dumps(KEPT))}"
X_END = "document.getElementById('gelu-plot').data[0].x.at(-1)"  # where the GELU curves end


def test_every_learn_figure_exports_to_a_file_that_works_with_no_network(browser, live_url, page, tmp_path):
    done, skipped = live_exports(page, live_url, LEARN, tmp_path)
    # all but the loaded model's own schedule (a model may record none) are drawn whatever the model
    assert len(done) >= FIGURES - 1, ([e[0] for e in done], skipped)
    assert len({e[1] for e in done}) == 17, sorted({e[1] for e in done})  # every panel
    hovers = {e[0]: e[3] for e in done}
    assert "kept: Transformer d_model=512, warmup=4,000" in hovers["schedule-plot"]  # the first curve's
    file, hover = export_edited_gelu(page, tmp_path)
    assert not page.console_errors, page.console_errors
    check_offline(browser, [(LEARN, *e) for e in done])
    answers_only_what_it_recorded(browser, file, hover)


def export_edited_gelu(page, folder):
    """The GELU panel with x_max edited to 2, exported: the file, and its tanh-gap figure's hover."""
    page.evaluate("delete document.getElementById('gelu-panel').dataset.ready")
    page.fill("#gelu-xmax", "2")
    page.wait_for_selector("#gelu-panel[data-ready]", state="attached")
    assert "gelu-xmax=2" in page.url and page.evaluate(X_END) == 2  # the field is the page's URL state
    with page.expect_download() as dl:
        page.click(".dl-bar[data-for='gelu-gap-plot'] button[data-format='html']")
    file = folder / "gelu-edited.html"
    dl.value.save_as(file)
    return file, page.wait_for_function(PROBE, arg="gelu-gap-plot").json_value()


def answers_only_what_it_recorded(browser, file, hover):
    """The file opens with the edited field and draws it as the live page did; a setting the live
    page drew redraws from its answer, a new one says that it needs the app."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    refused = []
    ctx.route(
        "**/*",
        lambda r: r.continue_() if r.request.url == file.as_uri() else (refused.append(r.request.url), r.abort()),
    )
    try:
        pg = ctx.new_page()
        errors = []
        pg.on("pageerror", lambda err: errors.append(str(err)))
        pg.goto(file.as_uri())
        pg.wait_for_selector("#gelu-panel[data-ready]", state="attached", timeout=60_000)
        assert pg.input_value("#gelu-xmax") == "2" and pg.evaluate(X_END) == 2
        assert pg.wait_for_function(PROBE, arg="gelu-gap-plot").json_value() == hover
        pg.fill("#gelu-xmax", "3")
        pg.wait_for_selector("#gelu-panel[data-error]", state="attached")
        assert "needs the running app" in pg.inner_text("#error")
        pg.fill("#gelu-xmax", "4")  # the page's first drawing: in the record
        pg.wait_for_selector("#gelu-panel[data-ready]:not([data-error])", state="attached")
        assert pg.evaluate(X_END) == 4 and pg.locator("#error").is_hidden()
        assert not refused and not errors, (refused, errors)
    finally:
        ctx.close()
