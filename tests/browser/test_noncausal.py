"""A checkpoint trained WITHOUT the causal mask, served by a second live server: every attention view
of the forward page draws its real upper triangle (a token also reads later tokens), with no grey
"causal mask" cells, and the header says so. The built-in (causal) model still shows the mask."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from exporting import layout_faults

from gptscope.model.train import TrainConfig, train

pytestmark = pytest.mark.browser

PROMPT = "ROMEO: But soft, what light"
LINES = [
    "ROMEO: But soft, what light through yonder window breaks?",
    "JULIET: O Romeo, Romeo, wherefore art thou Romeo?",
    "It is the east, and Juliet is the sun.",
    "Deny thy father and refuse thy name.",
]


@pytest.fixture(scope="module")
def noncausal_url(tmp_path_factory, serve_app):
    """A tiny model trained for a few steps with overrides={"causal": False}, served on its own port."""
    root = tmp_path_factory.mktemp("noncausal")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(LINES * 60), encoding="utf-8")  # ~11 KB
    tc = TrainConfig(
        corpus=str(corpus),
        preset="tiny",
        vocab_size=300,
        max_steps=20,
        batch_size=4,
        overrides={"causal": False},
        device="cpu",
    )
    train(tc, out=root / "checkpoint", progress=False)
    with serve_app(root / "checkpoint", tmp_path_factory.mktemp("noncausal-data")) as url:
        yield url


def forward(page, url: str, **extra) -> dict:
    resp = page.request.post(
        f"{url}/api/v1/forward", data={"text": PROMPT, "include": ["attention", "head_detail"], **extra}
    )
    assert resp.ok, resp.text()
    return resp.json()


def open_forward(page, url: str, **params) -> None:
    page.goto(f"{url}/?{urlencode({'text': PROMPT, 'stage': 'all', **params})}")  # every stage, stacked
    page.wait_for_selector('body[data-ready="1"]', state="attached")


def drawn(page, plot_id: str) -> None:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    page.wait_for_function("(id) => +(document.getElementById(id).dataset.drawn || 0) >= 1", arg=plot_id)


def big_map(page) -> dict:
    return page.evaluate("""() => { const gd = document.getElementById('attention-plot');
        return { names: gd.data.map((t) => t.name), z: gd.data[0].z }; }""")


def head_view_lines(page) -> dict:
    """How many head-view lines go to an earlier/the same key, and how many to a later key (drawn lower)."""
    page.locator("#head-view").scroll_into_view_if_needed()
    page.wait_for_selector("#head-view svg line", state="attached")
    return page.evaluate("""() => { const ls = [...document.querySelectorAll('#head-view svg line')];
        return { later: ls.filter((l) => +l.getAttribute('y2') > +l.getAttribute('y1')).length,
                 earlier: ls.filter((l) => +l.getAttribute('y2') <= +l.getAttribute('y1')).length }; }""")


def query_bars(page) -> list:
    drawn(page, "query-bars-plot")
    return page.evaluate("document.getElementById('query-bars-plot').data[0].y")


def test_a_model_without_the_causal_mask_is_drawn_with_its_upper_triangle(page, noncausal_url, screenshot):
    api = forward(page, noncausal_url, position=0)
    assert api["causal"] is False
    pattern = api["attention"]["pattern"][0][0]
    T = len(api["tokens"])
    assert T >= 5
    assert any(pattern[q][k] > 0 for q in range(T) for k in range(q + 1, T))  # the model really reads later tokens

    open_forward(page, noncausal_url, position=0)
    assert page.get_attribute("body", "data-causal") == "false"
    assert "no causal mask" in page.inner_text(".model-badge")

    # the big head map: the API's full square, no causal-mask overlay, real values above the diagonal
    page.wait_for_function("document.getElementById('attention-plot').data !== undefined")
    m = big_map(page)
    assert m["names"] == ["attention"]
    assert m["z"] == pattern
    above = [m["z"][q][k] for q in range(T) for k in range(q + 1, T)]
    assert all(v is not None for v in above) and any(v > 0 for v in above)
    assert "cannot see" not in page.evaluate("JSON.stringify(document.getElementById('attention-plot').data)")
    assert "no causal mask" in page.inner_text("#attention-panel")

    # the selected query (position 0) reads every key: T bars, and head-view lines to later tokens
    assert query_bars(page) == list(range(T))
    assert head_view_lines(page)["later"] > 0

    # stage 3: no −∞ cells after the (absent) mask
    drawn(page, "masked-plot")
    masked = page.evaluate("document.getElementById('masked-plot').data[0].z")
    assert masked == api["head_detail"]["masked_scores"]
    assert all(v is not None for row in masked for v in row)
    screenshot(page, "noncausal-forward")
    assert layout_faults(page) == []
    assert page.console_errors == []


def test_the_builtin_causal_model_still_shows_the_mask(page, live_url):
    api = forward(page, live_url, position=0)
    assert api["causal"] is True
    T = len(api["tokens"])
    open_forward(page, live_url, position=0)
    assert page.get_attribute("body", "data-causal") == "true"
    assert "no causal mask" not in page.inner_text(".model-badge")
    page.wait_for_function("document.getElementById('attention-plot').data !== undefined")
    m = big_map(page)
    assert m["names"] == ["attention", "causal mask"]
    assert page.evaluate("document.getElementById('attention-plot').data[1].z") == [
        [1 if k > q else None for k in range(T)] for q in range(T)
    ]
    assert query_bars(page) == [0]  # position 0 reads only itself
    assert head_view_lines(page)["later"] == 0
    drawn(page, "masked-plot")
    assert page.evaluate("document.getElementById('masked-plot').data[0].z[0][1]") is None
    assert page.console_errors == []
