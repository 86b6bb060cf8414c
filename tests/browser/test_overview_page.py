"""The forward page's first screen, the model at a glance (issue #58), in a real headless Chromium at
1440 x 900 on the built-in model: the whole model shows without scrolling, every node opens its stage
in one click and "back" returns, a newcomer reads which token the last block's strongest head reads
off the first screen (checked against the API's attention), the probabilities under the overview's
own temperature and top-k are POST /api/v1/next-token's, and the walk shows the API's captions step
by step. One page load serves every test (they run in this order)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from exporting import FIGURES, layout_faults
from overview_checks import check_step, step_state

pytestmark = pytest.mark.browser

VIEW = {"width": 1440, "height": 900}
# the parts of the model a reader must see on the first screen, besides the blocks
FIRST_SCREEN = ["tokens", "embed", "final_norm", "unembed", "probs"]
BOXES = """(sels) => sels.flatMap((sel) => [...document.querySelectorAll(sel)].map((e) => {
  const r = e.getBoundingClientRect();
  return { sel, top: r.top, left: r.left, bottom: r.bottom, right: r.right, width: r.width };
}))"""
SHOWN_STAGES = (
    "() => [...document.querySelectorAll('section.stage')].filter((s) => s.checkVisibility()).map((s) => s.id)"
)


def visible(text: str) -> str:
    """Python twin of static/js/lib/format.js `visible`: whitespace the reader can see."""
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def post(page, url: str, path: str, body: dict) -> dict:
    resp = page.request.post(f"{url}/api/v1{path}", data=body)
    assert resp.ok, resp.text()
    return resp.json()


@pytest.fixture(scope="module")
def wide(shared_context, live_url):
    """The forward page as it opens at 1440 x 900 (a page of the shared context, kept for the module;
    `console_errors` as conftest's pages have it)."""
    pg = shared_context.new_page()
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda err: pg.console_errors.append(f"pageerror: {err}"))
    pg.set_viewport_size(VIEW)
    pg.goto(f"{live_url}/")
    pg.wait_for_selector('body[data-overview="1"]', state="attached")
    pg.wait_for_selector('#overview-probs[data-state="ready"]', state="attached")
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    try:
        yield pg
    finally:
        pg.close()


def in_view(boxes: list[dict]) -> list[dict]:
    """The boxes that are not wholly on the 1440 x 900 screen (or not drawn)."""
    return [
        b
        for b in boxes
        if not (b["width"] > 0 and b["top"] >= 0 and b["left"] >= 0 and b["bottom"] <= 900 and b["right"] <= 1440)
    ]


def test_the_first_screen_shows_the_whole_model_and_what_the_last_head_reads(wide, live_url):
    page = wide
    # the whole model, its probabilities beside it, without scrolling; no stage open below
    assert page.evaluate("scrollY") == 0
    sels = ["#overview-svg g.ov-block", *(f'#overview-svg [data-node="{n}"]' for n in FIRST_SCREEN), "#overview-probs"]
    boxes = page.evaluate(BOXES, sels)
    assert {b["sel"] for b in boxes} == set(sels), "a part of the model is not drawn"
    n_layer = page.request.get(f"{live_url}/api/v1/health").json()["info"]["n_layer"]
    assert page.locator("#overview-svg g.ov-block.full").count() == n_layer == 6
    assert in_view(boxes) == []
    assert page.evaluate(SHOWN_STAGES) == []
    assert page.locator("#overview-probs li").count() >= 5

    # "which earlier token does the last position's strongest head in the last block read?": read off
    # the first screen (one action: opening the app), as the API's attention says
    prompt = page.input_value("#prompt")
    api = post(page, live_url, "/forward", {"text": prompt, "include": ["overview", "attention"]})
    last = api["overview"]["layers"][-1]
    strongest = last["strongest"][0]
    reads = last["heads"][strongest]["key"]
    node = page.locator(f'#overview-svg [data-node="block.{n_layer - 1}.attn"]')
    assert node.get_attribute("data-strongest") == str(strongest)
    assert node.get_attribute("data-reads") == str(reads)
    row = api["attention"]["pattern"][n_layer - 1][strongest][len(api["tokens"]) - 1]
    assert max(range(len(row)), key=row.__getitem__) == reads
    # “h2 reads “·Caesar”” (or, where that is too wide, “h2 → “·Cae…”)
    said = re.fullmatch(r"h(\d+) (?:reads|→) “(.*)", node.locator(".ov-read").text_content())
    assert said and said[1] == str(strongest), said
    assert (visible(api["tokens"][reads]["text"]) + "”").startswith(said[2].rstrip("…")), said
    assert in_view(page.evaluate(BOXES, [f'#overview-svg [data-node="block.{n_layer - 1}.attn"] .ov-read'])) == []

    # the overview is one of the figures the layout check reads, and reads well (no label on another)
    assert "overview-svg" in page.evaluate(FIGURES)
    assert page.locator("#overview-svg text").count() > 30
    assert layout_faults(page) == []
    assert page.console_errors == []


def test_every_node_opens_its_stage_in_one_click_and_back_returns(wide):
    page = wide
    nodes = page.eval_on_selector_all(
        "#overview-svg [data-node][data-stage]", "ns => ns.map((n) => [n.dataset.node, n.dataset.stage, n.tagName])"
    )
    first = {}
    for node, stage, tag in nodes:
        first.setdefault(stage, (node, tag))
    stages = page.eval_on_selector_all("section.stage", "ss => ss.map((s) => s.id.replace(/-panel$/, ''))")
    assert set(first) == set(stages), "every stage is one click from the diagram"
    for stage, (node, tag) in first.items():
        target = page.locator(f'#overview-svg [data-node="{node}"]')
        # a box's corner (its centre may be one of its head cells, a node of its own)
        target.click(position=None if tag == "rect" else {"x": 5, "y": 5})
        page.wait_for_function("(s) => document.body.dataset.openStage === s", arg=stage)
        assert page.evaluate(SHOWN_STAGES) == [f"{stage}-panel"], node
        assert query_of(page.url).get("stage") == stage, node
        page.click(f"#{stage}-panel button.stage-back")
        page.wait_for_function("document.body.dataset.openStage === ''")
        assert page.evaluate(SHOWN_STAGES) == [], node
        assert "stage" not in query_of(page.url), node
        assert in_view(page.evaluate(BOXES, ["#overview-svg"])) == [], node
        assert page.evaluate("(n) => document.activeElement?.dataset.node === n", node), node
    assert page.console_errors == []


def test_the_walk_shows_the_apis_captions_step_by_step(wide, live_url):
    page = wide
    steps = post(page, live_url, "/forward", {"text": page.input_value("#prompt"), "include": ["overview"]})[
        "overview"
    ]["walk"]
    errors = len(page.console_errors)
    page.click("#walk-start")
    i, back = 1, False
    while True:
        s = check_step(page, i, errors)
        want = steps[i - 1]
        assert s["counter"] == f"step {i} of {len(steps)}"
        assert (s["title"], s["caption"], s["open"]) == (want["title"], want["caption"], want["stage"])
        # the node itself, or (a part a compact block does not draw) its block
        assert s["lit"][0] == want["node"] or want["node"].startswith(s["lit"][0] + "."), (s["lit"], want)
        if i == 4 and not back:
            page.click("#walk-back")
            i, back = 3, True
        elif i == len(steps):
            break
        else:
            page.click("#walk-next")
            i += 1
    page.keyboard.press("Escape")
    page.wait_for_function("document.body.dataset.walkStep === ''")
    s = step_state(page)
    assert not s["boxShown"] and not s["open"] and s["lit"] == [] and s["urlWalk"] is None, s
    assert page.console_errors == []


def test_the_overviews_temperature_and_top_k_give_the_apis_probabilities(wide, live_url):
    page = wide
    for control, value in (("ov-temperature", "0.5"), ("ov-top-k", "5")):
        page.evaluate(
            "([id, v]) => { const e = document.getElementById(id); e.value = v;"
            " e.dispatchEvent(new Event('input', { bubbles: true })); }",
            [control, value],
        )
    page.wait_for_function(
        """() => { const l = document.getElementById('overview-probs');
        return l.dataset.state === 'ready' && l.dataset.settings === JSON.stringify(
          { temperature: 0.5, top_k: 5, top_p: null, position: null }); }"""
    )
    settings = json.loads(page.get_attribute("#overview-probs", "data-settings"))
    body = {"text": page.input_value("#prompt"), "temperature": 0.5, "top_k": 5, "show": 8}
    api = post(page, live_url, "/next-token", body)
    shown = page.eval_on_selector_all(
        "#overview-probs li", "ls => ls.map((l) => [+l.dataset.id, +l.dataset.p, l.classList.contains('cut')])"
    )
    assert shown == [[c["id"], c["p_final"], not c["kept"]] for c in api["candidates"]], settings
    assert sum(not cut for _, _, cut in shown) == 5
    # one state with stage 7's sliders, kept in the URL
    q = query_of(page.url)
    assert (q.get("temperature"), q.get("top_k")) == ("0.5", "5")
    assert (page.input_value("#temperature"), page.input_value("#top-k")) == ("0.5", "5")
    assert page.console_errors == []
