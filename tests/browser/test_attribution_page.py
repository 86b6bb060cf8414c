"""/attribution in a real headless Chromium on the built-in model and its shipped transcoder set: the
page opens on the shipped Caesar prompt, traces its graph through the job form (its progress in
features), and draws the job's own nodes and edges; a hover shows a feature's summary, a click pins it
with its detail, two pinned nodes grouped under a name are drawn as one supernode whose edges are the
sums of its members', the intervention panel draws POST /attribution/intervene's own answer, and the
URL brings all of it back on reload. Then every drawn panel exports to a file that works offline."""

from __future__ import annotations

import math
import re
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import pytest
from apihelp import api_json
from exporting import check_offline, layout_faults, live_exports
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser

JOB = re.compile(r"/api/v1/attribution/jobs/([0-9a-f]+)$")
DRAWN = 500  # graph.js's MAX_EDGES_DRAWN
NAME = "caesar, poor"

# The page coordinates of node `id` in the graph (the centre of its marker).
NODE_XY = """(id) => { const gd = document.getElementById('graph-plot');
  for (const t of gd.data) { const i = (t.customdata || []).indexOf(id);
    if (i >= 0) { const fl = gd._fullLayout; const r = gd.getBoundingClientRect();
      return [r.left + fl._size.l + fl.xaxis.l2p(t.x[i]), r.top + fl._size.t + fl.yaxis.l2p(t.y[i])]; } }
  return null; }"""
NODES = """() => document.getElementById('graph-plot').data.filter((t) => t.mode === 'markers')
  .flatMap((t) => t.customdata).filter((c) => typeof c === 'string')"""  # (an edge's middle marker has none)
MIDDLES = """() => document.getElementById('graph-plot').data.filter((t) => t.name === 'edges (their middles)')
  .flatMap((t) => t.text)"""
EDGES = """() => document.getElementById('graph-plot').data.filter((t) => t.mode === 'lines' && t.customdata)
  .flatMap((t) => t.customdata.filter((c, i) => c && i % 3 === 0))"""


def node_id(n: dict) -> str:
    """The page's name for a node (static/js/attribution/nodes.js)."""
    if n["kind"] == "logit":
        return "logit"
    if n["kind"] == "token":
        return f"t{n['position']}"
    if n["kind"] == "error":
        return f"e{n['layer']}.{n['position']}"
    return f"f{n['layer']}.{n['position']}.{n['feature']}"


def drawn_edges(res: dict, groups: dict[str, list[str]]) -> list[tuple[str, str, float]]:
    """The edges the page should draw: the answer's, each end taken to its supernode, summed where
    they meet, the ones inside a supernode left out, those whose best member is among the first DRAWN."""
    ids = [node_id(n) for n in res["nodes"]]
    group_of = {m: f"s:{name}" for name, members in groups.items() for m in members}
    merged: dict[tuple[str, str], list] = {}
    for rank, e in enumerate(res["edges"]):
        s, t = (group_of.get(ids[i], ids[i]) for i in (e["source"], e["target"]))
        if s != t:
            merged.setdefault((s, t), [0.0, rank])[0] += e["weight"]
    return sorted((s, t, w) for (s, t), (w, rank) in merged.items() if rank < DRAWN)


def assert_edges(page, expected):
    got = sorted(tuple(e) for e in page.evaluate(EDGES))
    assert [(s, t) for s, t, _ in got] == [(s, t) for s, t, _ in expected]
    assert all(math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(got, expected, strict=True))

    # each drawn edge's middle hovers its weight, and whether it raises or lowers its target
    def fmt(w: float) -> str:  # format.js's decimal (JavaScript's toExponential writes e-4 where Python writes e-04)
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{w:.2e}") if w and not 1e-3 <= abs(w) < 1e5 else f"{w:.4f}"

    texts = page.evaluate(MIDDLES)
    assert sorted(re.search(r"weight (\S+):", t).group(1) for t in texts) == sorted(fmt(w) for _, _, w in expected)
    assert all(("raises" in t) == (not re.search(r"weight -", t)) for t in texts)


def job_result(page, live_url) -> dict:
    (job_id,) = [m.group(1) for m in map(JOB.search, page.requests) if m][-1:]
    job = api_json(page, live_url, "GET", f"/attribution/jobs/{job_id}")
    assert job["status"] == "done", job
    return job


def pin(page, candidates: list[str], n: int) -> list[str]:
    """Hover the candidates in turn (the hover card must name the one under the mouse, and show a
    feature's summary), and click the first n that the mouse finds to pin them; each pin's detail
    appears beside the graph and the graph is drawn again with it outlined."""
    pinned = []
    for fid in candidates:
        page.locator("#graph-plot").scroll_into_view_if_needed()
        x, y = page.evaluate(NODE_XY, fid)
        page.mouse.move(x, y)
        try:
            page.wait_for_function(
                "(id) => document.getElementById('hover-card').dataset.id === id", arg=fid, timeout=3_000
            )
        except PlaywrightTimeout:
            continue  # a larger neighbour's marker covers its centre
        page.wait_for_selector("#hover-card .hover-summary div")
        assert page.locator("#hover-card").inner_text().count("fires most on") == 1
        page.mouse.click(x, y)
        pinned.append(fid)
        page.wait_for_function(
            "(ids) => document.getElementById('graph-plot').dataset.pins === ids", arg=",".join(pinned)
        )
        page.wait_for_selector(f"#pinned li[data-id='{fid}'] .feat-passages .passage")
        if len(pinned) == n:
            return pinned
    raise AssertionError(f"could not point at {n} of {candidates}")


def test_the_page_draws_the_jobs_graph_pins_groups_and_intervenes_and_the_url_keeps_it(page, live_url):
    pairs = api_json(page, live_url, "GET", "/patch/pairs")
    caesar = next(p for p in pairs if p["name"] == "dead-caesar")
    (shipped, *_) = api_json(page, live_url, "GET", "/transcoders")["sets"]
    page.goto(f"{live_url}/attribution")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    assert page.locator("nav a[aria-current='page']").inner_text() == "Attribution"
    assert page.locator("#text").input_value() == caesar["clean"]
    job = job_result(page, live_url)
    res = job["result"]
    assert res["transcoders"] == shipped["name"] and res["target"]["id"] == caesar["answer"]  # " Caesar", the top token
    assert page.locator("#progress-text").inner_text().startswith(f"{job['total']:,} / {job['total']:,} features · ")

    # the drawn nodes and edges are the answer's
    ids = [node_id(n) for n in res["nodes"]]
    assert Counter(page.evaluate(NODES)) == Counter(ids)
    assert_edges(page, drawn_edges(res, {}))
    stats = page.locator("#graph-stats").inner_text()
    assert f"{len(res['nodes']):,} nodes" in stats and f"{min(DRAWN, len(res['edges'])):,} of the answer's" in stats
    honesty = page.locator("#honesty-table").inner_text()
    assert f"{res['target_value']:.5f}" in honesty and f"{100 * res['error_influence']:.1f}%" in honesty

    # hover and pin the two most influential features the mouse can reach, group them, intervene
    feats = sorted((n for n in res["nodes"] if n["kind"] == "feature"), key=lambda n: -n["influence"])
    pins = pin(page, [node_id(n) for n in feats[:12]], 2)
    by_id = {node_id(n): n for n in feats}
    for fid in pins:
        n = by_id[fid]
        detail = api_json(page, live_url, "GET", f"/transcoders/{shipped['name']}/features/{n['layer']}/{n['feature']}")
        item = page.locator(f"#pinned li[data-id='{fid}']")
        assert item.locator(".passage").count() == len(detail["passages"])
        assert f"{detail['promoted'][0]['effect']:.3f}" in item.inner_text()
    for fid in pins:
        page.check(f"#pinned li[data-id='{fid}'] .pin-tick")
    page.fill("#group-name", NAME)
    page.click("#group")
    page.wait_for_function(f"() => ({NODES})().includes('s:{NAME}')")
    assert Counter(page.evaluate(NODES)) == Counter([i for i in ids if i not in pins] + [f"s:{NAME}"])
    assert_edges(page, drawn_edges(res, {NAME: pins}))

    page.fill(f"#iv-table input[data-id='{pins[1]}']", "2")
    page.click("#iv-run")
    page.wait_for_selector("#iv-result:not([hidden])")
    body = {
        "text": caesar["clean"],
        "transcoders": shipped["name"],
        "interventions": [
            {"layer": by_id[f]["layer"], "position": by_id[f]["position"], "feature": by_id[f]["feature"], "scale": s}
            for f, s in zip(pins, (0, 2), strict=True)
        ],
        "token": res["target"]["id"],
        "top_k": 10,
    }
    steer = api_json(page, live_url, "POST", "/attribution/intervene", data=body)
    assert page.evaluate("() => document.getElementById('iv-plot').data.map((t) => t.y)") == [
        [c["before"] for c in steer["compared"]],
        [c["after"] for c in steer["compared"]],
    ]
    assert f"KL(before ‖ after) = {steer['kl_divergence']:.4f} nats" in page.locator("#iv-stats").inner_text()
    assert f"logit {steer['logit_before']:.3f} → {steer['logit_after']:.3f}" in page.locator("#iv-stats").inner_text()

    q = parse_qs(urlsplit(page.url).query)
    assert q["pin"] == [",".join(pins)] and q["group"] == [f"{NAME}|{','.join(pins)}"]
    assert q["scale"] == [f"{pins[0]}:0,{pins[1]}:2"] and q["text"] == [caesar["clean"]]
    assert layout_faults(page) == []
    assert not page.console_errors, page.console_errors

    # reloaded, the URL draws the same supernode, pins and intervention
    page.goto(page.url)
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    page.wait_for_selector("#iv-result:not([hidden])")
    assert Counter(page.evaluate(NODES)) == Counter([i for i in ids if i not in pins] + [f"s:{NAME}"])
    assert page.locator("#pinned li.pin").evaluate_all("ls => ls.map((l) => l.dataset.id)") == pins
    assert page.evaluate("() => document.getElementById('iv-plot').data[1].y") == [
        c["after"] for c in steer["compared"]
    ]
    assert not page.console_errors, page.console_errors


def test_its_panels_export_to_files_that_work_offline(browser, page, live_url, tmp_path):
    res = api_json(page, live_url, "POST", "/attribution", data={"text": "First Lord:\nAlas, poor"})
    (top,) = [node_id(n) for n in res["nodes"] if n["kind"] == "feature"][:1]
    path = f"/attribution?text=First+Lord%3A%0AAlas%2C+poor&pin={top}&scale={top}:0"
    done, skipped = live_exports(page, live_url, path, tmp_path)
    assert {e[0] for e in done} == {"graph-plot", "iv-plot", "tc-fve-plot", "tc-loss-plot", "honesty-table"}, skipped
    assert not page.console_errors, page.console_errors
    check_offline(browser, [("/attribution", *e) for e in done])
