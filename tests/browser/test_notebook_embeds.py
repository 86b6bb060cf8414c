"""The embed URLs that examples/tour.ipynb displays (and the forward page's overview, as
show("forward", stage="overview") embeds it), loaded in real Chromium against the live app: each
shows its one panel, drawn, with no page header and no other panel, and no console error."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from apihelp import finished_run

from gptscope.server.config import BUILTIN_CHECKPOINT

TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
RUN = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "embed-small", "max_steps": 20, "seed": 3}


def test_every_embed_url_of_the_tour_shows_its_panel_alone(tour_embeds, live_url, page, screenshot, monkeypatch):
    from gptscope import notebook

    assert len(tour_embeds) >= 5
    # and the forward page's overview, as show("forward", stage="overview", ...) embeds it
    monkeypatch.setattr(notebook, "_base_url", live_url)
    srcs = [*tour_embeds, notebook.url("forward", stage="overview", text="ROMEO:\nBut soft")]
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


def _outputs_as_html(nb) -> list[str]:
    """Each displayed output's HTML, in order, as a notebook viewer puts it on a page."""
    return [
        out["data"]["text/html"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result") and "text/html" in out.get("data", {})
    ]


def test_the_saved_tour_shows_every_panel_with_no_server(executed_tour, browser, tmp_path):
    """The tour run in static mode, saved and read back: its outputs on one page opened from disk
    with every request refused show every panel drawn; Plotly comes once, in the first panel."""
    import nbformat

    saved = tmp_path / "tour.ipynb"
    nbformat.write(executed_tour, saved)
    outputs = _outputs_as_html(nbformat.read(saved, as_version=4))
    assert len(outputs) == 5 and all('class="gptscope-static"' in o for o in outputs)
    sizes = [len(o.encode()) for o in outputs]
    assert sizes[0] <= 5_000_000 and all(s <= 600_000 for s in sizes[1:]), sizes
    assert [o.count("id=&quot;gptscope-plotly&quot;") for o in outputs] == [1, 0, 0, 0, 0]
    page_file = tmp_path / "tour.html"
    page_file.write_text("<!doctype html><meta charset='utf-8'><body>" + "\n".join(f"<div>{o}</div>" for o in outputs))

    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    refused = []
    ctx.route(
        "**/*",
        lambda r: r.continue_() if r.request.url == page_file.as_uri() else (refused.append(r.request.url), r.abort()),
    )
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda err: errors.append(str(err)))
    try:
        pg.goto(page_file.as_uri())
        frames = [pg.frame_locator("iframe.gptscope-static").nth(i) for i in range(len(outputs))]
        for i, (src, frame) in enumerate(
            zip([parse_qs(urlsplit(s).query)["embed"][0] for s in _srcs(outputs)], frames)
        ):
            panel = frame.locator(f"#{src}-panel")
            panel.locator("svg, canvas, table, .js-plotly-plot, li, .chip").first.wait_for(
                state="attached", timeout=90_000
            )
            assert panel.is_visible(), (i, src)
            assert frame.locator("header.topbar").count() == 0
        heights = pg.eval_on_selector_all(
            "iframe.gptscope-static", "fs => fs.map((f) => f.getBoundingClientRect().height)"
        )
        assert all(h > 120 for h in heights), heights  # each frame grew to its panel
    finally:
        ctx.close()
    assert not refused, refused
    assert not errors, errors


def _srcs(outputs: list[str]) -> list[str]:
    import re

    return [re.search(r'\bdata-src="([^"]+)"', o).group(1).replace("&amp;", "&") for o in outputs]
