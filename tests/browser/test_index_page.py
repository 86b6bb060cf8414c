"""The forward-pass page (/) in a real headless Chromium: every panel must show what
POST /api/v1/forward returns for the same prompt, and the page's state must live in its URL."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from exporting import layout_faults

pytestmark = pytest.mark.browser

PROMPT = "JULIET:\nO Romeo, Romeo"
PAGE_PARTS = {"include": ["attention", "next_token"], "top_k": 10}  # what static/js/forward/main.js asks for


def visible(text: str) -> str:
    """Python twin of static/js/lib/format.js `visible`: whitespace the reader can see."""
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍")


def api_forward(page, live_url: str, text: str) -> dict:
    resp = page.request.post(f"{live_url}/api/v1/forward", data={"text": text, **PAGE_PARTS})
    assert resp.ok, resp.text()
    return resp.json()


def wait_ready(page) -> None:
    page.wait_for_selector('body[data-ready="1"]', state="attached")


def open_page(page, live_url: str, query: str = "?stage=all") -> None:
    """Open / (with every stage shown under the overview, one after the other: stage=all)."""
    page.goto(f"{live_url}/{query}")
    wait_ready(page)


def type_prompt(page, text: str) -> None:
    """Replace the prompt the way a reader does and wait for the page to redraw for *this* text."""
    page.evaluate("delete document.body.dataset.ready")
    with page.expect_response(
        lambda r: (
            r.url.endswith("/api/v1/forward")
            and r.request.method == "POST"
            and (r.request.post_data_json or {}).get("text") == text
        )
    ) as resp:
        page.fill("#prompt", text)
    assert resp.value.ok, resp.value.text()
    wait_ready(page)


def plot_trace(page, el_id: str) -> dict:
    return page.evaluate(
        """(id) => { const gd = document.getElementById(id);
                     const t = gd.data[0];
                     return { type: t.type, x: t.x, y: t.y, z: t.z || null,
                              title: gd.layout.title && gd.layout.title.text,
                              xticks: gd.layout.xaxis.ticktext || null,
                              yticks: gd.layout.yaxis.ticktext || null,
                              n_traces: gd.data.length }; }""",
        el_id,
    )


def svg_tick_labels(page, axis: str) -> list[str]:
    """The tick labels Plotly actually drew, in axis order (tick value 0, 1, 2, ...)."""
    return page.evaluate(
        """(axis) => Array.from(document.querySelectorAll(
                `#attention-plot .${axis}axislayer-above .${axis}tick text`))
              .map((t) => [t.__data__ ? t.__data__.x : null, t.textContent])
              .sort((a, b) => a[0] - b[0]).map((p) => p[1])""",
        axis,
    )


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def assert_attention_matches(page, api: dict, layer: int, head: int) -> None:
    trace = plot_trace(page, "attention-plot")
    assert trace["type"] == "heatmap"
    li = api["attention"]["layers"].index(layer)
    hi = api["attention"]["heads"].index(head)
    assert _rows_close(trace["z"], api["attention"]["pattern"][li][hi])
    assert trace["title"] == f"Layer {layer}, head {head}"


def _rows_close(a, b) -> bool:
    return len(a) == len(b) and all(r1 == pytest.approx(r2) for r1, r2 in zip(a, square(b)))


def square(rows: list[list]) -> list[list]:
    """A causal model's attention rows from the API (row q stops at key q) as the T x T map the
    page draws: the masked cells are empty (null)."""
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def test_forward_page_shows_the_api_trace(page, live_url, screenshot):
    open_page(page, live_url)
    type_prompt(page, PROMPT)
    api = api_forward(page, live_url, PROMPT)
    tokens = api["tokens"]
    labels = [visible(t["text"]) for t in tokens]
    n = len(tokens)
    assert n >= 5

    # Tokens panel: one span per token, in order, with the API's ids and visible-whitespace text.
    spans = page.locator("#tokens .tok")
    assert spans.count() == n
    assert spans.evaluate_all("els => els.map(e => e.textContent)") == labels
    assert spans.evaluate_all("els => els.map(e => +e.dataset.id)") == [t["id"] for t in tokens]
    assert page.text_content("#token-count") == f"{n} tokens"

    # Attention heatmap: drawn by Plotly (an SVG with a heatmap layer), labelled with the tokens.
    page.wait_for_selector("#attention-plot svg.main-svg", state="attached")
    assert page.locator("#attention-plot .hm, #attention-plot .heatmaplayer image").count() >= 1
    trace = plot_trace(page, "attention-plot")
    assert trace["type"] == "heatmap"
    assert trace["xticks"] == labels and trace["yticks"] == labels
    assert svg_tick_labels(page, "x") == labels
    assert svg_tick_labels(page, "y") == labels
    z = trace["z"]
    assert len(z) == n and all(len(row) == n for row in z)
    for q, row in enumerate(z):
        assert all(w is None for w in row[q + 1 :]), f"query {q} attends to a later token: {row}"
        assert sum(row[: q + 1]) == pytest.approx(1, abs=5e-5 * n + 1e-6)  # the API rounds weights to 4 decimals
    assert_attention_matches(page, api, 0, 0)
    # The masked cells are drawn empty (a light overlay), not as a dark "weight 0".
    mask = page.evaluate("document.getElementById('attention-plot').data.map(t => t.name)")
    assert mask == ["attention", "causal mask"]
    mask_z = page.evaluate("document.getElementById('attention-plot').data[1].z")
    assert mask_z == [[1 if k > q else None for k in range(n)] for q in range(n)]

    # Next-token bars: ten horizontal bars whose lengths are the API's probabilities.
    nxt = plot_trace(page, "next-plot")
    assert nxt["type"] == "bar"
    probs = [c["prob"] for c in api["next_token"]]
    assert len(probs) == 10
    assert list(reversed(nxt["x"])) == pytest.approx(probs)  # drawn most likely at the top
    assert page.locator("#next-plot .bars .point").count() == 10
    assert nxt["y"][-1].startswith(f"“{visible(api['next_token'][0]['text'])}”")

    # The URL already carries the prompt and the default layer/head (and that every stage is shown).
    assert query_of(page.url) == {"text": PROMPT, "layer": "0", "head": "0", "stage": "all"}

    screenshot(page, "index-forward-page")
    assert layout_faults(page) == []
    assert page.console_errors == []


def test_layer_and_head_selects_redraw_and_live_in_the_url(page, live_url, screenshot):
    open_page(page, live_url)
    type_prompt(page, PROMPT)
    api = api_forward(page, live_url, PROMPT)
    layers, heads = api["attention"]["layers"], api["attention"]["heads"]
    assert len(layers) >= 2 and len(heads) >= 2
    layer, head = layers[-1], heads[1]

    before = plot_trace(page, "attention-plot")["z"]
    page.select_option("#head", str(head))
    page.wait_for_function(
        "(h) => document.getElementById('attention-plot').layout.title.text.endsWith(`, head ${h}`)", arg=head
    )
    assert_attention_matches(page, api, 0, head)
    assert plot_trace(page, "attention-plot")["z"] != before
    assert query_of(page.url) == {"text": PROMPT, "layer": "0", "head": str(head), "stage": "all"}

    page.select_option("#layer", str(layer))
    page.wait_for_function(
        "(l) => document.getElementById('attention-plot').layout.title.text.startsWith(`Layer ${l},`)", arg=layer
    )
    assert_attention_matches(page, api, layer, head)
    assert query_of(page.url) == {"text": PROMPT, "layer": str(layer), "head": str(head), "stage": "all"}

    # Reloading (or sharing) that URL restores prompt, layer and head.
    url = page.url
    page.evaluate("delete document.body.dataset.ready")
    page.goto(url)
    wait_ready(page)
    assert page.input_value("#prompt") == PROMPT
    assert page.input_value("#layer") == str(layer)
    assert page.input_value("#head") == str(head)
    assert_attention_matches(page, api, layer, head)
    assert page.locator("#tokens .tok").count() == len(api["tokens"])
    screenshot(page, "index-layer-head-from-url")
    assert page.console_errors == []


def test_overlong_prompt_shows_an_error_naming_n_ctx(page, live_url, screenshot):
    open_page(page, live_url)
    n_ctx = page.request.get(f"{live_url}/api/v1/health").json()["info"]["n_ctx"]
    too_long = "ROMEO:" + " Romeo" * (n_ctx + 10)  # each " Romeo" is at least one token
    assert len(too_long) < 20_000  # over the token limit, under the character limit
    with page.expect_response(
        lambda r: r.url.endswith("/api/v1/forward") and (r.request.post_data_json or {}).get("text") == too_long
    ) as resp:
        page.fill("#prompt", too_long)
    assert resp.value.status == 422
    box = page.locator("#error")
    box.wait_for(state="visible")
    message = box.text_content()
    assert "n_ctx" in message and str(n_ctx) in message, message
    assert re.search(r"\b\d+ tokens\b", message), message
    # The panels still hold the previous prompt's trace; they are faded so they don't pass for this one's.
    faded = page.eval_on_selector("#attention-panel", "el => +getComputedStyle(el).opacity")
    assert faded < 1
    screenshot(page, "index-overlong-prompt")
    # The only console error is the browser's own note about the refused request.
    assert all("422" in e for e in page.console_errors), page.console_errors

    # A prompt that fits again clears the error.
    type_prompt(page, PROMPT)
    box.wait_for(state="hidden")
    page.wait_for_function("getComputedStyle(document.getElementById('attention-panel')).opacity === '1'")


def test_everything_is_served_locally(page, live_url):
    open_page(page, live_url)
    page.wait_for_selector("#attention-plot svg.main-svg", state="attached")
    assert page.evaluate("typeof window.Plotly") == "object"
    srcs = page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert f"{live_url}/vendor/plotly.min.js" in srcs
    assert f"{live_url}/vendor/plotly.min.js" in page.requests
    offsite = [u for u in page.requests if not u.startswith(live_url + "/")]
    assert offsite == [], f"requests left {live_url}: {offsite}"
    assert page.console_errors == []
