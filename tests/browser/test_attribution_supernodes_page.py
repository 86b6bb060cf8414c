"""/attribution's automatic supernodes and trust figures (issue #64) in a real headless Chromium on the built-in
model and its shipped transcoder set: on the Caesar prompt's graph, "Propose supernodes" sends the graph's own
request to POST /attribution/supernodes and shows that answer's signals and groups (each member's own effect,
the group's effect against their sum); the ' Caesar' group accepted is drawn as one hexagon in place of its
members and kept in the URL; "Check this graph" shows POST /attribution/trust's own figures for the same
request, its checked features drawn as edge against real effect."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from apihelp import api_json, decimal, pct
from exporting import layout_faults

pytestmark = pytest.mark.browser

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"
GROUP = "' Caesar'"
NODES = """() => document.getElementById('graph-plot').data.filter((t) => t.mode === 'markers')
  .flatMap((t) => t.customdata).filter((c) => typeof c === 'string')"""
HEXAGONS = """() => document.getElementById('graph-plot').data.filter((t) => t.marker?.symbol === 'hexagon')
  .flatMap((t) => t.customdata)"""
CELLS = """(sel) => [...document.querySelectorAll(sel)].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent))"""


def fid(s: dict) -> str:
    return f"f{s['layer']}.{s['position']}.{s['feature']}"


def test_proposed_supernodes_accepted_and_the_graph_checked_on_the_real_model(page, live_url):
    page.goto(f"{live_url}/attribution?{urlencode({'text': CAESAR})}")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)

    # proposed with the graph's own request; the signals and groups are the answer's
    page.select_option("#propose-signal", "auto")
    with page.expect_request(re.compile(r"/api/v1/attribution/supernodes$")) as sent:
        page.click("#propose")
    body = sent.value.post_data_json
    assert body["text"] == CAESAR and body["signal"] == "auto"
    page.wait_for_selector("#propose-box[data-loaded='auto']", timeout=60_000)
    ans = api_json(page, live_url, "POST", "/attribution/supernodes", data=body)
    rows = page.evaluate(CELLS, "#propose-signals tbody tr")
    assert len(rows) == len(ans["signals"])
    for row, s in zip(rows, ans["signals"], strict=True):
        assert row[0] == s["signal"] and row[2] == decimal(s["threshold"], 2)
        if s["available"]:
            assert row[3:7] == [str(s["groups"]), pct(s["score"]), pct(s["agreement"]), pct(s["coverage"])]
        else:
            assert row[3] == f"unavailable: {s['reason']}"
        assert (row[-1] == "✓ proposed") == (s["signal"] == ans["signal"])
    items = page.locator("#propose-groups li.proposal")
    assert items.count() == len(ans["groups"])
    for i, g in enumerate(ans["groups"]):
        item = items.nth(i)
        assert item.get_attribute("data-name") == g["name"]
        assert item.locator(".group-effect").inner_text() == decimal(g["effect"])
        assert item.locator(".members-effect").inner_text() == decimal(g["members_effect"])
        cells = page.evaluate(CELLS, f"#propose-groups li[data-index='{i}'] tbody tr")
        assert [(c[1], c[3], c[4]) for c in cells] == [
            (m["source"]["label"], decimal(m["effect"]), pct(m["influence"], 2)) for m in g["members"]
        ]

    # the ' Caesar' group accepted: one hexagon in place of its members, kept in the URL
    caesar = next(g for g in ans["groups"] if g["name"] == GROUP)
    members = [fid(m["source"]) for m in caesar["members"]]
    before = page.evaluate(NODES)
    assert set(members) <= set(before)
    page.locator(f'#propose-groups li.proposal[data-name="{GROUP}"] button.accept').click()
    page.wait_for_function(
        "(id) => document.getElementById('graph-plot').data.some((t) => (t.customdata || []).includes(id))",
        arg=f"s:{GROUP}",
    )
    assert page.evaluate(HEXAGONS) == [f"s:{GROUP}"]
    drawn = page.evaluate(NODES)
    assert not set(members) & set(drawn) and len(drawn) == len(before) - len(members) + 1
    assert page.locator(f'#supernodes li[data-name="{GROUP}"]').count() == 1
    q = parse_qs(urlsplit(page.url).query)
    assert q["group"] == [f"{GROUP}|{','.join(members)}"] and q["propose"] == ["auto"]

    # the graph checked on the real model: POST /attribution/trust's own figures
    with page.expect_request(re.compile(r"/api/v1/attribution/trust$")) as sent:
        page.click("#trust-run")
    trust_body = sent.value.post_data_json
    assert trust_body == {k: v for k, v in body.items() if k != "signal"}
    page.wait_for_selector("#trust-result[data-loaded='1']", timeout=60_000)
    t = api_json(page, live_url, "POST", "/attribution/trust", data=trust_body)
    table = {r[0]: r[1] for r in page.evaluate(CELLS, "#trust-table tbody tr")}
    assert table["KL(real ‖ replacement) of the next token"] == f"{decimal(t['kl'], 4)} nats"
    assert table["the target: real · replacement"] == f"{decimal(t['target_real'])} · {decimal(t['target_replaced'])}"
    assert table["error nodes' share of the influence"] == pct(t["error_share"])
    assert table["checked features whose real effect has the edge's sign"] == pct(t["sign_agreement"])
    assert table["rank correlation of the edge's prediction and the real effect"] == decimal(t["rank_correlation"])
    assert t["top1_real"].strip() in table["the top next token: real · replacement"]
    plotted = page.evaluate("() => document.getElementById('trust-plot').data[1]")
    assert plotted["x"] == [c["edge"] for c in t["checked"]] and plotted["y"] == [c["effect"] for c in t["checked"]]
    checked = page.evaluate(CELLS, "#trust-checked tbody tr")
    assert [(c[0], c[3], c[4]) for c in checked] == [
        (c["source"]["label"], decimal(c["edge"]), decimal(c["effect"])) for c in t["checked"]
    ]
    assert table["the top paths' edges whose real change has the sign of −edge"] == pct(t["path_agreement"])
    paths = page.evaluate(CELLS, "#trust-paths tbody tr")
    assert [(r[2], r[3]) for r in paths] == [
        tuple(f"{decimal(e['weight'])} · {decimal(e['real'])}" for e in p["edges"]) for p in t["paths"]
    ]
    assert parse_qs(urlsplit(page.url).query)["trust"] == ["1"]
    assert layout_faults(page) == []
    assert not page.console_errors, page.console_errors

    # reloaded (without asking for the proposals and the check again), the accepted supernode is drawn again
    kept = {k: v for k, v in parse_qs(urlsplit(page.url).query).items() if k not in ("propose", "trust")}
    page.goto(f"{live_url}/attribution?{urlencode(kept, doseq=True)}")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    assert page.evaluate(HEXAGONS) == [f"s:{GROUP}"]
    assert page.locator("#propose-box").is_hidden() and page.locator("#trust-result").is_hidden()

    # renamed beside the graph: the same members under the new name, in the drawing and the URL
    page.fill("#group-name", "Caesar, the name")
    page.locator(f'#supernodes li[data-name="{GROUP}"] button.rename').click()
    page.wait_for_function(f"() => ({HEXAGONS})().includes('s:Caesar, the name')")
    assert parse_qs(urlsplit(page.url).query)["group"] == [f"Caesar, the name|{','.join(members)}"]
    assert not page.console_errors, page.console_errors
