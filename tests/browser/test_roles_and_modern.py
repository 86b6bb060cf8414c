"""Head roles on the forward page, and the modern block, in a real headless Chromium.

Roles (the built-in model): the layer x head grid carries one mark per role a head passes, exactly
the heads and roles of GET /api/v1/heads, in the role's colour, filled when ablation confirms it;
the legend, the summary sentence, the role table and the "as JSON" link follow the API; a prompt
role's mark opens that head in the stage's head view; an induction mark (a hand-made /heads answer:
the built-in model has no induction head) opens the head on the test input of repeated random tokens.

The modern block (small random checkpoints built here, GPT-2's vocabulary): RoPE + RMSNorm + SwiGLU +
grouped-query attention + a sliding window, and a mixture of experts. Every figure is checked against
the API's numbers; the page asks for the rope / moe parts only when /health says the model has them."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from exporting import check_offline, layout_faults, live_exports, page_path
from overview_checks import walk_through

pytestmark = pytest.mark.browser

PROMPT = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?"
MODERN_PROMPT = "The quick brown fox jumps over the lazy dog, and the cat sleeps by the warm fire all day."
WINDOW = 8
# lib/roles.js ROLE_COLOURS (Okabe-Ito)
ROLE_COLOURS = {
    "previous-token": "#0072B2",
    "first-token": "#CC79A7",
    "current-token": "#56B4E9",
    "local": "#009E73",
    "duplicate-token": "#E69F00",
    "induction": "#D55E00",
}
MASKED_RGB = [0xEE, 0xEE, 0xEE]


# --- helpers ---------------------------------------------------------------------------------------

# An init script: counts, per element id, the reports of the page's IntersectionObservers (after the
# page's own callback has run), so a test can wait until the page has looked at an element instead
# of sleeping.
COUNT_OBSERVER_REPORTS = """(() => {
  const Native = window.IntersectionObserver;
  window.observerReports = {};
  window.IntersectionObserver = class extends Native {
    constructor(callback, options) {
      super((entries, observer) => {
        callback(entries, observer);
        for (const e of entries) if (e.target.id) window.observerReports[e.target.id] = (window.observerReports[e.target.id] || 0) + 1;
      }, options);
    }
  };
})()"""


def api(page, url: str, path: str, body: dict | None = None) -> dict:
    resp = (
        page.request.post(f"{url}/api/v1{path}", data=body, timeout=120_000)
        if body is not None
        else page.request.get(f"{url}/api/v1{path}", timeout=120_000)
    )
    assert resp.ok, f"{path}: {resp.status} {resp.text()[:400]}"
    return resp.json()


def heads_api(page, url: str, text: str) -> dict:
    return api(page, url, f"/heads?{urlencode({'text': text})}")


def open_page(page, url: str, params: dict) -> dict:
    """Open / with every stage shown (stage=all) and return the first /forward request the page sent
    (its JSON body)."""
    with page.expect_request(lambda r: r.url.endswith("/api/v1/forward") and r.method == "POST") as req:
        page.goto(f"{url}/?{urlencode({**params, 'stage': 'all'})}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    return req.value.post_data_json


def drawn(page, plot_id: str, at_least: int = 1) -> None:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    try:
        page.wait_for_function(
            "([id, n]) => +(document.getElementById(id).dataset.drawn || 0) >= n", arg=[plot_id, at_least]
        )
    except Exception as exc:
        raise AssertionError(f"#{plot_id} was not drawn; console: {page.console_errors}") from exc


def plot_data(page, plot_id: str) -> list[dict]:
    return page.evaluate(
        "(id) => document.getElementById(id).data.map(t => ({type: t.type, name: t.name, x: t.x, y: t.y, z: t.z}))",
        plot_id,
    )


def by_name(traces: list[dict]) -> dict[str, dict]:
    return {t["name"]: t for t in traces}


def square(rows: list[list]) -> list[list]:
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def grid_painted(page) -> None:
    """Scroll every map of the model view into view (a map is painted when it first shows) and wait
    until all are painted."""
    grid = page.locator("#model-view-plot")
    grid.scroll_into_view_if_needed()
    page.wait_for_function("() => document.getElementById('model-view-plot').dataset.grid")
    for canvas in grid.locator("canvas.hg-map").all():
        canvas.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const g = document.getElementById('model-view-plot');"
        " return [...g.querySelectorAll('canvas.hg-map')].every(c => c.dataset.painted === '1'); }"
    )
    grid.scroll_into_view_if_needed()


def roles_ready(page) -> None:
    page.locator("#roles-box").scroll_into_view_if_needed()
    page.wait_for_selector("#roles-box[data-state='ready']", state="attached", timeout=120_000)


def shown_marks(page) -> list[dict]:
    """Every role mark on the grid: its head (from the data attributes and from the cell it sits in),
    role, status and the colours of its symbol."""
    return page.evaluate("""() => [...document.querySelectorAll('#model-view-plot .role-mark')].map(b => {
        const cv = b.closest('.hg-cell').querySelector('canvas.hg-map'); const p = b.querySelector('path');
        return { layer: +b.dataset.layer, head: +b.dataset.head, row: +cv.dataset.row, col: +cv.dataset.col,
                 role: b.dataset.role, status: b.dataset.status, fill: p.getAttribute('fill'), stroke: p.getAttribute('stroke'),
                 title: b.title }; })""")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


# --- head roles (the built-in model) ---------------------------------------------------------------


def test_role_marks_on_the_grid_match_the_heads_api(page, live_url, screenshot):
    page.add_init_script(COUNT_OBSERVER_REPORTS)
    open_page(page, live_url, {"text": PROMPT})
    # the roles are scored only when stage 4 comes near: the page's top costs no /heads request
    # (once the trace has drawn, the page watches the roles box: wait until it has had its answer)
    page.wait_for_function("() => (window.observerReports['roles-box'] || 0) >= 1")
    assert page.get_attribute("#roles-box", "data-state") == "waiting"
    assert not any("/api/v1/heads" in u for u in page.requests)
    grid_painted(page)
    roles_ready(page)
    want = heads_api(page, live_url, PROMPT)
    expected = sorted((h["layer"], h["head"], r, h["status"]) for h in want["heads"] for r in h["roles"])
    assert expected, "the built-in model has local / previous-token heads: the API should name some"
    assert {r for _, _, r, _ in expected} & {"local", "previous-token"}
    page.wait_for_function(
        "(n) => +document.getElementById('model-view-plot').dataset.roleMarks === n", arg=len(expected)
    )
    marks = shown_marks(page)
    assert sorted((m["layer"], m["head"], m["role"], m["status"]) for m in marks) == expected
    for m in marks:
        assert (m["row"], m["col"]) == (m["layer"], m["head"])  # in the right cell of the grid
        colour = ROLE_COLOURS[m["role"]]
        assert m["stroke"] == colour
        assert m["fill"] == (colour if m["status"] == "confirmed" else "#fff")  # solid = confirmed, hollow otherwise
        assert m["role"] in m["title"] and m["status"] in m["title"]
    # a head's marks come in the API's order (the most decisive role first)
    for h in want["heads"]:
        if h["roles"]:
            assert [m["role"] for m in marks if (m["layer"], m["head"]) == (h["layer"], h["head"])] == h["roles"]
    # the heads without a role carry no mark
    assert page.locator("#model-view-plot .hg-cell:has(.role-mark)").count() == sum(
        1 for h in want["heads"] if h["roles"]
    )

    # legend: every role with its colour; the summary is the API's sentence
    legend = page.eval_on_selector_all(
        "#roles-legend [data-role]",
        "els => els.map(e => [e.dataset.role, e.querySelector('path').getAttribute('fill')])",
    )
    assert legend == [list(kv) for kv in ROLE_COLOURS.items()]
    assert page.text_content("#roles-summary") == want["summary"]
    # the table: one row per (head, role) with the API's score and threshold
    rows = page.eval_on_selector_all(
        "#roles-table tbody tr",
        "rs => rs.map(r => [+r.dataset.layer, +r.dataset.head, r.dataset.role,"
        " [...r.querySelectorAll('td.num')].slice(0, 2).map(c => c.textContent)])",
    )
    thresholds = {r["name"]: r["threshold"] for r in want["roles"]}
    assert [(li, h, r) for li, h, r, _ in rows] == [
        (h["layer"], h["head"], r) for h in want["heads"] for r in h["roles"]
    ]
    for layer, head, role, (score, threshold) in rows:
        h = next(x for x in want["heads"] if (x["layer"], x["head"]) == (layer, head))
        assert float(score) == pytest.approx(h["scores"][role], abs=5e-4)
        assert float(threshold) == pytest.approx(thresholds[role], abs=5e-4)
    # a head with an ablation shows its costs
    ablated = next(h for h in want["heads"] if h["roles"] and h["ablation"])
    row = page.locator(f"#roles-table tbody tr[data-layer='{ablated['layer']}'][data-head='{ablated['head']}']").first
    assert f"{ablated['ablation']['zero_cost']:.4f}" in row.inner_text()
    # "as JSON": the /heads URL of this prompt
    href = page.get_attribute("#roles-json", "href")
    assert urlsplit(href).path == "/api/v1/heads" and query_of(href) == {"text": PROMPT}
    assert api(page, live_url, href.removeprefix("/api/v1")) == want
    page.locator("#roles-box").scroll_into_view_if_needed()
    screenshot(page, "forward-head-roles")

    # a new prompt: its own roles replace the old ones
    other = "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun."
    page.fill("#prompt", other)  # (this scrolls to the prompt: the roles wait until stage 4 is back in view)
    page.wait_for_function(
        "(t) => new URL(document.getElementById('roles-json').href).searchParams.get('text') === t", arg=other
    )
    assert page.get_attribute("#roles-box", "data-state") == "waiting"
    assert (
        page.evaluate("document.getElementById('model-view-plot').dataset.roleMarks") == "0"
    )  # the old prompt's marks are gone
    page.locator("#roles-box").scroll_into_view_if_needed()
    page.wait_for_selector("#roles-box[data-state='ready']", state="attached", timeout=120_000)
    want2 = heads_api(page, live_url, other)
    expected2 = sorted((h["layer"], h["head"], r, h["status"]) for h in want2["heads"] for r in h["roles"])
    page.wait_for_function(
        "(n) => +document.getElementById('model-view-plot').dataset.roleMarks === n", arg=len(expected2)
    )
    assert sorted((m["layer"], m["head"], m["role"], m["status"]) for m in shown_marks(page)) == expected2
    assert page.text_content("#roles-summary") == want2["summary"]
    assert page.console_errors == []


def test_clicking_a_prompt_role_mark_opens_that_head(page, live_url):
    open_page(page, live_url, {"text": PROMPT})
    grid_painted(page)
    roles_ready(page)
    want = heads_api(page, live_url, PROMPT)
    prompt_roles = {r["name"] for r in want["roles"] if r["input"] == "prompt"}
    target = next(
        h for h in want["heads"] if h["roles"] and h["roles"][0] in prompt_roles and (h["layer"], h["head"]) != (0, 0)
    )
    layer, head, role = target["layer"], target["head"], target["roles"][0]
    mark = f"#model-view-plot .role-mark[data-layer='{layer}'][data-head='{head}'][data-role='{role}']"
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        page.click(mark)
    sent = resp.value.request.post_data_json
    assert (sent["layer"], sent["head"]) == (layer, head) and "text" in sent and "ids" not in sent  # on the prompt
    assert page.input_value("#layer") == str(layer) and page.input_value("#head") == str(head)
    page.wait_for_function(
        "(t) => document.getElementById('attention-plot').layout.title.text === t", arg=f"Layer {layer}, head {head}"
    )
    assert page.evaluate("document.getElementById('model-view-plot').dataset.selected") == f"{layer}.{head}"
    assert page.get_attribute(mark, "class").split() == ["role-mark", "sel"]
    # the big map is that head's pattern on the prompt, and it is on screen
    full = api(
        page, live_url, "/forward", {"text": PROMPT, "include": ["attention"], "layers": [layer], "heads": [head]}
    )
    assert plot_data(page, "attention-plot")[0]["z"] == square(full["attention"]["pattern"][0][0])
    top = page.evaluate("document.getElementById('attention-plot').getBoundingClientRect().top")
    assert -200 < top < 900
    assert page.is_hidden("#role-test-fig")
    # the table's role button does the same
    page.click(f"#roles-table button.role-open[data-layer='{layer}'][data-head='{head}'][data-role='{role}']")
    assert page.input_value("#layer") == str(layer)
    assert page.console_errors == []


def test_an_induction_mark_opens_its_head_on_the_repeated_test_input(browser, page, live_url, screenshot, tmp_path):
    """A hand-made /heads answer (the built-in model has no induction head): layer 1, head 2 passes
    induction. Its mark must open that head on the test input, with the two copies marked; the URL
    then names it, so opened again (and as the stage's exported file, offline) it is shown again."""
    layer, head = 1, 2

    def fake_heads(route):
        # the JSON form, to edit (the page asks for MessagePack and reads either)
        res = route.fetch(headers={**route.request.headers, "accept": "application/json"})
        body = res.json()
        for h in body["heads"]:
            if (h["layer"], h["head"]) == (layer, head):
                h["roles"], h["status"] = ["induction"], "confirmed"
                h["scores"]["induction"] = 0.9
        route.fulfill(status=res.status, json=body)

    page.route("**/api/v1/heads?*", fake_heads)
    open_page(page, live_url, {"text": PROMPT})
    grid_painted(page)
    roles_ready(page)
    mark = f"#model-view-plot .role-mark[data-layer='{layer}'][data-head='{head}'][data-role='induction']"
    assert page.locator(mark).count() == 1
    assert page.get_attribute(f"{mark} path", "fill") == ROLE_COLOURS["induction"]
    test_input = heads_api(page, live_url, PROMPT)["test_input"]
    n, ids = test_input["n"], test_input["ids"][0]
    assert ids[:n] == ids[n:]  # the test input is one random row, repeated
    with page.expect_request(
        lambda r: r.url.endswith("/api/v1/forward") and r.method == "POST" and "ids" in (r.post_data_json or {})
    ) as req:
        page.click(mark)
    sent = req.value.post_data_json
    assert (
        sent["ids"] == ids
        and sent["layers"] == [layer]
        and sent["heads"] == [head]
        and sent["include"] == ["attention"]
    )
    page.wait_for_selector("#role-test-fig[data-state='ready']")
    assert page.get_attribute("#role-test-fig", "data-head") == f"{layer}.{head}"
    assert page.get_attribute("#role-test-fig", "data-role") == "induction"
    want = api(page, live_url, "/forward", {"ids": ids, "include": ["attention"], "layers": [layer], "heads": [head]})
    traces = plot_data(page, "role-test-plot")
    assert traces[0]["z"] == square(want["attention"]["pattern"][0][0])
    assert len(traces[0]["z"]) == 2 * n
    # the two copies are marked: where the second starts, and the induction / duplicate diagonals
    shapes = page.evaluate("document.getElementById('role-test-plot').layout.shapes")
    lines = {(s["x0"], s["y0"], s["x1"], s["y1"]) for s in shapes if s["type"] == "line"}
    assert {
        (n - 0.5, -0.5, n - 0.5, 2 * n - 0.5),
        (-0.5, n - 0.5, 2 * n - 0.5, n - 0.5),
        (1, n, n, 2 * n - 1),
        (0, n, n - 1, 2 * n - 1),
    } <= lines
    assert f"{n} random tokens" in page.text_content("#role-test-caption")
    # the head is selected in the page too
    page.wait_for_function(
        "(v) => document.getElementById('model-view-plot').dataset.selected === v", arg=f"{layer}.{head}"
    )
    screenshot(page, "forward-induction-on-test-input")
    assert page.console_errors == []
    # the open head is URL state: the link (and the panel's exported file) opens it again
    assert parse_qs(urlsplit(page.url).query)["test_head"] == [f"{layer}.{head}:induction"]
    path = page_path(page)
    done, skipped = live_exports(page, live_url, path, tmp_path, panels={"attention"})
    assert "role-test-plot" in {fig for fig, *_ in done}, skipped
    assert page.get_attribute("#role-test-fig", "data-head") == f"{layer}.{head}"
    assert plot_data(page, "role-test-plot")[0]["z"] == square(want["attention"]["pattern"][0][0])
    check_offline(browser, [(path, *e) for e in done])
    # another prompt closes it
    page.fill("#prompt", PROMPT + " Again.")
    page.wait_for_function("() => !new URL(location.href).searchParams.has('test_head')")
    assert page.is_hidden("#role-test-fig")
    assert page.console_errors == []


# --- the modern block ------------------------------------------------------------------------------


def build_and_serve(tmp_path_factory, serve_app, name: str, **switches):
    import torch

    from gptscope.model import checkpoint
    from gptscope.model.gpt import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=50257, n_ctx=64, n_layer=2, n_head=4, d_model=32, **switches)
    torch.manual_seed(0)
    meta = {
        "name": name,
        "tokenizer": {"kind": "tiktoken", "name": "gpt2"},
        "step": 0,
        "final": True,
        "evals": [],
        "command": "test fixture",
        "corpus": {"name": "unknown (imported)"},
        "source": {"kind": "huggingface-gpt2"},
    }
    folder = checkpoint.save(tmp_path_factory.mktemp(name) / "checkpoint", GPT(cfg), meta)
    return serve_app(folder, tmp_path_factory.mktemp(f"{name}-data"))


@pytest.fixture(scope="module")
def modern(tmp_path_factory, serve_app):
    with build_and_serve(
        tmp_path_factory, serve_app, "modern", pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, window=WINDOW
    ) as url:
        yield url


@pytest.fixture(scope="module")
def moe(tmp_path_factory, serve_app):
    with build_and_serve(
        tmp_path_factory, serve_app, "moe", pos="rope", norm_type="rmsnorm", mlp="swiglu", n_expert=4, top_k_experts=2
    ) as url:
        yield url


def test_builtin_page_asks_for_no_modern_part(page, live_url):
    sent = open_page(page, live_url, {"text": PROMPT})
    assert "rope" not in sent["include"] and "moe" not in sent["include"] and "mlp" in sent["include"]
    assert page.locator("#step-rope").count() == 0 and page.locator("#moe-box").count() == 0
    assert page.text_content("#ln-title") == "a · LayerNorm"
    assert page.locator("#model-view-plot .hg-group").count() == 0
    assert page.console_errors == []


def test_rope_rmsnorm_swiglu_gqa_and_the_window(page, modern, screenshot):
    info = api(page, modern, "/health")["info"]
    assert (info["pos"], info["norm_type"], info["mlp"], info["n_kv_head"], info["window"]) == (
        "rope",
        "rmsnorm",
        "swiglu",
        2,
        WINDOW,
    )
    layer, head = 1, 3
    sent = open_page(page, modern, {"text": MODERN_PROMPT, "layer": layer, "head": head})
    assert "rope" in sent["include"] and "moe" not in sent["include"]
    full = api(
        page,
        modern,
        "/forward",
        {
            "text": MODERN_PROMPT,
            "include": ["rope", "layernorm", "head_detail", "mlp", "attention"],
            "layer": layer,
            "head": head,
        },
    )
    T = len(full["tokens"])
    assert T > WINDOW + 3 and full["window"] == WINDOW

    # RoPE: the distance check's two curves are the API's, and they coincide
    rope = full["rope"]
    drawn(page, "rope-distance-plot")
    curves = by_name(plot_data(page, "rope-distance-plot"))
    dc = rope["distance_check"]
    assert (
        curves["key at position 0"]["x"] == dc["distances"]
        and curves["key at position 0"]["y"] == dc["scores_at_start"]
    )
    assert curves[f"key at position {dc['offset']}"]["y"] == dc["scores_at_offset"]
    assert float(page.get_attribute("#rope-distance-plot", "data-gap")) == max(
        abs(a - b) for a, b in zip(dc["scores_at_start"], dc["scores_at_offset"])
    )
    assert "only on that angle" in page.text_content("#rope-distance-caption")
    drawn(page, "rope-angles-plot")
    assert plot_data(page, "rope-angles-plot")[0]["z"] == rope["angles"]
    drawn(page, "rope-q-plot")
    assert [t["z"] for t in plot_data(page, "rope-q-plot")] == [rope["q"], rope["q_rotated"]]
    assert page.get_attribute("#step-rope", "data-head") == f"{layer}.{head}"

    # the norm is RMSNorm: named so, no mean line, no mean in the table
    drawn(page, "ln-plot")
    assert page.text_content("#ln-title") == "a · RMSNorm"
    assert page.get_attribute("#step-ln", "data-kind") == "rmsnorm" and full["layernorm"]["mean"] is None
    assert page.is_visible("#step-ln p[data-kind='rmsnorm']") and page.is_hidden("#step-ln p[data-kind='layernorm']")
    table = page.inner_text("#ln-table")
    assert "RMSNorm" in table and "none (RMSNorm)" in table and "mean μ" not in table
    assert f"{full['layernorm']['std']:.5f}" in table
    assert (
        len(page.evaluate("document.getElementById('ln-plot').layout.shapes")) == 1
    )  # only the selected feature's line

    # grouped-query attention: head 3 shares key/value head 1 (with head 2)
    hd = full["head_detail"]
    assert hd["kv_head"] == 1 and hd["rotated"]
    page.wait_for_function("(v) => document.getElementById('block-panel').dataset.kvHead === v", arg=str(hd["kv_head"]))
    assert "key/value head 1" in page.text_content("#block-tag")
    assert "query heads 2–3" in page.text_content("#kv-note")
    drawn(page, "qkv-plot")
    assert [t["name"] for t in plot_data(page, "qkv-plot")][1:] == [
        "K (keys, turned, key/value head 1)",
        "V (values, key/value head 1)",
    ]

    # the window: masked like the causal mask in the masked scores and the pattern
    drawn(page, "masked-plot")
    outside = [[1 if k <= q - WINDOW else None for k in range(T)] for q in range(T)]
    for plot in ("masked-plot", "pattern-plot"):
        drawn(page, plot)
        assert by_name(plot_data(page, plot))["window mask"]["z"] == outside
    assert all(w == 0 for w in hd["pattern"][T - 1][: T - WINDOW])  # the API's weights there are 0

    # the grid: KV brackets over the heads, masked pixels outside the window
    grid_painted(page)
    groups = page.eval_on_selector_all(
        "#model-view-plot .hg-group", "gs => gs.map(g => [g.textContent, +g.dataset.from, +g.dataset.to])"
    )
    assert groups == [["KV 0", 0, 1], ["KV 1", 2, 3]]
    assert page.get_attribute("#model-view-plot", "data-window") == str(WINDOW)
    probes = [(T - 1, 0), (T - 1, T - WINDOW - 1), (T - 1, T - WINDOW), (T - 1, T - 1), (0, 1), (WINDOW - 1, 0)]
    pixels = page.evaluate(
        """(probes) => { const c = document.querySelector('#model-view-plot canvas[data-row="1"][data-col="3"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        return probes.map(([q, k]) => [...d.slice(4 * (q * c.width + k), 4 * (q * c.width + k) + 3)]); }""",
        probes,
    )
    masked = [px == MASKED_RGB for px in pixels]
    assert masked == [
        True,
        True,
        False,
        False,
        True,
        False,
    ]  # outside the window, inside it, later (causal), the first window
    drawn(page, "attention-plot")
    assert by_name(plot_data(page, "attention-plot"))["window mask"]["z"] == outside
    assert "key/value head 1" in page.evaluate("document.getElementById('attention-plot').layout.title.text")

    # the MLP is SwiGLU: named so, the SiLU curve from the API
    drawn(page, "mlp-hist-plot")
    assert full["mlp"]["gelu"] == "silu"
    assert page.get_attribute("#mlp-panel", "data-kind") == "swiglu"
    assert "SwiGLU" in page.text_content("#mlp-shapes") and "silu(gate) × value" in page.text_content("#mlp-shapes")
    assert "SwiGLU" in page.text_content("#s5-h")
    curve = by_name(plot_data(page, "mlp-hist-plot"))["SiLU (the gate)"]
    assert curve["x"] == full["mlp"]["curve_x"] and curve["y"] == full["mlp"]["curve_y"]
    drawn(page, "mlp-top-plot")
    assert page.evaluate("document.getElementById('mlp-top-plot').layout.xaxis.title.text") == "silu(gate) × value"

    # no learned position table: no W_P figure and no /embeddings/positions request
    assert page.locator("#emb-pos-plot").count() == 0 and page.locator("#pos-learned-plot").count() == 0
    assert "RoPE" in page.text_content("#emb-shapes")
    assert not any("/embeddings/positions" in u for u in page.requests)
    page.locator("#block-panel").scroll_into_view_if_needed()
    screenshot(page, "forward-modern-block")
    assert layout_faults(page) == []
    assert page.console_errors == []


def test_a_new_position_or_head_refetches_the_rope_part(page, modern):
    open_page(page, modern, {"text": MODERN_PROMPT})
    drawn(page, "rope-distance-plot")
    with page.expect_request(lambda r: r.url.endswith("/api/v1/forward") and r.method == "POST") as req:
        page.select_option("#head", "2")
    assert "rope" in req.value.post_data_json["include"]
    page.wait_for_function("document.getElementById('step-rope').dataset.head === '0.2'")
    want = api(page, modern, "/forward", {"text": MODERN_PROMPT, "include": ["rope"], "layer": 0, "head": 2})["rope"]
    drawn(page, "rope-distance-plot", 2)
    assert (
        by_name(plot_data(page, "rope-distance-plot"))["key at position 0"]["y"]
        == want["distance_check"]["scores_at_start"]
    )
    assert page.console_errors == []


def test_mixture_of_experts_panel_matches_the_api(page, moe, screenshot):
    info = api(page, moe, "/health")["info"]
    assert (info["n_expert"], info["top_k_experts"]) == (4, 2)
    sent = open_page(page, moe, {"text": MODERN_PROMPT})
    assert "moe" in sent["include"] and "mlp" not in sent["include"]
    full = api(page, moe, "/forward", {"text": MODERN_PROMPT, "include": ["moe", "mlp"]})
    assert full["mlp"] is None
    m = full["moe"]
    T = len(full["tokens"])
    assert page.is_hidden("#mlp-dense") and page.is_visible("#moe-box")
    assert "Mixture of experts" in page.text_content("#s5-h")
    # which experts each token went to: tokens x (layer, rank), the API's choices
    drawn(page, "moe-choice-plot")
    choice = plot_data(page, "moe-choice-plot")[0]
    assert choice["z"] == [[e for L in m["layers"] for e in L["choice"][t]] for t in range(T)]
    assert choice["x"] == [f"L{L['layer']} #{k + 1}" for L in m["layers"] for k in range(m["top_k"])]
    # the load per expert, per layer
    drawn(page, "moe-load-plot")
    assert plot_data(page, "moe-load-plot")[0]["z"] == [L["load"] for L in m["layers"]]
    for L in m["layers"]:
        counts = [sum(row.count(e) for row in L["choice"]) / (T * m["top_k"]) for e in range(m["n_expert"])]
        assert L["load"] == pytest.approx(counts, abs=1e-4)
    # the router's probabilities for the selected token (the last), the chosen experts ringed
    drawn(page, "moe-probs-plot")
    probs = by_name(plot_data(page, "moe-probs-plot"))
    heat = plot_data(page, "moe-probs-plot")[0]
    assert heat["z"] == [L["probs"][T - 1] for L in m["layers"]]
    assert sorted(zip(probs["chosen"]["x"], probs["chosen"]["y"])) == sorted(
        (f"E{e}", f"layer {L['layer']}") for L in m["layers"] for e in L["choice"][T - 1]
    )
    # another token: drawn from what is already here
    page.select_option("#position", "2")
    page.wait_for_function("document.getElementById('moe-box').dataset.position === '2'")
    assert plot_data(page, "moe-probs-plot")[0]["z"] == [L["probs"][2] for L in m["layers"]]
    page.locator("#moe-box").scroll_into_view_if_needed()
    screenshot(page, "forward-mixture-of-experts")
    assert page.console_errors == []
    # the overview's walk through a block of experts (its MLP node names the experts chosen here)
    walk_through(page, moe, {"text": MODERN_PROMPT})


def test_the_rope_and_experts_panels_export_to_files_that_work_with_no_network(browser, page, moe, tmp_path):
    """The panels only such a model shows (the built-in model's export test cannot reach them): the
    block panel with RoPE's three figures and the MLP panel with the experts' three, exported by their
    HTML buttons and opened from disk with every request refused, answer a hover as the live page."""
    path = "/?" + urlencode({"text": MODERN_PROMPT, "stage": "all"})
    done, skipped = live_exports(page, moe, path, tmp_path, panels={"block", "mlp"})
    figures = {fig for fig, *_ in done}
    assert {"rope-angles-plot", "rope-q-plot", "rope-distance-plot"} <= figures, (figures, skipped)
    assert {"moe-choice-plot", "moe-probs-plot", "moe-load-plot"} <= figures, (figures, skipped)
    assert {panel for _, panel, *_ in done} == {"block", "mlp"}
    assert page.console_errors == []
    check_offline(browser, [(path, *e) for e in done])


def test_captions_follow_the_served_model(page, modern):
    """Issue #26's captions on a model where the old text was wrong: grouped-query attention (the KV cache's
    factors), an RMSNorm pre-norm block, and a checkpoint that does not say what it was trained on."""
    open_page(page, modern, {"text": MODERN_PROMPT})
    prompt = page.text_content("#prompt-panel .caption")
    assert "Shakespeare-like" not in prompt and "does not say what text it was trained on" in prompt
    assert page.text_content("#rms-caption").strip().startswith("Before attention (this model normalises first")

    page.locator("#generate-panel").scroll_into_view_if_needed()
    page.click("#gen-next")
    page.wait_for_function("document.getElementById('generate-panel').dataset.steps === '1'")
    ids = [t["id"] for t in api(page, modern, "/forward", {"text": MODERN_PROMPT, "include": []})["tokens"]]
    cache = api(page, modern, "/generate/step", {"ids": ids, "step": 0, "seed": 0})["cache"]
    assert (cache["kv_heads"], cache["n_head"]) == (2, 4)
    text = page.inner_text("#gen-cache")
    m = re.search(
        r"(\d+) layers × 2 \(K and V\) × (\d+) positions × (\d+) key/value heads × (\d+) numbers per head → ([\d,]+) numbers",
        text,
    )
    assert m, text
    layers, positions, kv, d_head, numbers = (int(g.replace(",", "")) for g in m.groups())
    assert layers * 2 * positions * kv * d_head == numbers == cache["numbers"]
    assert (kv, d_head) == (cache["kv_heads"], cache["d_head"])
    assert "4 query heads share 2 key/value heads" in text
    assert page.console_errors == []
