"""/patch in a real headless Chromium on the built-in model: the page opens on the shipped pair,
runs the whole sweep as a job (its progress shown), draws the layer × position maps and the head
grid from the job's answer, outlines the differing tokens, and a click on a cell shows that patched
run's distribution beside the clean and corrupted runs', with the numbers POST /api/v1/patch gives."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from apihelp import api_json
from exporting import layout_faults

pytestmark = pytest.mark.browser


def test_the_page_draws_a_real_sweep_and_a_click_shows_the_patched_distribution(page, live_url, screenshot):
    page.goto(f"{live_url}/patch")
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.locator("nav a[aria-current='page']").inner_text() == "Patching"
    assert page.locator("#pair").input_value() == "dead-caesar"
    assert page.locator("#clean-tokens .tok.differs").count() == 2
    assert page.locator("#corrupted-tokens .tok.differs").count() == 2
    assert page.evaluate("document.body.dataset.sweeps") == "resid_pre,attn_out,mlp_out,head"
    pairs = api_json(page, live_url, "GET", "/patch/pairs")
    p = pairs[0]
    pair = {k: p[k] for k in ("clean", "corrupted", "answer", "wrong")}
    want = api_json(page, live_url, "POST", "/patch", data=pair)
    z = page.evaluate("document.getElementById('resid-plot').data[0].z")
    assert z == want["sweeps"][0]["effect"]
    heads = page.evaluate("document.getElementById('head-plot').data[0].z")
    assert heads == want["sweeps"][3]["effect"]
    assert f"clean {want['clean_metric']:.3f}" in page.locator("#metric-stats").inner_text()
    # a click on head 5.2 (the page's own click handler, as Plotly calls it)
    page.evaluate("""() => { const gd = document.getElementById('head-plot');
        gd.emit('plotly_click', { points: [{ x: 2, y: 5 }] }); }""")
    page.wait_for_selector("body[data-cell='head:5:2']", timeout=30_000)
    page.wait_for_function(
        "document.getElementById('cell-plot').data && document.getElementById('cell-plot').data.length === 3"
    )
    bars = page.evaluate("document.getElementById('cell-plot').data.map(t => [t.name, t.y])")
    cell = {"kinds": [], "cell": {"kind": "head", "layer": 5, "head": 2}}
    detail = api_json(page, live_url, "POST", "/patch", data={**pair, **cell})
    assert bars == [[k, [t[k] for t in detail["detail"]["compared"]]] for k in ("clean", "corrupted", "patched")]
    assert "head 5.2 at every position" in page.locator("#cell-tag").inner_text()
    assert json.loads(page.locator("#cell-plot").get_attribute("data-cell")) == {
        "kind": "head",
        "layer": 5,
        "head": 2,
        "position": None,
    }
    q = parse_qs(urlsplit(page.url).query)
    assert q["cell"] == ["head:5:2"] and q["answer"] == [str(p["answer"])]
    # l moves the chosen cell one column on; the head set adds its positions sweep
    page.keyboard.press("l")
    page.wait_for_selector("body[data-cell='head:5:3']", timeout=30_000)
    page.locator("#add-head").click()
    page.wait_for_function("document.body.dataset.sweeps.endsWith('head_position')", timeout=60_000)
    hp = page.evaluate("document.getElementById('hp-plot').data[0].z")
    assert len(hp) == 1 and len(hp[0]) == 32
    assert page.locator(".dl-bar[data-for='resid-plot'] button").count() == 4  # PNG, SVG, JSON, HTML
    screenshot(page, "patch-page")
    assert layout_faults(page) == []
    assert not page.console_errors, page.console_errors
