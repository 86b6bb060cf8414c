"""Every page with an imported nanochat model, in a real headless Chromium.

The model is the checkpoint nanochat's own code wrote for the import's parity test
(tests/data/nanochat/92d63d4: random weights, 4 layers of width 24, its tokenizer.pkl), imported with
`gptscope import`. Each page loads and logs no console error; the forward page draws nanochat's own
stages (the smear, the lambdas, the value embeddings, the backout, the softcap) with the model's
numbers, its self-check splits the logit before the cap and shows the cap beside it, and the
overview's walk goes through every step."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest
from apihelp import api_json
from exporting import layout_faults
from overview_checks import walk_through

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "nanochat" / "92d63d4"
PROMPT = "To be, or not to be, that is the question: whether 'tis nobler"


@pytest.fixture(scope="module")
def nanochat(tmp_path_factory, serve_app):
    from gptscope.model import importers

    data = tmp_path_factory.mktemp("nanochat-data")
    dest, _summary = importers.import_model(FIXTURE, "nanochat-d4", data)
    with serve_app(dest, data) as url:
        yield url


def ready(page, url: str, path: str) -> None:
    page.goto(f"{url}{path}")
    sel = '#sizes-panel[data-ready="1"]' if path.startswith("/learn") else 'body[data-ready="1"]'
    page.wait_for_selector(sel, state="attached", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    assert page.is_hidden("#error"), page.inner_text("#error")


def drawn(page, plot_id: str) -> None:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    page.wait_for_function(
        "(id) => +(document.getElementById(id).dataset.drawn || 0) >= 1", arg=plot_id, timeout=60_000
    )


def test_forward_page_draws_nanochats_own_stages(page, nanochat, screenshot):
    ready(page, nanochat, f"/?{urlencode({'text': PROMPT, 'layer': 1, 'stage': 'all'})}")  # every stage, stacked
    full = api_json(page, nanochat, "POST", "/forward", data={"text": PROMPT, "include": ["stream_extras"]})
    x = full["stream_extras"]
    page.wait_for_selector('#stream-extras-panel[data-ready="1"]', state="attached", timeout=60_000)
    for plot in ("sx-smear-plot", "sx-ve-plot", "sx-backout-plot", "sx-cap-plot"):
        drawn(page, plot)
    # the smear's gates and the value embeddings' gates are the API's own numbers
    assert page.evaluate("document.getElementById('sx-smear-plot').data[0].y") == x["smear"]["gate"]
    ve = page.evaluate("document.getElementById('sx-ve-plot').data[0]")
    assert ve["x"] == ["L1 kv0", "L1 kv1", "L3 kv0", "L3 kv1"]
    assert [row[0] for row in ve["z"]] == [row[0] for row in x["value_embeds"][0]["gate"]]
    rows = page.eval_on_selector_all("#sx-mix-table tbody tr", "rs => rs.map(r => r.cells[0].textContent)")
    assert rows == ["block 0", "block 1", "block 2", "block 3", "x₀ itself"]
    assert page.text_content("#sx-backout-stats").startswith("λ_b = ")
    # the logit lens's last row is the stream after the backout; the self-check shows the cap
    drawn(page, "lens-plot")
    ticks = page.evaluate("document.getElementById('lens-plot').layout.yaxis.ticktext")
    assert ticks[-1] == "after backout" and len(ticks) == 6
    drawn(page, "dc-plot")
    assert page.get_attribute("#dc-capped", "data-value") is not None
    assert abs(float(page.get_attribute("#dc-error", "data-value"))) < 1e-4
    screenshot(page, "nanochat-import-forward")
    assert layout_faults(page) == []
    assert page.console_errors == []
    # the overview's walk, in nanochat's words (its mix, smear and backout in the diagram)
    walk_through(page, nanochat, {"text": PROMPT})


@pytest.mark.parametrize(
    "path",
    [
        "/tokenizer?" + urlencode({"text": PROMPT, "encoding": "model"}),
        "/learn",
        "/compare?" + urlencode({"a": "builtin", "b": "models/nanochat-d4", "text": PROMPT}),
        "/train",
        "/genealogy",
        "/features",
    ],
)
def test_every_other_page_loads_with_no_console_error(page, nanochat, path):
    ready(page, nanochat, path)
    assert page.console_errors == []


def test_the_patch_page_says_why_it_cannot_patch_nanochats_block(page, nanochat):
    """Patching restarts a run from a block's stream, which nanochat's block does not allow yet: the page
    loads, and its first sweep's refusal names the reason instead of a wrong answer."""
    page.goto(f"{nanochat}/patch")
    page.wait_for_selector("#error:not([hidden])", timeout=60_000)
    assert "nanochat's block" in page.inner_text("#error")
    assert [e for e in page.console_errors if "422" not in e] == []
