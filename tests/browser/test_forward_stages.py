"""The forward-pass page's twelve stages in a real headless Chromium: keyboard walk, model view ->
large head, sampling sliders, generation stepper replayed against the API, interventions,
the decomposition self-check, downloads and the URL. Every number checked against the API."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from exporting import layout_faults

pytestmark = pytest.mark.browser

PROMPT = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?"
STAGES = [
    "tokens-panel",
    "embedding-space-panel",
    "block-panel",
    "attention-panel",
    "mlp-panel",
    "residual-panel",
    "next-panel",
    "generate-panel",
    "intervene-panel",
    "decomposition-panel",
    "inputs-panel",
    "sae-features-panel",
]
# the plots each stage draws (the lazy drawing queue draws them when the stage comes near)
STAGE_PLOTS = {
    "tokens-panel": ["emb-token-plot", "emb-pos-plot", "emb-sum-plot"],
    "embedding-space-panel": ["proj-plot", "pos-learned-plot", "pos-sin-plot"],
    "block-panel": [
        "ln-plot",
        "qkv-plot",
        "scores-plot",
        "masked-plot",
        "pattern-plot",
        "z-plot",
        "result-plot",
        "resid-add-plot",
    ],
    "attention-panel": ["model-view-plot", "query-bars-plot"],
    "mlp-panel": ["mlp-hist-plot", "mlp-top-plot"],
    "residual-panel": ["resid-norm-plot", "lens-plot", "lens-kl-plot"],
    "next-panel": ["sampling-plot", "loss-plot"],
    "intervene-panel": ["iv-plot"],
    "decomposition-panel": ["dc-plot"],
    "sae-features-panel": ["sae-active-plot", "sae-l0-plot"],
}


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def square(rows: list[list]) -> list[list]:
    """A causal model's attention rows from the API (row q stops at key q) as the T x T map the
    page draws: the masked cells are empty (null)."""
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def stage_shot(page, stage_id: str, name: str) -> Path:
    """A screenshot of one stage (the page is long; plots far from the viewport are drawn lazily)."""
    for plot in STAGE_PLOTS.get(stage_id, []):
        drawn(page, plot)
    ARTIFACTS.mkdir(exist_ok=True)
    box = page.evaluate(
        "(id) => { const r = document.getElementById(id).getBoundingClientRect();"
        " return { x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height }; }",
        stage_id,
    )
    path = ARTIFACTS / f"{name}.png"
    page.evaluate(
        "document.getElementById('selection-bar').style.visibility = 'hidden'"
    )  # sticky: it would cover the stage
    page.screenshot(path=str(path), full_page=True, clip=box)
    page.evaluate("document.getElementById('selection-bar').style.visibility = ''")
    return path


def visible(text: str) -> str:
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def api(page, live_url: str, path: str, body: dict | None = None) -> dict:
    resp = (
        page.request.post(f"{live_url}/api/v1{path}", data=body)
        if body is not None
        else page.request.get(f"{live_url}/api/v1{path}")
    )
    assert resp.ok, resp.text()
    return resp.json()


def open_page(page, live_url: str, params: dict | None = None) -> None:
    page.goto(f"{live_url}/?{urlencode(params or {'text': PROMPT})}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.evaluate("document.activeElement && document.activeElement.blur()")


def drawn(page, plot_id: str, at_least: int = 1) -> None:
    """Wait until the plot is drawn; plots far from the viewport wait for the reader, so scroll to it."""
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    try:
        page.wait_for_function(
            "([id, n]) => +(document.getElementById(id).dataset.drawn || 0) >= n", arg=[plot_id, at_least]
        )
    except Exception as exc:
        state = page.evaluate(
            "(id) => ({drawn: document.getElementById(id).dataset.drawn, body: {...document.body.dataset},"
            " top: document.getElementById(id).getBoundingClientRect().top, h: innerHeight})",
            plot_id,
        )
        raise AssertionError(f"#{plot_id} was not drawn: {state}; console: {page.console_errors}") from exc


def draws(page, plot_id: str) -> int:
    return page.evaluate("(id) => +(document.getElementById(id).dataset.drawn || 0)", plot_id)


def plot_data(page, plot_id: str) -> list[dict]:
    return page.evaluate(
        "(id) => document.getElementById(id).data.map(t => ({type: t.type, name: t.name, x: t.x, y: t.y, z: t.z}))",
        plot_id,
    )


def by_name(traces: list[dict]) -> dict[str, dict]:
    return {t["name"]: t for t in traces}


def go_stage(page, n: int) -> None:
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("0" if n == 10 else str(n))
    page.wait_for_function("(n) => document.body.dataset.stage === String(n)", arg=n)
    for plot in STAGE_PLOTS.get(STAGES[n - 1], []):
        drawn(page, plot)


def test_keyboard_walks_the_twelve_stages_and_every_plot_gets_drawn(page, live_url, screenshot):
    open_page(page, live_url, {"text": PROMPT, "stage": "all"})  # every stage, one after the other
    help_text = page.text_content("#key-help")
    assert "j" in help_text and "k" in help_text and "next/previous stage" in help_text
    for i, sid in enumerate(STAGES, start=1):
        page.keyboard.press("j")
        page.wait_for_function("(id) => document.activeElement && document.activeElement.id === id", arg=sid)
        assert page.evaluate("document.body.dataset.stage") == str(i)
        assert page.get_attribute(f'#stage-nav a[data-stage="{i}"]', "aria-current") == "step"
        # the stage is on screen, just under the sticky bar (and stays there while the panels near it draw)
        page.wait_for_function(
            """(id) => { const top = document.getElementById(id).getBoundingClientRect().top;
            const bar = document.getElementById('selection-bar').getBoundingClientRect().bottom;
            return (0 <= top && top <= bar + 40) || innerHeight + scrollY >= document.body.scrollHeight - 2; }""",
            arg=sid,
            timeout=5_000,
        )
        for plot in STAGE_PLOTS.get(sid, []):
            drawn(page, plot)
    page.keyboard.press("j")  # past the last stage: stays there
    assert page.evaluate("document.activeElement.id") == STAGES[-1]
    page.keyboard.press("k")
    page.wait_for_function("document.activeElement.id === 'inputs-panel'")
    page.keyboard.press("3")
    page.wait_for_function("document.activeElement.id === 'block-panel'")
    # typing in the prompt never moves between stages
    page.focus("#prompt")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == "prompt"
    page.evaluate("document.activeElement.blur()")
    page.wait_for_selector('body[data-drawn="1"]', state="attached")
    screenshot(page, "forward-stages-all")
    assert page.locator("#mlp-hist-plot.js-plotly-plot").count() == 1 and layout_faults(page) == []
    assert page.console_errors == []


def shown_stages(page) -> list[str]:
    return page.eval_on_selector_all("section.stage", "ss => ss.filter((s) => s.checkVisibility()).map((s) => s.id)")


def test_the_keys_open_one_stage_at_a_time_under_the_overview(page, live_url):
    """Without ?stage=all the page shows one stage at a time: j / k and the digits open the next, the
    previous or that stage alone (and name it in the URL), Esc goes back to the overview."""
    open_page(page, live_url)
    assert shown_stages(page) == []

    def opened(key: str, i: int) -> None:
        sid = STAGES[i - 1]
        page.keyboard.press(key)
        page.wait_for_function("(id) => document.activeElement && document.activeElement.id === id", arg=sid)
        assert shown_stages(page) == [sid], key
        assert query_of(page.url)["stage"] == sid.removesuffix("-panel")
        assert page.evaluate("document.body.dataset.stage") == str(i)
        assert page.get_attribute(f'#stage-nav a[data-stage="{i}"]', "aria-current") == "step"
        # the stage is on screen, just under the sticky bar (or the page scrolled to its end)
        page.wait_for_function(
            """(id) => { const top = document.getElementById(id).getBoundingClientRect().top;
            const bar = document.getElementById('selection-bar').getBoundingClientRect().bottom;
            const end = document.scrollingElement.scrollHeight - innerHeight;
            return (0 <= top && top <= bar + 40) || scrollY >= end - 2; }""",
            arg=sid,
            timeout=5_000,
        )

    for i in (1, 2, 3):
        opened("j", i)
    opened("0", 10)
    opened("j", 11)
    opened("j", 12)
    opened("j", 12)  # past the last stage: stays there
    opened("k", 11)
    opened("3", 3)
    # Esc: back to the overview, no stage open, none in the URL
    page.keyboard.press("Escape")
    page.wait_for_function("document.body.dataset.openStage === ''")
    assert shown_stages(page) == [] and "stage" not in query_of(page.url)
    assert page.evaluate("document.getElementById('overview-svg').getBoundingClientRect().bottom") <= 900
    # typing in the prompt never opens a stage
    page.focus("#prompt")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == "prompt" and shown_stages(page) == []
    assert page.console_errors == []


def test_stage_data_matches_the_api(page, live_url):
    open_page(page, live_url)
    full = api(
        page,
        live_url,
        "/forward",
        {
            "text": PROMPT,
            "include": ["embeddings", "layernorm", "head_detail", "mlp", "residual", "logit_lens", "prompt_loss"],
        },
    )
    T = len(full["tokens"])
    labels = [visible(t["text"]) for t in full["tokens"]]
    go_stage(page, 1)
    emb = plot_data(page, "emb-sum-plot")[0]
    assert emb["z"] == full["embeddings"]["sum"]
    assert f"T</b> = {T} tokens" in page.inner_html("#emb-shapes")
    go_stage(page, 3)
    hd = full["head_detail"]
    assert plot_data(page, "pattern-plot")[0]["z"] == hd["pattern"]
    masked = plot_data(page, "masked-plot")[0]["z"]
    assert masked == hd["masked_scores"] and masked[0][1] is None  # −∞ above the diagonal
    assert [t["z"] for t in plot_data(page, "qkv-plot")] == [hd["q"], hd["k"], hd["v"]]
    assert plot_data(page, "resid-add-plot")[0]["z"] == [hd["resid_pre"], hd["attn_out"], hd["resid_mid"]]
    # LayerNorm: pick feature 5 and read the worked numbers
    page.fill("#ln-feature", "5")
    page.press("#ln-feature", "Enter")
    page.wait_for_function("document.getElementById('step-ln').dataset.feature === '5'")
    table = page.inner_text("#ln-table")
    ln = full["layernorm"]
    for v in (ln["input"][5], ln["normalized"][5], ln["gain"][5], ln["output"][5]):
        assert f"{v:.5f}" in table
    assert query_of(page.url)["feature"] == "5"
    go_stage(page, 5)
    hist = plot_data(page, "mlp-hist-plot")
    assert hist[0]["x"] == full["mlp"]["layers"][0]["histogram"]["edges"]
    assert hist[1]["x"] == full["mlp"]["curve_x"] and hist[1]["y"] == full["mlp"]["curve_y"]
    top = plot_data(page, "mlp-top-plot")[0]
    assert list(reversed(top["x"])) == [n["post"] for n in full["mlp"]["top_neurons"]]
    go_stage(page, 6)
    assert plot_data(page, "resid-norm-plot")[0]["z"] == full["residual"]["norms"]
    assert plot_data(page, "lens-plot")[0]["z"] == full["logit_lens"]["actual_next_prob"]
    go_stage(page, 7)
    loss = plot_data(page, "loss-plot")
    assert loss[0]["y"] == [p["prob"] for p in full["prompt_loss"]["positions"]]
    stats = page.inner_text("#loss-stats")
    assert f"{full['prompt_loss']['perplexity']:.2f}" in stats and f"{full['prompt_loss']['mean_loss']:.3f}" in stats
    assert len(labels) == T
    assert page.console_errors == []


def test_model_view_click_opens_that_head(page, live_url):
    open_page(page, live_url)
    go_stage(page, 4)
    info = page.request.get(f"{live_url}/api/v1/health").json()["info"]
    assert (
        page.evaluate("document.getElementById('model-view-plot').dataset.grid")
        == f"{info['n_layer']}x{info['n_head']}"
    )
    layer, head = 2, 1
    cell = f"#model-view-plot canvas[data-row='{layer}'][data-col='{head}']"  # the small maps are canvases
    page.locator(cell).scroll_into_view_if_needed()
    page.wait_for_function("(sel) => document.querySelector(sel).dataset.painted === '1'", arg=cell)
    box = page.locator(cell).bounding_box()
    assert 0 < box["y"] < 900
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        page.mouse.click(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.8)
    sent = resp.value.request.post_data_json
    assert sent["layer"] == layer and sent["head"] == head
    assert sorted(sent["include"]) == ["head_detail", "layernorm", "mlp"]  # only what the selection changes
    assert page.input_value("#layer") == str(layer) and page.input_value("#head") == str(head)
    page.wait_for_function(
        "(t) => document.getElementById('attention-plot').layout.title.text.toLowerCase() === t",
        arg=f"layer {layer}, head {head}",
    )
    assert page.evaluate("document.getElementById('model-view-plot').dataset.selected") == f"{layer}.{head}"
    q = query_of(page.url)
    assert q["layer"] == str(layer) and q["head"] == str(head)
    api_trace = api(
        page,
        live_url,
        "/forward",
        {"text": PROMPT, "include": ["attention", "head_detail"], "layer": layer, "head": head},
    )
    big = plot_data(page, "attention-plot")[0]["z"]
    assert big == square(api_trace["attention"]["pattern"][layer][head])
    page.wait_for_function(
        "(v) => document.getElementById('block-panel').dataset.head === v",
        arg=f"{layer}.{head}.{len(api_trace['tokens']) - 1}",
    )
    # head view: one line per weight above the drawing threshold, the selected query's bars = its row
    T = len(api_trace["tokens"])
    row = api_trace["attention"]["pattern"][layer][head][T - 1]
    drawn(page, "query-bars-plot")
    page.wait_for_function(
        "(t) => document.getElementById('query-bars-plot').layout.title.text.includes(t)",
        arg=f"layer {layer}, head {head}",
    )
    assert plot_data(page, "query-bars-plot")[0]["x"] == row[:T]
    assert int(page.get_attribute("#head-view", "data-lines")) > T
    # clicking a token in the head view selects that position everywhere
    page.click("#head-view text.hv-tok[data-index='2']")
    page.wait_for_function("document.getElementById('position').value === '2'")
    assert query_of(page.url)["position"] == "2"
    page.wait_for_function(
        "document.querySelector('#tokens .tok.sel') && document.querySelector('#tokens .tok.sel').dataset.index === '2'"
    )
    stage_shot(page, "attention-panel", "forward-model-view-head")
    assert page.console_errors == []


def slider_x(page, sel: str, value: float) -> tuple[float, float]:
    box = page.locator(sel).bounding_box()
    lo, hi = (float(page.get_attribute(sel, a)) for a in ("min", "max"))
    thumb = 8  # Chromium's range thumb is ~16 px wide: its centre travels between 8 px from each end
    return box["x"] + thumb + (box["width"] - 2 * thumb) * (value - lo) / (hi - lo), box["y"] + box["height"] / 2


def test_temperature_and_filters_reshape_the_distribution(page, live_url):
    open_page(page, live_url)
    go_stage(page, 7)
    page.wait_for_function("document.getElementById('sampling-plot').dataset.state === 'ready'")
    before = plot_data(page, "sampling-plot")
    base = api(page, live_url, "/next-token", {"text": PROMPT, "temperature": 1, "show": 20})
    assert before[1]["y"] == [c["p_temperature"] for c in base["candidates"]]
    # every /next-token request from here on, by its `show`: 20 is this stage's, 8 the overview's
    shown = []
    page.on("request", lambda r: r.url.endswith("/api/v1/next-token") and shown.append(json.loads(r.post_data)["show"]))
    # the time of each input event, taken after the page's own handler has (re)armed its debounce
    page.evaluate(
        "window.inputTimes = [];"
        " document.getElementById('temperature').addEventListener('input', () => window.inputTimes.push(performance.now()))"
    )

    # drag the temperature thumb from 1.0 down towards 0.4 in many small moves
    page.locator("#temperature").scroll_into_view_if_needed()
    x0, y0 = slider_x(page, "#temperature", 1.0)
    x1, _ = slider_x(page, "#temperature", 0.4)
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x1, y0, steps=12)
    page.mouse.up()
    t = float(page.input_value("#temperature"))
    assert 0.2 <= t <= 0.6
    page.wait_for_function(
        "(t) => { const s = document.getElementById('sampling-plot').dataset.settings;"
        " return s && JSON.parse(s).temperature === t && document.getElementById('sampling-plot').dataset.state === 'ready'; }",
        arg=t,
    )
    # Debounced: a panel asks only once the moves pause for its delay (120 ms here, 60 ms in the overview),
    # so a drag asks once at its end plus once per pause that long. A loaded machine makes pauses; count them.
    times = page.evaluate("window.inputTimes")
    gaps = [b - a for a, b in pairwise(times)]
    stage, overview = shown.count(20), shown.count(8)
    assert len(times) >= 3 and stage + overview == len(shown)
    assert 1 <= stage <= 1 + sum(g >= 100 for g in gaps), f"{stage} requests for {len(times)} moves, gaps {gaps}"
    assert overview <= 1 + sum(g >= 40 for g in gaps), f"{overview} overview requests, gaps {gaps}"
    after = plot_data(page, "sampling-plot")
    cooled = api(page, live_url, "/next-token", {"text": PROMPT, "temperature": t, "show": 20})
    assert after[1]["y"] == [c["p_temperature"] for c in cooled["candidates"]]
    assert after[0]["y"] == before[0]["y"]  # the raw softmax does not move
    assert after[1]["y"][0] > before[1]["y"][0]  # cooler: the favourite gains
    assert query_of(page.url)["temperature"] == str(t)
    assert page.text_content("#temperature-out") == f"{t:.2f}"

    # top-k = 3 with the keyboard: only three survive, renormalised
    page.focus("#top-k")
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => { const s = document.getElementById('sampling-plot').dataset.settings;"
        " return s && JSON.parse(s).top_k === 3 && document.getElementById('sampling-plot').dataset.state === 'ready'; }"
    )
    filt = api(page, live_url, "/next-token", {"text": PROMPT, "temperature": t, "top_k": 3, "show": 20})
    final = plot_data(page, "sampling-plot")[2]["y"]
    assert final == [c["p_final"] for c in filt["candidates"]]
    assert sum(1 for c in filt["candidates"] if c["kept"]) == 3 == filt["n_kept"]
    assert sum(1 for p in final if p > 0) <= 3  # a kept token may still round to 0 at a low temperature
    assert f"{filt['n_kept']:,}" in page.inner_text("#sampling-stats")
    assert query_of(page.url)["top_k"] == "3"

    # top-p = 0.50 as well: what top-k kept may now be cut by top-p; the labels say which filter removed what
    page.focus("#top-p")
    for _ in range(50):
        page.keyboard.press("ArrowLeft")
    assert page.input_value("#top-p") == "0.5"
    page.wait_for_function(
        "() => { const s = document.getElementById('sampling-plot').dataset.settings;"
        " return s && JSON.parse(s).top_p === 0.5 && document.getElementById('sampling-plot').dataset.state === 'ready'; }"
    )
    both = api(page, live_url, "/next-token", {"text": PROMPT, "temperature": t, "top_k": 3, "top_p": 0.5, "show": 20})
    assert plot_data(page, "sampling-plot")[2]["y"] == [c["p_final"] for c in both["candidates"]]
    ticks = page.evaluate("document.getElementById('sampling-plot').layout.xaxis.ticktext")
    for tick, c in zip(ticks, both["candidates"]):
        assert tick.startswith("✗p ") == (c["in_top_k"] and not c["kept"])
        assert tick.startswith("✗k ") == (not c["in_top_k"])
    assert query_of(page.url)["top_p"] == "0.5"
    stage_shot(page, "next-panel", "forward-sampling")
    assert page.console_errors == []


def test_generation_stepper_equals_the_api_replayed_with_the_same_seed(page, live_url):
    open_page(page, live_url)
    go_stage(page, 8)
    page.fill("#seed", "7")
    page.press("#seed", "Tab")
    page.wait_for_function("new URLSearchParams(location.search).get('seed') === '7'")
    prompt_ids = [t["id"] for t in api(page, live_url, "/forward", {"text": PROMPT, "include": []})["tokens"]]
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == prompt_ids
    for i in range(1, 4):
        page.click("#gen-next")
        page.wait_for_function("(n) => document.getElementById('generate-panel').dataset.steps === String(n)", arg=i)
        page.wait_for_function("!document.getElementById('gen-next').disabled")
    ids = json.loads(page.get_attribute("#generate-panel", "data-ids"))
    assert query_of(page.url)["steps"] == "3"

    replay, cur = [], prompt_ids
    for step in range(3):
        r = api(
            page,
            live_url,
            "/generate/step",
            {"ids": cur, "step": step, "seed": 7, "temperature": 1.0, "top_k": None, "top_p": None, "top": 10},
        )
        replay.append(r)
        cur = r["ids"]
    assert ids == cur
    shown = page.eval_on_selector_all("#gen-text .gen-tok", "els => els.map(e => +e.dataset.id)")
    assert shown == [r["token"]["id"] for r in replay]
    assert page.text_content("#gen-step") == "3"
    rows = page.eval_on_selector_all(
        "#gen-steps tbody tr", "rs => rs.map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    assert [row[2] for row in rows] == [str(r["token"]["id"]) for r in replay]
    assert [row[3] for row in rows] == [f"{100 * r['prob']:.2f}%" for r in replay]
    cache = page.inner_text("#gen-cache")
    assert f"{replay[-1]['cache']['numbers']:,}" in cache and f"{replay[-1]['cache']['positions']} positions" in cache
    attn = plot_data(page, "gen-attn-plot")[0]["z"]
    assert attn == [w for layer in replay[-1]["attention"] for w in layer]
    stage_shot(page, "generate-panel", "forward-generation")

    # step back pops the last token; stepping again draws the same token (same seed, same step)
    page.click("#gen-back")
    page.wait_for_function("document.getElementById('generate-panel').dataset.steps === '2'")
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == replay[1]["ids"]
    page.click("#gen-next")
    page.wait_for_function("document.getElementById('generate-panel').dataset.steps === '3'")
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == replay[2]["ids"]
    page.click("#gen-reset")
    page.wait_for_function("document.getElementById('generate-panel').dataset.steps === '0'")
    assert "steps" not in query_of(page.url)
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == prompt_ids
    assert page.console_errors == []


def test_zeroing_a_head_changes_the_distribution(page, live_url):
    open_page(page, live_url)
    go_stage(page, 9)
    page.wait_for_function("document.getElementById('intervene-panel').dataset.state === 'ready'")
    clean = by_name(plot_data(page, "iv-plot"))
    assert clean["clean run"]["x"] == clean["with the interventions"]["x"]  # nothing switched off: both runs agree
    with page.expect_response(lambda r: r.url.endswith("/api/v1/intervene")) as resp:
        page.check('#iv-heads input[data-layer="0"][data-head="1"]')
    assert resp.value.request.post_data_json["ablate_heads"] == [{"layer": 0, "head": 1}]
    page.wait_for_function(
        "() => { const r = document.getElementById('intervene-panel').dataset.request;"
        " return r && JSON.parse(r).ablate_heads.length === 1 && document.getElementById('intervene-panel').dataset.state === 'ready'; }"
    )
    expected = api(
        page, live_url, "/intervene", {"text": PROMPT, "ablate_heads": [{"layer": 0, "head": 1}], "top_k": 10}
    )
    bars = by_name(plot_data(page, "iv-plot"))
    compared = list(reversed(expected["compared"]))
    assert bars["clean run"]["x"] == [c["clean"] for c in compared]
    assert bars["with the interventions"]["x"] == [c["altered"] for c in compared]
    assert bars["clean run"]["x"] != bars["with the interventions"]["x"] and expected["kl_divergence"] > 0
    assert float(page.get_attribute("#iv-stats", "data-kl")) == expected["kl_divergence"]
    assert f"{expected['altered']['loss']:.3f}" in page.inner_text("#iv-stats")
    assert query_of(page.url)["ablate"] == "L0H1"
    # an MLP too, then clear
    page.check('#iv-mlps input[data-mlp="2"]')
    page.wait_for_function("new URLSearchParams(location.search).get('ablate') === 'L0H1,MLP2'")
    stage_shot(page, "intervene-panel", "forward-interventions")
    page.click("#iv-clear")
    page.wait_for_function("!new URLSearchParams(location.search).has('ablate')")
    assert page.console_errors == []


def test_swapping_a_prompt_token(page, live_url):
    open_page(page, live_url)
    go_stage(page, 9)
    page.select_option("#iv-pos", "2")
    # a word that is several tokens cannot replace one token: the page says so
    page.fill("#iv-text", "Juliet")
    page.wait_for_function(
        "/tokens/.test(document.getElementById('iv-tok-status').textContent) || !document.getElementById('iv-add').disabled"
    )
    pieces = api(page, live_url, "/tokenize", {"text": "Juliet", "encoding": "model"})["tokens"]
    spaced = api(page, live_url, "/tokenize", {"text": " Juliet", "encoding": "model"})["tokens"]
    assert page.is_disabled("#iv-add") == (len(pieces) != 1 and len(spaced) != 1)
    # by id: GET /tokens/model/{id} names it
    king = api(page, live_url, "/tokenize", {"text": " king", "encoding": "model"})["tokens"]
    assert len(king) == 1
    new_id = king[0]["id"]
    page.fill("#iv-id", str(new_id))
    page.wait_for_function("!document.getElementById('iv-add').disabled")
    assert page.text_content("#iv-tok-status") == f"id {new_id} is “·king”"
    page.click("#iv-add")
    page.wait_for_function(
        "(id) => { const r = document.getElementById('intervene-panel').dataset.request;"
        " return r && JSON.parse(r).edits.length === 1 && JSON.parse(r).edits[0].id === id"
        " && document.getElementById('intervene-panel').dataset.state === 'ready'; }",
        arg=new_id,
    )
    assert query_of(page.url)["edit"] == f"2:{new_id}"
    assert "2: “" in page.inner_text("#iv-edits") and "→ “·king”" in page.inner_text("#iv-edits")
    expected = api(
        page, live_url, "/intervene", {"text": PROMPT, "edits": [{"position": 2, "id": new_id}], "top_k": 10}
    )
    assert by_name(plot_data(page, "iv-plot"))["with the interventions"]["x"] == [
        c["altered"] for c in reversed(expected["compared"])
    ]
    # a neighbour chip of the token at that position swaps it in one click
    chip = "#iv-suggest[data-position='2'] button.chip"
    page.wait_for_selector(chip)
    nb_id = int(page.get_attribute(chip, "data-id"))
    page.click(chip)
    page.wait_for_function("(id) => new URLSearchParams(location.search).get('edit') === `2:${id}`", arg=nb_id)
    assert page.console_errors == []


def test_decomposition_adds_up_to_the_logit_and_downloads_its_json(page, live_url, tmp_path):
    open_page(page, live_url)
    go_stage(page, 10)
    full = api(page, live_url, "/forward", {"text": PROMPT, "include": ["decomposition", "next_token"], "top_k": 10})
    d = full["decomposition"]
    total = float(page.get_attribute("#dc-total", "data-value"))
    logit = float(page.get_attribute("#dc-logit", "data-value"))
    assert total == d["total"] and logit == d["logit"]
    assert math.isclose(total, logit, abs_tol=1e-3)
    assert float(page.get_attribute("#dc-error", "data-value")) == d["residual_error"]
    bars = plot_data(page, "dc-plot")
    assert bars[0]["y"] == [c["value"] for c in d["contributions"]]
    assert bars[1]["y"] == [d["total"]] and bars[2]["y"] == [d["logit"]]
    kinds = {c["kind"] for c in d["contributions"]}
    assert {"embed", "head", "mlp"} <= kinds

    with page.expect_download() as dl:
        page.click(".dl-bar[data-for='dc-plot'] button[data-format='json']")
    path = tmp_path / "d.json"
    dl.value.save_as(path)
    assert json.loads(path.read_text()) == d
    with page.expect_download() as dl:
        page.click(".dl-bar[data-for='dc-plot'] button[data-format='svg']")
    assert dl.value.suggested_filename == "decomposition.svg"
    svg = tmp_path / "d.svg"
    dl.value.save_as(svg)
    assert svg.read_text().lstrip().startswith("<svg")

    # another target: the second most likely token
    second = full["next_token"][1]
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        page.select_option("#dc-target", str(second["id"]))
    assert resp.value.request.post_data_json["include"] == ["decomposition"]
    page.wait_for_function(
        "(id) => document.getElementById('decomposition-panel').dataset.target === String(id)", arg=second["id"]
    )
    d2 = api(page, live_url, "/forward", {"text": PROMPT, "include": ["decomposition"], "target": second["id"]})[
        "decomposition"
    ]
    page.wait_for_function("(v) => document.getElementById('dc-logit').dataset.value === String(v)", arg=d2["logit"])
    assert math.isclose(float(page.get_attribute("#dc-total", "data-value")), d2["logit"], abs_tol=1e-3)
    assert query_of(page.url)["target"] == str(second["id"])
    stage_shot(page, "decomposition-panel", "forward-decomposition")
    assert page.console_errors == []


def test_a_shared_url_restores_every_setting(page, live_url):
    params = {
        "text": PROMPT,
        "layer": "1",
        "head": "2",
        "position": "3",
        "temperature": "0.7",
        "top_k": "5",
        "top_p": "0.9",
        "seed": "4",
        "steps": "2",
        "ablate": "L0H1,MLP2",
    }
    # every URL the page writes while it loads and redoes the two steps (it once wrote steps=1 between them)
    page.add_init_script(
        "window.urlSteps = []; const rs = history.replaceState.bind(history);"
        " history.replaceState = (s, t, u) => { window.urlSteps.push(new URL(u, location.href).searchParams.get('steps')); rs(s, t, u); };"
    )
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        open_page(page, live_url, params)
    sent = resp.value.request.post_data_json
    assert (sent["layer"], sent["head"], sent["position"]) == (1, 2, 3)
    assert query_of(page.url) == params
    assert (
        page.input_value("#layer") == "1" and page.input_value("#head") == "2" and page.input_value("#position") == "3"
    )
    assert (
        page.input_value("#temperature") == "0.7"
        and page.input_value("#top-k") == "5"
        and page.input_value("#top-p") == "0.9"
    )
    assert page.input_value("#seed") == "4"
    page.wait_for_function("document.getElementById('block-panel').dataset.head === '1.2.3'")
    # the two generated tokens are redone with the same seed and settings
    page.wait_for_function("document.getElementById('generate-panel').dataset.steps === '2'")
    assert set(page.evaluate("window.urlSteps")) <= {"2"}, page.evaluate("window.urlSteps")
    cur = [t["id"] for t in api(page, live_url, "/forward", {"text": PROMPT, "include": []})["tokens"]]
    for step in range(2):
        cur = api(
            page,
            live_url,
            "/generate/step",
            {"ids": cur, "step": step, "seed": 4, "temperature": 0.7, "top_k": 5, "top_p": 0.9},
        )["ids"]
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == cur
    go_stage(page, 9)
    assert page.is_checked('#iv-heads input[data-layer="0"][data-head="1"]') and page.is_checked(
        '#iv-mlps input[data-mlp="2"]'
    )
    go_stage(page, 7)
    page.wait_for_function("document.getElementById('sampling-plot').dataset.state === 'ready'")
    assert json.loads(page.get_attribute("#sampling-plot", "data-settings")) == {
        "temperature": 0.7,
        "top_k": 5,
        "top_p": 0.9,
    }
    # the h / l keys move the position; the URL follows
    page.keyboard.press("l")
    page.wait_for_function("new URLSearchParams(location.search).get('position') === '4'")
    page.reload()
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    assert page.input_value("#position") == "4"
    assert page.console_errors == []


def test_long_prompt_labels_every_token(page, live_url):
    full = (
        "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
        "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief, that thou her "
        "maid art far more fair than she. Be not her maid, since she is envious."
    )
    toks = api(page, live_url, "/tokenize", {"text": full, "encoding": "model"})["tokens"]
    assert len(toks) >= 64
    text = full[: toks[63]["end"]]  # exactly the first 64 tokens
    n = len(api(page, live_url, "/tokenize", {"text": text, "encoding": "model"})["tokens"])
    assert n == 64
    open_page(page, live_url, {"text": text})
    go_stage(page, 1)
    labels = page.evaluate(
        """() => Array.from(document.querySelectorAll('#emb-token-plot .yaxislayer-above .ytick text')).map(t => t.textContent)"""
    )
    assert len(labels) == n
    size = page.evaluate(
        "() => parseFloat(getComputedStyle(document.querySelector('#emb-token-plot .ytick text')).fontSize)"
    )
    assert size >= 9
    stage_shot(page, "tokens-panel", "forward-long-prompt-embeddings")
    go_stage(page, 3)
    stage_shot(page, "block-panel", "forward-long-prompt-block")
    assert page.console_errors == []
