"""The embed URLs that examples/tour.ipynb displays, loaded in real Chromium against the live app:
each shows its one panel, drawn, with no page header and no other panel, and no console error."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from apihelp import finished_run

from gptscope.server.config import BUILTIN_CHECKPOINT

TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
RUN = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "embed-small", "max_steps": 20, "seed": 3}


def test_every_embed_url_of_the_tour_shows_its_panel_alone(tour_embeds, live_url, page, screenshot):
    srcs = tour_embeds
    assert len(srcs) >= 5
    for src in srcs:
        parts = urlsplit(src)
        name = parse_qs(parts.query)["embed"][0]
        page.goto(
            f"{live_url}{parts.path}?{parts.query}"
        )  # the notebook's server is gone: the same URL on the live one
        panel = page.locator(f"#{name}-panel")
        page.wait_for_selector(f"body[data-ready], #{name}-panel[data-ready]", state="attached", timeout=60_000)
        page.wait_for_function(
            "(p) => p.querySelector('svg, canvas, table, .js-plotly-plot, li, .chip')",
            arg=panel.element_handle(),
            timeout=60_000,
        )
        assert page.locator("header.topbar").count() == 0, src
        assert panel.is_visible(), src
        box = panel.bounding_box()
        assert box["height"] > 120 and box["y"] < 60, (src, box)  # drawn, and at the top of the frame
        others = page.locator(f"main > section:not(#{name}-panel)")
        assert all(not others.nth(i).is_visible() for i in range(others.count())), src
        screenshot(page, f"notebook-embed-{name}", full_page=False)
    assert not page.console_errors, page.console_errors


def test_a_training_runs_curves_embed_by_run_id(browser, serve_app, tmp_path, page, monkeypatch):
    """show("train", run=ID, stage="progress"): the /train page opens on that run, its curves alone."""
    from gptscope import notebook

    with serve_app(BUILTIN_CHECKPOINT, tmp_path) as url:
        ctx = browser.new_context()
        try:
            run = finished_run(ctx, url, "embed-small", TEXT, RUN)
        finally:
            ctx.close()
        monkeypatch.setattr(notebook, "_base_url", url)
        src = notebook.url("train", stage="progress", run=run["id"])
        page.goto(src)
        page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
        page.wait_for_function("(id) => document.getElementById('run-select').value === id", arg=run["id"])
        assert page.locator("#progress-body").is_visible() and page.locator("header.topbar").count() == 0
        assert "done" in page.locator("#run-status").inner_text()
        assert page.locator("#progress-panel .js-plotly-plot").count() >= 1
        assert not page.locator("#start-panel").is_visible()
    assert not page.console_errors, page.console_errors
