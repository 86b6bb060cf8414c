"""The frame: every declared page (server/pages.py: PAGES) has its route, nav link, template and JS
entry, and the export knows its panels; every forward stage (STAGES) has its section and a JS panel;
every part of the trace (server/explain/parts.py: PARTS) is drawn by exactly one JS panel registered
in static/js/forward/main.js's table. No browser: the served HTML and the JS text are read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gptscope.server.explain.parts import NAMES
from gptscope.server.pages import OVERVIEW, PAGE_NAMES, PAGES, PANEL, STAGE_NO, STAGES, panels

ROOT = Path(__file__).resolve().parents[1]
FORWARD = ROOT / "static" / "js" / "forward"


@pytest.mark.parametrize("page", PAGES, ids=PAGE_NAMES)
def test_every_declared_page_has_its_route_nav_link_template_and_entry(client, page):
    r = client.get(page.path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), page
    assert f'<a href="{page.path}" aria-current="page">{page.nav}</a>' in r.text  # its own, marked
    for other in PAGES:  # and every other page's
        assert f'<a href="{other.path}" >{other.nav}</a>' in r.text or other is page, other
    assert (ROOT / "templates" / page.template).is_file()
    title = re.search(r"<title>(.*?)</title>", r.text, re.S)
    assert title and "<" not in title.group(1) and len(title.group(1)) < 80, title  # plain words, one block's
    assert f'import {{ init }} from "{page.entry}"; init();' in r.text
    main = (ROOT / page.entry.removeprefix("/")).read_text(encoding="utf-8")
    assert re.search(r"^export (async )?function init\(\)", main, re.M), page.entry
    assert r.headers["link"].startswith(f"<{page.twin}"), r.headers["link"]
    # GET /api/v1/export knows every panel the page shows (a page may lack some for a model)
    shown = PANEL.findall(r.text)
    assert shown and set(shown) <= set(panels(page.name)), (shown, panels(page.name))


def test_every_declared_page_is_opened_by_a_browser_test_that_runs_the_layout_check():
    """The browser tests that call exporting.live_exports (tests/browser/test_export*.py, and a page's own
    test such as test_attribution_page.py) export every drawn panel of each page they open, which runs
    exporting.LAYOUT_FAULTS on the page: labels over each other, download bars away from their figures,
    narrow figures in empty rows, blank bands between cards (issue #49). Each declared page must be one
    of the paths they open."""
    opened = set()
    for path in sorted((ROOT / "tests" / "browser").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "live_exports(" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            v = node.value if isinstance(node, ast.Constant) else None
            if isinstance(v, str) and v.startswith("/") and not re.search(r"\s", v):  # a path, not a docstring
                opened.add(v.split("?")[0])
    assert {p.path for p in PAGES} <= opened, sorted({p.path for p in PAGES} - opened)


def test_the_exports_page_choices_are_the_declared_pages(client):
    params = client.get("/openapi.json").json()["paths"]["/api/v1/export"]["get"]["parameters"]
    (page,) = [p for p in params if p["name"] == "page"]
    assert tuple(page["schema"]["enum"]) == PAGE_NAMES


def js_panels() -> dict[str, dict]:
    """static/js/forward's panel modules: file -> {stage, parts} of its exported `panel`."""
    out = {}
    for path in sorted(FORWARD.glob("panel_*.js")):
        m = re.search(
            r'^export const panel = \{\n  stage: "([a-z-]+)",\n  parts: \[([^\]]*)\],',
            path.read_text(encoding="utf-8"),
            re.M,
        )
        assert m, f"{path.name} exports no `panel = {{ stage, parts, ... }}`"
        out[path.name] = {"stage": m.group(1), "parts": re.findall(r'"(\w+)"', m.group(2))}
    return out


def registered() -> list[str]:
    """The files of main.js's PANELS table, in its order."""
    main = (FORWARD / "main.js").read_text(encoding="utf-8")
    imported = dict(re.findall(r'^import \{ panel as (\w+)(?:, \w+)* \} from "\./(panel_\w+\.js)";', main, re.M))
    table = re.search(r"^const PANELS = \[([^\]]*)\];", main, re.M | re.S)
    assert table, "main.js has no PANELS table"
    names = re.findall(r"\w+", table.group(1))
    assert set(names) <= set(imported), (names, imported)
    return [imported[n] for n in names]


def test_every_part_is_drawn_by_one_registered_panel_of_a_declared_stage():
    modules = js_panels()
    table = registered()
    assert sorted(table) == sorted(modules), "a panel_*.js missing from main.js's PANELS (or listed twice)"
    drawn = [part for m in modules.values() for part in m["parts"]]
    assert sorted(drawn) == sorted(NAMES), "every part of PARTS drawn by exactly one panel"
    stages = [OVERVIEW, *(s.name for s in STAGES)]  # the first screen's panel, then the stages'
    for file, m in modules.items():
        assert m["stage"] in stages, (file, m["stage"])
    assert {m["stage"] for m in modules.values()} == set(stages), "a stage without a panel"
    order = [stages.index(modules[f]["stage"]) for f in table]
    assert order == sorted(order), "main.js's PANELS in the page's order"


def test_every_stage_has_its_section_and_its_number(client):
    html = client.get("/").text
    for stage in STAGES:
        template = (ROOT / "templates" / stage.template).read_text(encoding="utf-8")
        assert f'id="{stage.name}-panel"' in template, stage
        if not stage.numbered:  # the classifier's: only a classifier's page shows it
            assert f'id="{stage.name}-panel"' not in html
            continue
        n = STAGE_NO[stage.name]
        assert f'id="{stage.name}-panel" data-stage="{n}"' in html, stage
        assert f'<h2 id="s{n}-h">{n} · ' in html, stage
        assert f'<li><a href="#{stage.name}-panel" data-stage="{n}" title="{stage.title}">' in html, stage
    sections = PANEL.findall(html)
    assert sections == ["prompt", OVERVIEW, *(s.name for s in STAGES if s.numbered)], sections
