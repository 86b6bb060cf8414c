"""/compare in a real headless Chromium. A short run with snapshots is trained through the API on a
small uploaded text, on a server of its own; the page then puts the run's step-0 snapshot beside its
final weights, and every number it shows is checked against GET /api/v1/compare with the same
parameters: one strip cell per character, the totals, KL both ways, the attention maps, the logit
lenses and one bar per weight tensor. Picking a head or a character (click, arrow keys) updates the
URL and the panels. The built-in model against itself must show KL 0 and differences of exactly 0.
The /train checkpoint list links each checkpoint to /compare against the served model."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from apihelp import api_json, finished_run

from gptscope.server.config import BUILTIN_CHECKPOINT

pytestmark = pytest.mark.browser

CORPUS_TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
CORPUS = "compare-small"
RUN = {
    "preset": "tiny",
    "vocab_size": 300,
    "batch_size": 8,
    "corpus": CORPUS,
    "max_steps": 60,
    "snapshots": [0, 0.5, 1],
    "seed": 5,
}
SAMPLE = "The quick brown fox jumps over the lazy dog.\nA stitch in time"
STRIPS = {"strip-a": "char_bits_a", "strip-b": "char_bits_b", "strip-diff": "char_bits_diff"}


def fmt(x, digits: int) -> str:
    """lib/format.js's decimal: '—' for null, fixed digits, or scientific notation below 1e-3 (and at 1e5 or more)."""
    if x is None:
        return "—"
    if x != 0 and not 1e-3 <= abs(x) < 1e5:
        return f"{x:.2e}".replace("e-0", "e-").replace("e+0", "e+")
    return f"{x:.{digits}f}"


def compare_api(page, url, **params) -> dict:
    return api_json(page, url, "GET", f"/compare?{urlencode(params)}")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


@pytest.fixture(scope="module")
def trained(browser, serve_app, tmp_path_factory):
    """(url, run id): a finished 60-step run with snapshots at steps 0, 30 and 60, on a server of its own."""
    with serve_app(BUILTIN_CHECKPOINT, tmp_path_factory.mktemp("gptscope-compare-data")) as url:
        ctx = browser.new_context()
        try:
            body = finished_run(ctx, url, CORPUS, CORPUS_TEXT, RUN)
            run_id = body["id"]
            assert body["snapshots"] == [0, 30, 60]
        finally:
            ctx.close()
        yield url, run_id


def open_compare(page, url, **params) -> None:
    page.goto(f"{url}/compare?{urlencode(params)}")
    page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
    page.evaluate("document.activeElement && document.activeElement.blur()")


def wait_shown(page, **want) -> None:
    """Until the panels show the response for these parameters (body[data-shown] is its query)."""
    page.wait_for_function(
        """(want) => { const q = new URLSearchParams(document.body.dataset.shown || "");
        return Object.entries(want).every(([k, v]) => q.get(k) === String(v)); }""",
        arg={k: str(v) for k, v in want.items()},
        timeout=60_000,
    )


def plot_data(page, plot_id: str) -> list[dict]:
    """The traces of a plot once the drawing queue has drawn it (plots far from the viewport wait)."""
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    page.wait_for_function(
        "(id) => +document.getElementById(id).dataset.drawn > 0 && document.body.dataset.drawn === '1'",
        arg=plot_id,
        timeout=30_000,
    )
    return page.evaluate(
        """(id) => document.getElementById(id).data.map(t => ({
        x: t.x && Array.from(t.x, v => Array.isArray(v) ? Array.from(v) : v),
        y: t.y && Array.from(t.y), z: t.z && Array.from(t.z, r => Array.from(r)), name: t.name }))""",
        plot_id,
    )


def square(rows: list[list]) -> list[list]:
    """A causal model's attention rows (row q stops at key q) as the T x T map the page draws."""
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def strip_values(page, strip_id: str) -> list[float | None]:
    vals = page.eval_on_selector_all(f"#{strip_id} .cc", "cells => cells.map(c => c.dataset.v)")
    return [None if v == "" else float(v) for v in vals]


def check_strips_and_totals(page, api: dict) -> None:
    n = len(api["text"])
    for strip, field in STRIPS.items():
        assert page.locator(f"#{strip} .cc").count() == n, strip  # one cell per character
        assert strip_values(page, strip) == api[field], strip
        hatched = page.eval_on_selector_all(f"#{strip} .cc", "cells => cells.map(c => c.classList.contains('na'))")
        assert hatched == [v is None for v in api[field]], strip
    cell = lambda key: page.inner_text(f'#totals td[data-k="{key}"]')  # noqa: E731
    for w in ("a", "b"):
        side = api[w]
        assert cell(f"{w}.total_bits") == fmt(side["total_bits"], 3)
        assert cell(f"{w}.scored_chars") == f"{side['scored_chars']:,}"
        assert cell(f"{w}.bits_per_char") == fmt(side["bits_per_char"], 4)
        assert cell(f"{w}.common_chars") == f"{api['common_chars']:,}"
        assert cell(f"{w}.common_bits") == fmt(api[f"common_bits_{w}"], 3)
        assert page.inner_text(f'#sides td[data-k="{w}.checkpoint"]') == side["checkpoint"]
        assert page.inner_text(f'#sides td[data-k="{w}.tokens"]') == str(len(side["tokens"]))


def check_kl(page, api: dict) -> None:
    assert api["kl_ab"] is not None and api["kl_ba"] is not None
    assert page.inner_text("#kl-ab") == fmt(api["kl_ab"], 4)
    assert page.inner_text("#kl-ba") == fmt(api["kl_ba"], 4)


def check_next_and_attention(page, api: dict) -> None:
    for w in ("a", "b"):
        side = api[w]
        bars = plot_data(page, f"next-{w}-plot")[0]
        assert bars["x"] == [t["prob"] for t in side["next_token"]]
        attn = plot_data(page, f"attn-{w}-plot")[0]
        assert attn["z"] == square(side["attention"])
        lens = plot_data(page, f"lens-{w}-plot")[0]
        assert lens["z"] == side["logit_lens"]["actual_next_prob"]
    diff = plot_data(page, "attn-diff-plot")[0]
    assert diff["z"] == square(api["attention_diff"])


def test_a_snapshot_beside_the_final_weights(page, trained):
    url, run_id = trained
    a, b = f"{run_id}/step-000000", run_id
    open_compare(page, url, a=a, b=b, text=SAMPLE)
    wait_shown(page, a=a, b=b, layer=0, head=0)
    api = compare_api(page, url, a=a, b=b, text=SAMPLE, layer=0, head=0)
    assert api["same_tokenizer"] and api["params"]["same_architecture"]
    assert query_of(page.url) == {"a": a, "b": b, "text": SAMPLE, "layer": "0", "head": "0"}

    check_strips_and_totals(page, api)
    assert api["kl_ab"] > 0.01  # 60 steps of training moved the distribution: the check is not vacuous
    check_kl(page, api)
    check_next_and_attention(page, api)

    # the weights: one bar per tensor (tiny: 2 blocks), grouped by layer, the API's relative changes
    changes = api["params"]["changes"]
    traces = plot_data(page, "params-plot")
    assert len(traces) == 1 and len(traces[0]["y"]) == len(changes) == 2 + 2 * 12 + 2
    assert traces[0]["y"] == [c["relative_change"] for c in changes]
    assert (
        traces[0]["x"][0][0] == "embeddings" and "block 1" in traces[0]["x"][0] and traces[0]["x"][0][-1] == "final LN"
    )
    assert max(y for y in traces[0]["y"] if y is not None) > 0.1
    # biases start at zero: their relative change is undefined (null, no bar), and the page says so
    zero = [c["name"] for c in changes if c["a_norm"] == 0]
    assert zero and all(c["relative_change"] is None for c in changes if c["a_norm"] == 0)
    assert f"{len(zero)} tensors are all zeros in a" in page.inner_text("#params-zero")

    # another head: the URL follows, and the maps are the API's for that head
    page.select_option("#head", "2")
    page.wait_for_function("() => new URLSearchParams(location.search).get('head') === '2'")
    wait_shown(page, a=a, b=b, layer=0, head=2)
    api2 = compare_api(page, url, a=a, b=b, text=SAMPLE, layer=0, head=2)
    assert api2["a"]["attention"] != api["a"]["attention"]
    check_next_and_attention(page, api2)
    assert page.inner_text("#attn-tag") == "layer 0 · head 2"

    # a character: clicked in a strip, then stepped with the arrow keys and h / l
    page.locator("#strip-b .cc").nth(10).click()
    wait_shown(page, char=10, head=2)
    assert query_of(page.url)["char"] == "10"
    api3 = compare_api(page, url, a=a, b=b, text=SAMPLE, layer=0, head=2, char=10)
    check_kl(page, api3)
    check_next_and_attention(page, api3)
    assert page.locator("#strip-a .cc.sel").get_attribute("data-i") == "10"
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("ArrowRight")
    wait_shown(page, char=11)
    page.keyboard.press("l")
    wait_shown(page, char=12)
    page.keyboard.press("h")
    wait_shown(page, char=11)
    assert query_of(page.url)["char"] == "11" and page.input_value("#char") == "11"
    page.keyboard.press("1")
    assert page.evaluate("document.body.dataset.stage") == "1"
    page.keyboard.press("j")
    assert page.evaluate("document.body.dataset.stage") == "2"

    # the URL alone restores the view
    open_compare(page, url, **query_of(page.url))
    wait_shown(page, char=11, head=2)
    assert page.input_value("#head") == "2" and page.input_value("#ckpt-a") == a
    assert page.console_errors == []


def download(page, figure: str, fmt_: str, folder):
    with page.expect_download() as dl:
        page.click(f".dl-bar[data-for='{figure}'] button[data-format='{fmt_}']")
    path = folder / dl.value.suggested_filename
    dl.value.save_as(path)
    return path


def test_the_builtin_model_against_itself_differs_nowhere(page, live_url, tmp_path):
    open_compare(page, live_url, a="builtin", b="builtin")
    wait_shown(page, a="builtin", b="builtin")
    text = page.input_value("#text")
    api = compare_api(page, live_url, a="builtin", b="builtin", text=text, layer=0, head=0)
    check_strips_and_totals(page, api)
    assert page.inner_text("#kl-ab") == "0.0000" and page.inner_text("#kl-ba") == "0.0000"
    diffs = strip_values(page, "strip-diff")
    assert diffs.count(None) == api["a"]["tokens"][0]["end"]  # only the first token is unscored
    assert all(v == 0 for v in diffs if v is not None)
    check_next_and_attention(page, api)
    assert all(v in (0, None) for row in plot_data(page, "attn-diff-plot")[0]["z"] for v in row)
    bars = plot_data(page, "params-plot")[0]["y"]
    assert len(bars) == len(api["params"]["changes"]) and all(v == 0 for v in bars)

    # downloads: the strips as JSON (the API's arrays), SVG (one rect per character per strip) and PNG
    got = json.loads(download(page, "strips", "json", tmp_path).read_text())
    assert [got[f] for f in STRIPS.values()] == [api[f] for f in STRIPS.values()]
    svg = download(page, "strips", "svg", tmp_path)
    assert svg.name == "bits-per-character.svg" and svg.read_text().count("<rect") == 3 * len(api["text"])
    png = download(page, "strips", "png", tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(download(page, "params-plot", "json", tmp_path).read_text()) == api["params"]
    assert download(page, "attn-diff-plot", "svg", tmp_path).read_text().lstrip().startswith("<svg")
    assert page.console_errors == []


def test_the_checkpoint_list_links_to_compare(page, trained):
    url, run_id = trained
    page.goto(f"{url}/train")
    link = page.locator(f'#ckpt-table a.compare-link[data-checkpoint="{run_id}"]')
    link.wait_for(timeout=30_000)
    assert query_of(link.get_attribute("href")) == {"a": run_id, "b": "builtin"}  # b: the served model
    row = page.locator(f'#ckpt-table tr[data-run="{run_id}"]')
    row.locator("select.snap-select").select_option(f"{run_id}/step-000030")
    snap = row.locator(".snap-cell a.compare-link")
    # the select's change handler rewrites the link: wait for it rather than read it at once
    snap.and_(page.locator('a[href*="step-000030"]')).wait_for()
    assert query_of(snap.get_attribute("href")) == {"a": f"{run_id}/step-000030", "b": "builtin"}

    # two tokenizers: compared on the characters, no KL, no attention difference
    with page.expect_navigation():
        snap.click()
    page.wait_for_selector('body[data-ready="1"]', state="attached", timeout=60_000)
    wait_shown(page, a=f"{run_id}/step-000030", b="builtin")
    api = compare_api(page, url, **dict(query_of(page.url).items()))
    assert not api["same_tokenizer"] and api["kl_ab"] is None and api["attention_diff"] is None
    check_strips_and_totals(page, api)
    assert page.locator("#kl-ab").count() == 0 and "KL is not defined" in page.inner_text("#kl-stats")
    assert page.is_hidden("#attn-diff-fig") and page.is_visible("#attn-note")
    assert page.is_hidden("#params-fig") and "different architectures" in page.inner_text("#params-stats")
    assert page.console_errors == []

    # a layer the smaller model lacks falls back to 0 (after the API's 422), within both models' bounds
    page.console_errors.clear()
    open_compare(page, url, a=run_id, b="builtin", text=SAMPLE, layer=3, head=3)
    wait_shown(page, a=run_id, b="builtin", layer=0, head=0)
    assert page.locator("#layer option").count() == 2 and page.locator("#head option").count() == 4
    assert query_of(page.url)["layer"] == "0"
    assert all("422" in e for e in page.console_errors), page.console_errors
