"""The learning page (/learn) in a real headless Chromium: every panel draws what its /api/v1
endpoint returns, an edited schedule parameter redraws the curve, the GELU markers sit where the
API puts them, a refused value names its field, the parameter counter takes today's block
(SwiGLU, grouped-query attention, experts) and the ravine draws Muon's path."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

PANELS = [
    "schedule-panel",
    "model-schedule-box",
    "gelu-panel",
    "loss-panel",
    "smoothing-panel",
    "softmax-panel",
    "sizes-panel",
    "kv-panel",
    "scaling-panel",
    "optimizers-panel",
    "init-panel",
    "dropout-panel",
    "adam-panel",
    "embscale-panel",
    "bert-panel",
    "shift-panel",
    "backprop-panel",
    "batch-panel",
]


def api(page, live_url: str, path: str) -> dict:
    resp = page.request.get(f"{live_url}/api/v1{path}")
    assert resp.ok, resp.text()
    return resp.json()


def traces(page, el_id: str) -> list[dict]:
    """The data of a Plotly plot as drawn: name, x, y of every trace."""
    return page.evaluate(
        """(id) => document.getElementById(id).data.map((t) => ({name: t.name, x: Array.from(t.x || []),
             y: Array.from(t.y || []), mode: t.mode || null}))""",
        el_id,
    )


def trace(page, el_id: str, name_start: str) -> dict:
    found = [t for t in traces(page, el_id) if (t["name"] or "").startswith(name_start)]
    assert found, f"no trace named {name_start!r} in #{el_id}: {[t['name'] for t in traces(page, el_id)]}"
    return found[0]


def wait_ready(page, panel: str) -> None:
    page.wait_for_selector(f'#{panel}[data-ready="1"]', state="attached")


def open_learn(page, live_url: str) -> None:
    page.goto(f"{live_url}/learn")
    for panel in PANELS:
        wait_ready(page, panel)


def edit(page, panel: str, selector: str, value: str) -> None:
    """Type a new value the way a reader does and wait until the panel has redrawn."""
    page.evaluate("(id) => { delete document.getElementById(id).dataset.ready; }", panel)
    page.fill(selector, value)
    wait_ready(page, panel)


def test_learn_page_draws_every_panel_from_the_api(page, live_url, screenshot):
    open_learn(page, live_url)
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Learning"
    assert not page.console_errors, page.console_errors
    assert not [u for u in page.requests if not u.startswith(live_url)], "the page must work offline"

    t = api(page, live_url, "/schedules/lr?kind=transformer")
    g = api(page, live_url, "/schedules/lr?kind=gpt1")
    drawn_t = trace(page, "schedule-plot", "Transformer")
    drawn_g = trace(page, "schedule-plot", "GPT-1")
    assert drawn_t["x"] == t["step"] and drawn_t["y"] == t["lr"]
    assert drawn_g["x"] == g["step"] and drawn_g["y"] == g["lr"]
    summary = page.inner_text("#schedule-summary")
    assert "6.99e-4 at step 4,000" in summary and "1.40e-4 by step 100,000" in summary
    assert "2.50e-4 at step 2,000" in summary

    m = api(page, live_url, "/schedules/lr?kind=model")
    assert trace(page, "model-schedule-plot", "rate the trainer set")["y"] == m["history"]["lr"]
    # the page states the API's own figure: 0 ("identical") for a run of fixed length; a time-budget
    # run (the built-in model) re-plans its length a third of the way in, so its early rates differ
    diff = m["history_max_abs_diff"]
    expected = "identical" if diff == 0 else f"{diff:.2e}".replace("e-0", "e-")  # as JavaScript writes it
    assert expected in page.inner_text("#model-schedule-summary")

    assert "1.386" in page.inner_text("#loss-summary")
    assert "Sum of all the gradients: 0" in page.inner_text("#grad-summary")
    assert "1.3769 nats" in page.inner_text("#smoothing-summary")
    assert "116,414,976" in page.inner_text("#params-table") and "26.7%" in page.inner_text("#params-table")
    assert "1,811,939,328" in page.inner_text("#presets-note")
    sm = page.inner_text("#softmax-summary")
    assert "d_k = 64" in sm and "variance 63.8" in sm
    assert "4 times smaller" in page.inner_text("#kv-summary")
    assert len([t for t in traces(page, "optimizers-plot") if t["mode"] == "lines+markers"]) == 5

    path = screenshot(page, "learn")
    assert path.exists() and path.stat().st_size > 50_000


def test_editing_a_schedule_parameter_redraws_the_curve(page, live_url):
    open_learn(page, live_url)
    before = trace(page, "schedule-plot", "Transformer")
    edit(page, "schedule-panel", "#t-warmup", "8000")
    after = trace(page, "schedule-plot", "Transformer")
    want = api(page, live_url, "/schedules/lr?kind=transformer&warmup=8000&total_steps=100000&d_model=512")
    assert after["y"] == want["lr"] and after["y"] != before["y"]
    assert max(after["y"]) == want["peak"]["lr"] and want["peak"]["step"] == 8000
    assert "at step 8,000" in page.inner_text("#schedule-summary")

    edit(page, "schedule-panel", "#g-max-lr", "0.0005")
    gpt1 = trace(page, "schedule-plot", "GPT-1")
    assert max(gpt1["y"]) == pytest.approx(5e-4)

    # keep these curves, edit again: the kept ones stay, dashed, beside the new ones
    page.click("#schedule-pin")
    wait_ready(page, "schedule-panel")
    edit(page, "schedule-panel", "#s-total", "50000")
    names = [t["name"] for t in traces(page, "schedule-plot")]
    assert sum(n.startswith("kept:") for n in names) == 2
    assert trace(page, "schedule-plot", "Transformer")["x"][-1] == 50_000
    assert trace(page, "schedule-plot", "kept: Transformer")["x"][-1] == 100_000

    # the model's own schedule: an edited max_lr moves the curve, the recorded dots stay
    m = api(page, live_url, "/schedules/lr?kind=model")
    edit(page, "model-schedule-box", "#m-max-lr", str(m["checkpoint_schedule"]["max_lr"] / 2))
    assert max(trace(page, "model-schedule-plot", "schedule")["y"]) == pytest.approx(
        m["checkpoint_schedule"]["max_lr"] / 2
    )
    assert trace(page, "model-schedule-plot", "rate the trainer set")["y"] == m["history"]["lr"]
    assert not page.console_errors, page.console_errors


def test_gelu_markers_sit_where_the_api_says(page, live_url):
    open_learn(page, live_url)
    b = api(page, live_url, "/curves/gelu")
    minimum = trace(page, "gelu-plot", "GELU minimum")
    assert minimum["x"] == [b["minimum"]["x"]] and minimum["y"] == [b["minimum"]["y"]]
    assert minimum["x"][0] == pytest.approx(-0.752, abs=1e-3) and minimum["y"][0] == pytest.approx(-0.170, abs=1e-3)
    slope = trace(page, "gelu-grad-plot", "GELU slope at x = -1")
    assert slope["x"] == [-1.0] and slope["y"][0] == pytest.approx(-0.083, abs=1e-3)
    notes = page.evaluate("() => document.getElementById('gelu-plot').layout.annotations.map((a) => a.text)")
    assert any("-0.170" in n and "-0.752" in n for n in notes)
    assert "-0.0833" in page.inner_text("#gelu-summary")

    edit(page, "gelu-panel", "#gelu-xmin", "-2")
    assert trace(page, "gelu-plot", "GELU = x")["x"][0] == -2.0


def test_a_refused_value_names_its_field_and_clears_when_fixed(page, live_url):
    open_learn(page, live_url)
    page.fill("#kv-kvheads", "5")
    page.wait_for_selector("#kv-panel[data-error]", state="attached")
    box = page.locator("#error")
    assert box.is_visible() and "n_kv_head" in box.inner_text()
    edit(page, "kv-panel", "#kv-kvheads", "16")
    assert not box.is_visible()
    assert "2 query heads sharing each" in page.inner_text("#kv-summary")


def int_text(n: int) -> str:
    """A whole number as the page writes it (lib/format.js int): 1,234,567."""
    return f"{n:,}"


def test_the_parameter_counter_takes_todays_block(page, live_url):
    open_learn(page, live_url)
    # the KV-cache panel says what its key/value heads field is: grouped-query attention
    assert "grouped-query attention" in page.inner_text("#kv-panel h2").lower()
    assert page.is_visible("#kv-kvheads") and "grouped-query" in page.inner_text("label:has(#kv-kvheads)")
    assert trace(page, "kv-plot", "grouped-query: 8 key/value heads")

    page.select_option("#params-mlp", "swiglu")
    wait_ready(page, "sizes-panel")
    with page.expect_request(lambda r: "/api/v1/params?" in r.url and "n_kv_head=2" in r.url) as sent:
        edit(page, "sizes-panel", "#params-kv", "2")
    assert "mlp=swiglu" in sent.value.url and "preset=gpt1" in sent.value.url
    wait_ready(page, "sizes-panel")
    b = api(page, live_url, "/params?preset=gpt1&mlp=swiglu&n_kv_head=2")
    assert b["config"]["mlp"] == "swiglu" and b["config"]["n_kv_head"] == 2
    # the page shows the API's own total, not GPT-1's
    assert page.get_attribute("#sizes-panel", "data-total") == str(b["counts"]["total"])
    every = page.locator("#params-table tr", has_text="Every parameter").inner_text()
    assert int_text(b["counts"]["total"]) in every
    assert int_text(b["counts"]["total"]) != int_text(api(page, live_url, "/params?preset=gpt1")["counts"]["total"])
    assert "12 / 2" in page.inner_text("#params-table") and "grouped-query" in page.inner_text("#params-table")
    # every part the API names, with its count, in the table and in the chart's legend
    rows = page.eval_on_selector_all(
        "#params-parts tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [(r[0], r[1]) for r in rows] == [(p["label"], int_text(p["count"])) for p in b["parts"]]
    assert any("SwiGLU" in p["label"] for p in b["parts"]) and any("n_kv_head" in p["label"] for p in b["parts"])
    assert [t["name"] for t in traces(page, "params-plot")] == [p["label"] for p in b["parts"]]
    assert "(edited)" in page.inner_text("#params-summary")

    # experts: the counter follows the API again
    page.evaluate("() => { delete document.getElementById('sizes-panel').dataset.ready; }")
    page.fill("#params-experts", "4")
    page.fill("#params-top-k", "2")
    page.wait_for_function(
        "(n) => document.getElementById('sizes-panel').dataset.total === n",
        arg=str(
            api(page, live_url, "/params?preset=gpt1&mlp=swiglu&n_kv_head=2&n_expert=4&top_k_experts=2")["counts"][
                "total"
            ]
        ),
    )
    assert "routed to 2" in page.inner_text("#params-table")
    # a new preset starts from its own block again
    page.select_option("#params-preset", "llama-style")
    page.wait_for_function(
        "(n) => document.getElementById('sizes-panel').dataset.total === n",
        arg=str(api(page, live_url, "/params?preset=llama-style")["counts"]["total"]),
    )
    assert page.input_value("#params-mlp") == "" and page.input_value("#params-kv") == ""
    assert page.locator("#params-mlp option").first.inner_text() == "preset: swiglu"
    assert not page.console_errors, page.console_errors


def test_the_ravine_draws_muon_beside_the_other_four(page, live_url):
    open_learn(page, live_url)
    b = api(page, live_url, "/curves/optimizers")
    assert len(b["paths"]) == 5
    drawn = [t for t in traces(page, "optimizers-plot") if t["mode"] == "lines+markers"]
    assert [t["name"] for t in drawn] == [p["label"] for p in b["paths"]]
    muon = next(p for p in b["paths"] if p["name"] == "muon")
    mine = trace(page, "optimizers-plot", muon["label"])
    assert mine["x"] == muon["x"] and mine["y"] == muon["y"]
    # its own colour and a legend entry, in both charts
    style = page.evaluate(
        """(name) => { const t = document.getElementById('optimizers-plot').data.find((d) => d.name === name);
        return { color: t.line.color, legend: t.showlegend !== false }; }""",
        muon["label"],
    )
    others = page.evaluate(
        "() => document.getElementById('optimizers-plot').data.filter((d) => d.mode === 'lines+markers').map((d) => d.line.color)"
    )
    assert style["legend"] and style["color"] and others.count(style["color"]) == 1
    assert trace(page, "optimizers-loss-plot", muon["label"])["y"] == muon["loss"]
    caption = page.inner_text("#optimizers-panel .caption")
    assert "Muon" in caption and "orthogonal" in caption and "diagonal" in caption
    assert f"{muon['label']} (lr {muon['hyper']['lr']}, momentum {muon['hyper']['momentum']})" in page.inner_text(
        "#optimizers-summary"
    )

    # Muon's own field is sent: a smaller step moves its path
    edit(page, "optimizers-panel", "#opt-lr-muon", "0.1")
    slow = next(p for p in api(page, live_url, "/curves/optimizers?lr_muon=0.1")["paths"] if p["name"] == "muon")
    assert slow["x"] != muon["x"]
    assert trace(page, "optimizers-plot", muon["label"])["x"] == slow["x"]
    assert "Muon (lr 0.1," in page.inner_text("#optimizers-summary")
    assert not page.console_errors, page.console_errors


def test_the_training_lessons_draw_what_the_api_returns(page, live_url):
    """Initialisation, dropout, Adam, the embedding scale, BERT vs GPT, teacher forcing, the gradient at a
    head, tokens per update and the encoder-decoder count: each panel draws its endpoint's numbers."""
    open_learn(page, live_url)
    init = api(page, live_url, "/curves/initialisation?width=768&rows=128&seed=0")
    gpt1 = init["schemes"][0]
    assert trace(page, "init-plot", f"{gpt1['label']}: N(0")["y"] == gpt1["density_formula"]
    table = page.inner_text("#init-table")
    assert "0.020" in table and "0.036" in table and "0.051" in table and "± 3.6 σ" in table
    summary = page.inner_text("#init-summary")
    assert "0.307" in summary and "0.554" in summary

    d = api(page, live_url, "/curves/dropout?p=0.2&size=16&seed=0")
    assert trace(page, "dropout-plot", "after dropout")["y"] == d["out"]
    assert trace(page, "dropout-avg-plot", "mean of")["y"] == d["average_rescaled"]
    assert "1/(1 − p) = 1.2500" in page.inner_text("#dropout-summary")

    a = api(page, live_url, "/curves/adam?beta1=0.9&beta2=0.999&eps=1e-8")
    assert trace(page, "adam-memory-plot", "second moment")["y"] == a["weights_beta2"]
    assert trace(page, "adam-bias-plot", "step without correction")["y"] == a["step_uncorrected"]
    assert "about 1,000" in page.inner_text("#adam-summary")
    assert "1e-8" in page.inner_text("#adam-table") and "50 steps" in page.inner_text("#adam-table")

    e = api(page, live_url, "/curves/embedding-scale?d_model=512")
    assert trace(page, "embscale-plot", "sinusoidal")["y"] == e["position_norms"]
    assert "√d = 22.6" in page.inner_text("#embscale-summary") and "√(d/2) = 16.0" in page.inner_text(
        "#embscale-summary"
    )

    text = "Once more unto the breach, dear friends, once more"
    m = api(page, live_url, f"/curves/masked-lm?text={text}&rate=0.15&seed=0")
    z = page.evaluate("() => document.getElementById('bert-causal-plot').data[0].z")
    assert z == [[int(v) for v in row] for row in m["causal"]]
    assert page.locator("#bert-table tbody tr.picked").count() == m["picked"]
    assert f"{100 * m['shares']['mask']:.1f}% become [MASK]" in page.inner_text("#bert-summary")
    assert m["shares"]["mask"] == pytest.approx(0.8, abs=0.01)

    t = api(page, live_url, f"/curves/teacher-forcing?text={text}")
    assert trace(page, "shift-plot", "−ln p(target)")["y"] == t["loss"]
    assert f"{t['predictions']} next-token problems" in page.inner_text("#shift-summary")

    g = api(page, live_url, f"/curves/head-gradients?text={text}&layer=0&head=0")
    drawn = page.evaluate("() => document.getElementById('backprop-norms-plot').data[0].z")
    assert drawn == [[n["total"] for n in row] for row in g["norms"]]
    assert "matches G Vᵀ" in page.inner_text("#backprop-summary")

    b = api(page, live_url, "/curves/tokens-per-update")
    assert "64 × 512 = 32,768 predictions per update" in page.inner_text("#batch-summary")
    assert trace(page, "batch-plot", "predictions")["x"] == [
        b["per_update"],
        b["labelled_examples"],
        b["total_predictions"],
    ]
    assert "524,288" in page.inner_text("#batch-table") and "524,288" in page.inner_text("#presets-table")

    page.select_option("#params-preset", "transformer-base")
    ed = api(page, live_url, "/params?preset=transformer-base")["encoder_decoder"]
    page.wait_for_function(
        "(n) => document.getElementById('sizes-panel').dataset.total === n", arg=str(ed["tied_total"])
    )
    note = page.inner_text("#params-encdec")
    assert f"{ed['untied_total']:,}" in note and f"{ed['difference']:,}" in note
    assert not page.console_errors, page.console_errors
