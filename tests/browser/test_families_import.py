"""Every page with an imported model of each family issue #45 added, in a real headless Chromium.

One tiny model per family (GPT-NeoX/Pythia, Gemma 2, Gemma 3, Phi-3, OLMo 2: 2-3 layers of width 64,
random weights, tests/hf_families.py), built by `transformers` offline and imported with `gptscope
import`, served in turn. The forward page draws the family's own section (its switches, with the
prompt's numbers), the overview's walk goes through every step on GPT-NeoX's parallel block, Gemma 2's
sandwich norms and Llama 3's block, and every other page loads with no console error; where an
analysis cannot define its units on the family's block (edge circuits on a parallel or output-normed
block), its page says why, naming it, and the refused request's 422 is the only console message. A
Llama-3-shaped folder's prompt starts with its BOS token, a two-message chat renders through its
template onto the page, and /patch and /circuits, with no ready-made pair that fits its tokenizer, ask
for a corrupted prompt."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from apihelp import api_json
from exporting import layout_faults
from hf_families import BOS, PROMPT, build
from overview_checks import walk_through

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FAMILIES = ["pythia", "gemma2", "gemma3", "phi3", "olmo2"]
# a clean/corrupted pair of as many tokens each in the tiny tokenizer (it has no ready-made pairs), which
# differ near the end: a windowed model (Phi-3 here: 6 keys, 2 layers) sees only the last few tokens
PAIR = urlencode(
    {
        "clean": "To be, or not to be, that is the question: whether the mind",
        "corrupted": "To be, or not to be, that is the question: whether the king",
    }
)
# edge circuits refuse these blocks by name (model/circuits.py: check_config)
NO_EDGES = {"pythia": "parallel block", "gemma2": "sandwich norm", "gemma3": "sandwich norm", "olmo2": "OLMo 2"}
# the families whose overview's walk is gone through step by step (GPT-NeoX's parallel block, Gemma 2's sandwich)
WALKED = {"pythia", "gemma2"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    pytest.importorskip("transformers")
    from gptscope.model import importers

    root = tmp_path_factory.mktemp("families-browser")
    dests = {}
    for arch in [*FAMILIES, "llama3"]:
        build(arch, root / arch)
        dests[arch], _ = importers.import_model(root / arch, arch, root / "data")
    return dests, root / "data"


def ready(page, url: str, path: str) -> None:
    page.goto(f"{url}{path}")
    sel = '#sizes-panel[data-ready="1"]' if path.startswith("/learn") else 'body[data-ready="1"]'
    page.wait_for_selector(sel, state="attached", timeout=60_000)
    page.wait_for_load_state("networkidle", timeout=60_000)
    assert page.is_hidden("#error"), page.inner_text("#error")


def drawn(page, plot_id: str) -> None:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    page.wait_for_function(
        "(id) => +(document.getElementById(id).dataset.drawn || 0) >= 1", arg=plot_id, timeout=30_000
    )


def family_section(page, url: str, arch: str) -> None:
    """The forward page: the family's section lists its switches and draws its numbers."""
    info = api_json(page, url, "GET", "/health")["info"]
    ready(page, url, f"/?{urlencode({'text': PROMPT, 'layer': 1, 'stage': 'all'})}")  # every stage, stacked
    page.wait_for_selector('#switches-panel[data-ready="1"]', state="attached", timeout=30_000)
    notes = page.eval_on_selector_all("#sw-notes dt", "ds => ds.map(d => d.dataset.switch)")
    assert notes == info["switches"] and notes, arch
    table = lambda sel: page.eval_on_selector_all(sel, "rs => rs.map(r => [...r.cells].map(c => c.textContent))")  # noqa: E731
    if arch == "pythia":
        assert {r[5] for r in table("#sw-sub-table tbody tr")} == {"block input"}
        assert "first 4 channels" in page.inner_text("#step-rope")
    if arch == "gemma2":
        drawn(page, "sw-acap-plot")
        drawn(page, "sw-cap-plot")
        drawn(page, "dc-plot")
        assert page.get_attribute("#dc-capped", "data-value") is not None  # the self-check splits z, shows the cap
    if arch == "gemma3":
        assert table("#sw-layers-table tbody tr") == [
            ["block 0", "local", "5", "100"],
            ["block 1", "global", "all", "1,000,000 (stretched)"],
            ["block 2", "local", "5", "100"],
        ]
    if arch == "olmo2":
        assert page.inner_text("#rms-caption").startswith("On attention's output")
    drawn(page, "mlp-hist-plot")
    assert layout_faults(page) == []


def other_pages(page, url: str, arch: str) -> list[str]:
    """Every other page loads; the 422s of an analysis the family's block refuses, said on its page."""
    allowed = []
    for path in (
        "/tokenizer?" + urlencode({"text": PROMPT, "encoding": "model"}),
        "/learn",
        "/train",
        "/compare?" + urlencode({"a": "builtin", "b": f"models/{arch}", "text": PROMPT}),
        "/genealogy",
        "/features",
        "/attribution",
        f"/patch?{PAIR}",
    ):
        ready(page, url, path)
    page.goto(f"{url}/circuits?{PAIR}")
    page.wait_for_function(
        "document.body.dataset.ready === '1' || !document.getElementById('error').hidden", timeout=60_000
    )
    if arch in NO_EDGES:
        assert NO_EDGES[arch] in page.inner_text("#error"), page.inner_text("#error")
        allowed.append("422")
    else:
        assert page.is_hidden("#error"), page.inner_text("#error")
    return allowed


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_page_loads_on_each_family(page, imported, serve_app, arch, screenshot):
    dests, data = imported
    with serve_app(dests[arch], data) as url:
        family_section(page, url, arch)
        if arch == "gemma2":  # (the family with the most switches)
            screenshot(page, "family-gemma2-forward")
        if arch in WALKED:
            walk_through(page, url, {"text": PROMPT})
        allowed = other_pages(page, url, arch)
    assert [e for e in page.console_errors if not any(a in e for a in allowed)] == []


def test_a_llama3_prompt_starts_with_its_bos_and_a_chat_shows_its_special_tokens(page, imported, serve_app):
    dests, data = imported
    with serve_app(dests["llama3"], data) as url:
        ready(page, url, f"/?{urlencode({'text': PROMPT})}")
        first = page.locator("#tokens .tok").first
        assert first.text_content() == BOS and "special" in (first.get_attribute("class") or "")
        assert page.is_checked("#bos")
        ready(page, url, f"/tokenizer?{urlencode({'text': PROMPT, 'encoding': 'model'})}")
        assert "beginning-of-text" in page.inner_text("#bos-note")
        chat = "system: Answer in verse.\nuser: To be, or not to be?"
        ready(page, url, f"/?{urlencode({'text': chat, 'chat': 1})}")
        page.wait_for_selector("#chat-text:not([hidden])", timeout=30_000)
        assert page.inner_text("#chat-text").startswith(BOS + "<|start_header_id|>system<|end_header_id|>")
        specials = page.eval_on_selector_all("#tokens .tok.special", "ts => ts.map(t => t.textContent)")
        assert specials == [BOS, *["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] * 2,
                            "<|start_header_id|>", "<|end_header_id|>"]  # fmt: skip
        page.uncheck("#bos")  # a chat's template writes its own BOS: the switch leaves it
        page.wait_for_function("!new URLSearchParams(location.search).has('bos') === false")
        assert page.console_errors == []
        walk_through(page, url, {"text": PROMPT})  # the overview's walk on a Llama block (RMSNorm, SwiGLU, GQA)
        # no ready-made pair fits its tokenizer: /patch and /circuits ask for a corrupted prompt (the API's
        # refusal of one text twice, a 422 in the console, is not shown as an error)
        for path in ("/patch", "/circuits"):
            page.goto(f"{url}{path}")
            page.wait_for_function("document.getElementById('pair-note').textContent.startsWith('No ready-made pair')")
            page.wait_for_load_state("networkidle")
            assert page.is_hidden("#error") and page.input_value("#clean") == page.input_value("#corrupted")
        assert len(page.console_errors) == 2 and all("422" in e for e in page.console_errors)
