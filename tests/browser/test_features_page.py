"""The SAE pages in a real headless Chromium: /features shows the shipped SAE's figures beside their
baselines, its feature list (searched by the server) and one feature's passages, histogram and
logit effects; the forward page's stage 11 lists the features at the selected position, and its
"steer with it" sets the generation stepper's feature, whose next step is then steered. Every
number drawn is the API's; nothing is logged as an error."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from apihelp import api_json

pytestmark = pytest.mark.browser

SAE = "L3-x8-topk32-s0"
PROMPT = "KING HENRY V:\nOnce more unto the breach, dear friends, once"


def test_the_features_page_draws_the_figures_the_list_and_a_feature(page, live_url):
    page.goto(f"{live_url}/features")
    page.wait_for_selector('#sae-panel[data-state="ready"]', state="attached")
    saes = api_json(page, live_url, "GET", "/saes")["saes"]
    q = next(s for s in saes if s["name"] == SAE)["quality"]
    table = page.inner_text("#sae-quality")
    assert f"{100 * q['fve']:.1f}%" in table and f"{100 * q['fve_pca_same_l0']:.1f}%" in table
    assert f"{q['loss_zero_ablation']:.3f}" in table and "dead features" in table
    page.wait_for_function("+document.getElementById('sae-loss-plot').dataset.drawn >= 1")
    bars = page.evaluate("Array.from(document.getElementById('sae-loss-plot').data[0].y)")
    assert bars == [q["loss_clean"], q["loss_sae"], q["loss_zero_ablation"]]
    page.wait_for_selector('#list-panel[data-rows="50"]', state="attached")
    first = api_json(page, live_url, "GET", f"/saes/{SAE}/features?limit=1")["features"][0]
    page.wait_for_selector(f'#feature-panel[data-feature="{first["index"]}"]', state="attached")
    # a search goes to the server; a click opens the feature
    page.fill("#feat-q", "Enter")
    hits = api_json(page, live_url, "GET", f"/saes/{SAE}/features?q=Enter&limit=50")
    page.wait_for_function(
        "(n) => document.getElementById('list-panel').dataset.rows === String(n)", arg=len(hits["features"])
    )
    pick = hits["features"][-1]["index"]
    page.click(f'#feat-table tr[data-feature="{pick}"]')
    page.wait_for_selector(f'#feature-panel[data-feature="{pick}"]', state="attached")
    detail = api_json(page, live_url, "GET", f"/saes/{SAE}/features/{pick}")
    assert page.locator("#feat-passages .passage").count() == len(detail["passages"])
    assert page.locator("#feat-passages .peak").count() == len(detail["passages"])
    peak_title = page.get_attribute("#feat-passages .passage .peak", "title")
    assert f"{detail['passages'][0]['activation']:.3f}" in peak_title
    page.wait_for_function("+document.getElementById('feat-hist-plot').dataset.drawn >= 1")
    counts = page.evaluate("Array.from(document.getElementById('feat-hist-plot').data[0].y)")
    assert counts == detail["histogram_counts"]
    assert detail["promoted"][0]["text"].strip() in page.inner_text("#feat-effects")
    assert f"steer_feature={pick}" in page.get_attribute("#feat-steer", "href")
    assert f"feature={pick}" in page.url and "q=Enter" in page.url
    assert page.console_errors == []


def test_stage_11_shows_the_features_at_the_position_and_steers_generation(page, live_url):
    page.goto(f"{live_url}/?{urlencode({'text': PROMPT, 'position': 3, 'stage': 'all'})}")
    page.wait_for_selector('#sae-features-panel[data-state="ready"]', state="attached")
    api = api_json(
        page, live_url, "POST", "/forward", data={"text": PROMPT, "include": ["sae_features"], "position": 3}
    )["sae_features"]
    page.locator("#sae-active-plot").scroll_into_view_if_needed()
    page.wait_for_function("+document.getElementById('sae-active-plot').dataset.drawn >= 1")
    xs = page.evaluate("Array.from(document.getElementById('sae-active-plot').data[0].x)")
    assert xs == [f["activation"] for f in api["features"]]
    l0 = page.evaluate("Array.from(document.getElementById('sae-l0-plot').data[0].y)")
    assert l0 == api["per_position_l0"]
    assert page.locator("#sae-active tbody tr").count() == len(api["features"])
    feature = api["features"][0]["index"]
    page.click(f'#sae-active button[data-feature="{feature}"]')
    assert page.input_value("#steer-feature") == str(feature)
    assert f"steer_feature={feature}" in page.url
    page.click("#gen-next")
    page.wait_for_selector('#generate-panel[data-steps="1"]', state="attached")
    assert page.locator("#gen-text .gen-tok.steered").count() == 1
    ids = page.evaluate("JSON.parse(document.getElementById('generate-panel').dataset.ids)")
    body = {"ids": ids[:-1], "step": 0, "seed": 0, "temperature": 1, "top": 10}
    steered = api_json(
        page, live_url, "POST", "/generate/step", data={**body, "steer": {"feature": feature, "scale": 20}}
    )
    assert steered["ids"] == ids
    assert page.console_errors == []


def test_one_feature_embeds_alone_as_the_notebook_shows_it(page, live_url):
    from gptscope import notebook

    assert notebook.PAGES["features"] == "/features"
    page.goto(f"{live_url}/features?{urlencode({'sae': SAE, 'feature': 408, 'embed': 'feature'})}")
    page.wait_for_selector('#feature-panel[data-feature="408"]', state="attached")
    assert page.locator("#feature-panel").is_visible() and not page.locator("#sae-panel").is_visible()
    assert page.locator("header.topbar").count() == 0 and page.locator("#feat-passages .passage").count() > 0
    assert page.console_errors == []


def test_the_probes_panel_draws_pasted_lines_against_both_baselines(page, live_url):
    lines = [
        f"{'sea' if i % 2 else 'land'},a line about the {w} number {i}" for i, w in enumerate(["ship", "field"] * 15)
    ]
    page.goto(f"{live_url}/features")
    page.wait_for_selector('#probes-panel[data-state="idle"]', state="attached")
    page.select_option("#probe-task", "paste")
    page.fill("#probe-paste", "\n".join(lines))
    page.click("#probe-run")
    page.wait_for_selector('#probes-panel[data-state="ready"]', state="attached", timeout=30_000)
    examples = [{"label": line.split(",", 1)[0], "text": line.split(",", 1)[1]} for line in lines]
    api = api_json(page, live_url, "POST", "/probes", data={"examples": examples})
    page.wait_for_function("+document.getElementById('probes-plot').dataset.drawn >= 1")
    ys = page.evaluate("document.getElementById('probes-plot').data.map((t) => Array.from(t.y))")
    assert ys[0] == [p["accuracy"] for p in api["layers"]]
    assert ys[1] == [p["control_accuracy"] for p in api["layers"]]
    assert ys[2] == [api["majority_baseline"]] * len(api["layers"])
    assert page.console_errors == []
