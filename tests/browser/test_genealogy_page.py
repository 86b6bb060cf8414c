"""/genealogy in a real headless Chromium: one card per model of GET /api/v1/genealogy with its
counted and quoted sizes and its sources, LAMBADA against the counted parameters on a log axis,
weights and embedding share by generation, the NSP ablations as bars and tables, the worked
examples on the loss curve; every number drawn is the API's, and nothing is logged as an error."""

from __future__ import annotations

import pytest
from apihelp import api_json
from exporting import layout_faults

pytestmark = pytest.mark.browser


def traces(page, el_id: str) -> list[dict]:
    return page.evaluate(
        """(id) => { const gd = document.getElementById(id);
             return gd.data.map((t) => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []),
               yaxis: t.yaxis || "y"})); }""",
        el_id,
    )


def axis_type(page, el_id: str, axis: str) -> str:
    return page.evaluate("([id, a]) => document.getElementById(id)._fullLayout[a].type", [el_id, axis])


@pytest.fixture
def loaded(page, live_url):
    page.goto(f"{live_url}/genealogy")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.wait_for_selector('#worked-panel[data-ready="1"]', state="attached")
    return page, api_json(page, live_url, "GET", "/genealogy")


def test_cards_show_the_apis_models_sizes_and_sources(loaded):
    page, res = loaded
    keys = page.eval_on_selector_all("#tree .gen-card", "els => els.map((e) => e.dataset.key)")
    assert keys == [m["key"] for m in res["models"]]
    gpt1 = page.inner_text("#gen-gpt1")
    assert "116,414,976" in gpt1 and "26.7%" in gpt1 and "post-norm" in gpt1
    for m in res["models"]:
        card = page.locator(f"#gen-{m['key']}")
        seeds = card.locator(".gen-src").evaluate_all("els => els.map((e) => e.dataset.seed)")
        assert set(seeds) <= set(res["seeds"]) and seeds, m["key"]
        assert card.locator(".gen-changes li").count() == len(m["changes"])
        assert card.locator(".gen-facts li").count() == len(m["facts"])
        assert card.locator(".paper-value").count() == sum(not c["from_text"] for c in m["config"])
        text = card.inner_text()
        weights = f"{m['params']['weights_only']:,}"
        assert weights in text, (m["key"], weights)
    assert page.locator("#gen-gpt-2-small .gen-src[title^='Xiong']").count() >= 1
    # label smoothing's 0.1 is the Transformer's; Müller et al. only for their later finding
    smoothing = page.locator("#gen-transformer li[data-fact='label_smoothing'] .gen-src")
    assert smoothing.get_attribute("title").startswith("Vaswani")
    assert page.locator("#gen-transformer li[data-fact='label_smoothing_later'] .gen-src[title^='Müller']").count() == 1
    assert page.locator("#gen-transformer li[data-fact='tying_result'] .gen-src[title^='Press and Wolf']").count() == 1
    # the quoted total beside the count, and what the LAMBADA table shows, from the API's numbers
    assert "65,000,000" in page.inner_text("#gen-transformer .gen-params")
    s = res["lambada_summary"]
    assert f"{s['size_ratio']:.1f}×" in page.inner_text("#lambada-summary")
    assert page.console_errors == []


def test_plots_draw_the_apis_numbers(loaded, screenshot):
    page, res = loaded
    (lam,) = traces(page, "lambada-plot")
    assert lam["x"] == [p["params_counted"] for p in res["lambada"]]
    assert lam["y"] == [p["accuracy"] for p in res["lambada"]]
    assert axis_type(page, "lambada-plot", "xaxis") == "log"

    bars, share = traces(page, "params-plot")
    assert bars["x"] == [m["name"] for m in res["models"]] == share["x"]
    assert bars["y"] == [m["params"]["weights_only"] for m in res["models"]]
    assert share["y"] == [m["params"]["embedding_share"] for m in res["models"]] and share["yaxis"] == "y2"
    assert axis_type(page, "params-plot", "yaxis") == "log"

    w = res["worked"]
    nsp = traces(page, "nsp-plot")
    want = [r["values"] for t in res["tables"] for r in t["rows"]]
    assert [t["y"] for t in nsp] == want
    cells = page.eval_on_selector_all("#table-bert_nsp_ablation td", "els => els.map((e) => Number(e.textContent))")
    assert cells == [v for r in res["tables"][0]["rows"] for v in r["values"]]

    curve, marks, chosen = traces(page, "xent-plot")
    assert chosen["x"] == [w["chosen"]["p"]] and chosen["y"] == [w["chosen"]["loss"]]
    assert curve["x"] == w["curve_p"] and curve["y"] == w["curve_loss"]
    assert marks["x"] == [x["p"] for x in w["losses"]] and marks["y"] == [x["loss"] for x in w["losses"]]
    assert f"drop: {w['perplexity_drop']['drop']:.3f} nats" in page.inner_text("#worked-drop")
    assert "float32: 0" in page.inner_text("#worked-underflow")
    assert f"{w['layernorm']['normalised']:.3f}" in page.inner_text("#worked-layernorm")
    assert page.console_errors == []
    screenshot(page, "genealogy")


def test_worked_examples_are_redone_by_the_server(loaded, live_url):
    page, _ = loaded
    page.fill("#w-loss-p", "0.01")
    page.fill("#w-n", "30")
    # both edits answered: the plot's p and the text's n (ready alone may still be the first edit's answer,
    # while the second waits out the form's debounce)
    page.wait_for_function(
        "() => document.getElementById('xent-plot').data[2].x[0] === 0.01"
        " && document.getElementById('worked-underflow').textContent.includes('multiplied 30 times')"
        " && document.getElementById('worked-panel').dataset.ready === '1'"
    )
    w = api_json(page, live_url, "GET", "/genealogy/worked?n=30&loss_p=0.01")
    (chosen,) = [t for t in traces(page, "xent-plot") if t["name"] == "your p"]
    assert chosen["y"] == [w["chosen"]["loss"]]
    shown = page.inner_text("#worked-underflow")
    assert f"0.1 multiplied 30 times in float32: {w['underflow']['product_float32']!r}" in shown, shown
    page.fill("#w-perplexity", "0.5")  # below 1: refused, the field named
    page.wait_for_selector("#worked-panel[data-error]", state="attached")
    assert "perplexity" in page.inner_text("#error")
    page.fill("#w-perplexity", "18.4")
    page.wait_for_selector("#worked-panel:not([data-error])[data-ready='1']", state="attached")
    # the refused request is the only thing logged (Chromium reports the 422 it answered)
    assert all("status of 422" in e and "/genealogy/worked" in e for e in page.console_errors), page.console_errors


def test_every_other_number_of_the_texts_is_listed_with_its_source(loaded, live_url):
    """The texts panel writes GET /api/v1/genealogy/texts as it is: a row per number under its seed, the
    server's own value beside the text's, the redone examples and the papers."""
    page, _ = loaded
    page.wait_for_selector('#texts-panel[data-ready="1"]', state="attached")
    t = api_json(page, live_url, "GET", "/genealogy/texts")
    rows = page.eval_on_selector_all("#texts-facts tr[data-fact]", "rs => rs.map((r) => r.dataset.fact)")
    by_seed = [f["name"] for seed in t["seeds"] for f in t["facts"] if f["source"]["seed"] == seed]
    assert rows == by_seed
    per_block = page.inner_text("#texts-facts details[data-seed='gpt1-genealogy.txt'] tr[data-fact='per_block']")
    assert per_block.count("7,077,888") == 2  # the text's count and the server's, side by side
    assert ", ".join(map(str, t["gpt2_tokens"]["ids"])) in page.inner_text("#ex-gpt2")
    assert f"{t['sentence_tokens']['token_count']} tokens" in page.inner_text("#ex-sentence")
    assert page.locator("#texts-papers tr").count() == len(t["papers"]) + 1
    assert page.console_errors == []


@pytest.fixture
def history(page, live_url):
    page.goto(f"{live_url}/genealogy")
    for panel in ("perceptron", "mlp", "reach", "moe"):
        page.wait_for_selector(f'#{panel}-panel[data-ready="1"]', state="attached")
    return page


def test_the_history_panels_draw_the_apis_runs(history, live_url, screenshot):
    page = history
    p = api_json(page, live_url, "GET", "/genealogy/perceptron")
    cls0, cls1, line = traces(page, "perceptron-plot")
    x1 = [a for a, y in zip(p["points"]["x1"], p["points"]["label"]) if y == 0]
    assert cls0["x"] == x1 and len(cls0["x"]) + len(cls1["x"]) == len(p["points"]["label"])
    last = p["epochs"][-1]
    assert line["x"] == last["line_x1"] and line["y"] == last["line_x2"]
    assert "converged" in page.inner_text("#perceptron-panel") and p["converged"]
    # the slider draws an earlier epoch's served line
    page.eval_on_selector("#p-epoch", "el => { el.value = '1'; el.dispatchEvent(new Event('input')); }")
    page.wait_for_function("() => document.getElementById('p-epoch-out').textContent === '1'")
    line = traces(page, "perceptron-plot")[2]
    assert line["x"] == p["epochs"][0]["line_x1"] and line["y"] == p["epochs"][0]["line_x2"]
    bars = traces(page, "mistakes-plot")[0]
    assert bars["y"] == [e["mistakes"] for e in p["epochs"]]

    m = api_json(page, live_url, "GET", "/genealogy/mlp")
    heat = page.evaluate("() => document.getElementById('mlp-plot').data[0].z")
    assert heat == m["grid"]
    assert f"accuracy {m['accuracy']:.0%}" in page.evaluate(
        "() => document.getElementById('mlp-plot')._fullLayout.title.text"
    ).replace(".0%", "%")
    (loss,) = traces(page, "mlp-loss-plot")
    assert loss["x"] == m["steps"] and loss["y"] == m["loss"]

    r = api_json(page, live_url, "GET", "/genealogy/reach")
    assert [t["y"] for t in traces(page, "reach-plot")] == [c["relative"] for c in r["curves"]]
    moe = api_json(page, live_url, "GET", "/genealogy/moe")
    cap, comp = traces(page, "moe-plot")
    assert cap["y"] == [x["capacity_ratio"] for x in moe["rows"]] and comp["x"] == [x["experts"] for x in moe["rows"]]
    assert axis_type(page, "moe-plot", "xaxis") == "log" and axis_type(page, "moe-plot", "yaxis") == "log"
    assert page.console_errors == []
    page.locator("#history-h").scroll_into_view_if_needed()
    screenshot(page, "genealogy-history")
    # every figure of the page, the worked example's −ln p curve too (its "your p" at the texts' 0.9)
    page.wait_for_selector('#worked-panel[data-ready="1"]', state="attached")
    assert layout_faults(page) == []


def test_history_panels_rerun_at_new_settings(history, live_url):
    page = history
    page.select_option("#p-data", "xor")
    page.wait_for_function("() => document.getElementById('perceptron-plot')._fullLayout.title.text.startsWith('xor')")
    page.wait_for_selector('#perceptron-panel[data-ready="1"]', state="attached")
    assert "not converged" in page.evaluate("() => document.getElementById('perceptron-plot')._fullLayout.title.text")
    page.fill("#m-hidden", "1")
    page.wait_for_function("() => document.getElementById('mlp-plot')._fullLayout.title.text.includes('1 hidden')")
    m = api_json(page, live_url, "GET", "/genealogy/mlp?data=xor&hidden=1&steps=400&lr=0.05&seed=0")
    assert page.evaluate("() => document.getElementById('mlp-plot').data[0].z") == m["grid"]
    page.fill("#moe-k", "1")
    page.wait_for_function("() => document.querySelector('#moe-rows caption').textContent.endsWith('1 per token')")
    page.fill("#r-kernel", "1")  # below 2: refused, the field named
    page.wait_for_selector("#reach-panel[data-error]", state="attached")
    assert "kernel" in page.inner_text("#error")
    assert all("status of 422" in e and "/genealogy/reach" in e for e in page.console_errors), page.console_errors
