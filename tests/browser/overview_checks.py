"""The forward page's overview (issue #58) on any loaded model: its walk, step by step. The tests that
serve an imported model (a GPT-2-shaped one, a Llama, Gemma 2, GPT-NeoX, a mixture of experts,
nanochat) run `walk_through` on it; tests/browser/test_overview_page.py checks the built-in model's walk
against the API's captions."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

from exporting import layout_faults

# What a step of the walk shows: its box's texts, the diagram's highlighted nodes, the open stage and
# every stage on show, the URL's walk and stage.
STEP = """() => {
  const q = new URLSearchParams(location.search);
  return {
    step: document.body.dataset.walkStep,
    counter: document.getElementById("walk-step").textContent,
    title: document.getElementById("walk-title").textContent.trim(),
    caption: document.getElementById("walk-caption").textContent.trim(),
    boxShown: !document.getElementById("walk").hidden,
    lit: [...document.querySelectorAll("#overview-svg .walk-on")]
      .filter((e) => e.getBoundingClientRect().width > 0).map((e) => e.dataset.node || e.dataset.block),
    open: document.body.dataset.openStage,
    wants: document.getElementById("walk").dataset.stage,
    shown: [...document.querySelectorAll("section.stage")].filter((s) => s.checkVisibility()).map((s) => s.id),
    urlWalk: q.get("walk"),
    urlStage: q.get("stage"),
  };
}"""


def step_state(page) -> dict:
    return page.evaluate(STEP)


def check_step(page, i: int, errors_before: int, layout: bool = True) -> dict:
    """Step i (1-based) on show: a title, a caption with a number, its node lit in the diagram, its
    stage open alone (and in the URL), no console error; with `layout`, once the stage's requests are
    answered and its plots drawn, the page laid out with no LAYOUT_FAULTS."""
    page.wait_for_function("(i) => document.body.dataset.walkStep === String(i)", arg=i, timeout=30_000)
    if layout:
        page.evaluate("() => gptscopeSettled()")
    s = step_state(page)
    where = f"walk step {i} ({s['title']!r})"
    assert s["boxShown"] and s["counter"].startswith(f"step {i} of "), (where, s)
    assert s["title"], where
    assert re.search(r"\d", s["caption"]), (where, s["caption"])
    assert s["lit"], (where, "no node of the diagram is highlighted")
    assert s["open"] and s["open"] == s["wants"] and s["shown"] == [f"{s['open']}-panel"], (where, s)
    assert s["urlWalk"] == str(i) and s["urlStage"] == s["open"], (where, s)
    if layout:
        faults = layout_faults(page)
        assert faults == [], (where, faults)
    assert page.console_errors[errors_before:] == [], (where, page.console_errors[errors_before:])
    return s


def walk_through(page, url: str, params: dict | None = None) -> list[dict]:
    """Open the forward page on the walk's first step (`/?walk=1`) and go through every step with the
    → key, one step back with ←, then close it with Esc: check_step at each step, the layout check
    where a stage opens for the first time (the steps that open it again change nothing of the page's
    layout: the same stage, the same numbers, another node lit); returns what each step showed."""
    errors_before = len(page.console_errors)
    page.goto(f"{url}/?{urlencode({**(params or {}), 'walk': 1})}")
    page.wait_for_selector('body[data-overview="1"]', state="attached", timeout=120_000)
    page.evaluate("document.activeElement && document.activeElement.blur()")
    first = check_step(page, 1, errors_before)
    n = int(first["counter"].rsplit(" ", 1)[1])
    assert n >= 8, first["counter"]
    shown, seen = [first], {first["open"]}

    def step(i: int) -> dict:
        s = check_step(page, i, errors_before, layout=False)
        if s["open"] not in seen:  # a stage opened for the first time: drawn, then checked
            seen.add(s["open"])
            s = check_step(page, i, errors_before)
        return s

    for i in range(2, n + 1):
        page.keyboard.press("ArrowRight")
        shown.append(step(i))
        if i == 3:  # one step back, and on again
            page.keyboard.press("ArrowLeft")
            assert step(2)["title"] == shown[1]["title"]
            page.keyboard.press("ArrowRight")
            step(3)
    page.keyboard.press("Escape")
    page.wait_for_function("document.body.dataset.walkStep === ''")
    s = step_state(page)
    assert not s["boxShown"] and not s["open"] and s["shown"] == [] and s["lit"] == [], s
    assert not {"walk", "stage"} & set(parse_qs(urlsplit(page.url).query)), page.url
    assert page.console_errors[errors_before:] == [], page.console_errors[errors_before:]
    return shown
