"""/attribution's attention inside the graph (issue #64) in a real headless Chromium on the built-in model
and its shipped transcoder set: a click on the logit splits its incoming edges by head (POST
/attribution/heads), the table of what each head carried and the edge list are that answer's own numbers,
an edge of the list points at the graph's edge and the hover card names its heads; a click on head 5.2
opens why it attended (POST /attribution/qk, on the key its top edge came from), and the URL brings both
back on reload."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from apihelp import api_json, decimal
from exporting import layout_faults

pytestmark = pytest.mark.browser

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"
LOGIT_XY = """() => { const gd = document.getElementById('graph-plot');
  for (const t of gd.data) { const i = (t.customdata || []).indexOf('logit');
    if (i >= 0) { const fl = gd._fullLayout; const r = gd.getBoundingClientRect();
      return [r.left + fl._size.l + fl.xaxis.l2p(t.x[i]), r.top + fl._size.t + fl.yaxis.l2p(t.y[i])]; } }
  return null; }"""
CARRIED = """() => [...document.querySelectorAll('#heads-carried tbody tr')]
  .map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent))"""
# nothing wider than its box: the page, the heads section's table and every table of the QK panel
OVERFLOW = """() => { const out = [];
  if (document.documentElement.scrollWidth > document.documentElement.clientWidth) out.push('page');
  for (const sel of ['#heads-box', '#heads-carried', '#qk-box', '#qk-box table']) for (const e of document.querySelectorAll(sel)) {
    const box = e.parentElement.getBoundingClientRect(); const b = e.getBoundingClientRect();
    if (b.right > box.right + 1 || e.scrollWidth > e.clientWidth + 1) out.push(e.id || e.className); }
  return out; }"""


def signed(x: float) -> str:
    return ("+" if x >= 0 else "") + decimal(x)


def visible(t: str) -> str:
    return t.replace(" ", "·").replace("\n", "↵").replace("\t", "→")


def source_name(s: dict, tokens: list[dict]) -> str:
    """qk.js's sourceName."""
    if s["kind"] == "constant":
        return s["label"]
    what = "token" if s["kind"] == "token" else s["label"]
    return f"{what} @{s['position']} “{visible(tokens[s['position']]['text'])}”"


def heads_line(e: dict) -> str:
    """heads.js's line for an edge: the block whose heads carry most of it, its two largest heads, its bypass."""
    b = max(e["blocks"], key=lambda b: sum(abs(v) for v in b["heads"]))
    if not any(b["heads"]):
        return f"no head carries it: all bypass ({signed(b['bypass'])})"
    top = sorted(enumerate(b["heads"]), key=lambda hv: -abs(hv[1]))[:2]
    return f"block {b['layer']}: " + ", ".join(
        [f"{b['layer']}.{h} {signed(v)}" for h, v in top] + [f"bypass {signed(b['bypass'])}"]
    )


def check_qk(page, live_url, body: dict, tokens: list[dict]) -> dict:
    """The QK panel shows /attribution/qk's own answer for `body`."""
    qk = api_json(page, live_url, "POST", "/attribution/qk", data=body)
    stats = page.locator("#qk-stats").inner_text()
    assert f"score {qk['score']:.4f}" in stats and f"add up to {qk['terms_sum']:.4f}" in stats
    assert f"attention weight {qk['attention']:.4f}" in stats
    rows = page.locator("#qk-key-sources tbody tr")
    assert rows.count() == len(qk["key_sources"])
    top = qk["key_sources"][0]
    assert rows.first.locator("td").nth(0).inner_text() == source_name(top["source"], tokens)
    assert rows.first.locator("td").nth(1).inner_text() == signed(top["value"])
    first_q = page.locator("#qk-query-sources tbody tr").first.locator("td")
    assert first_q.nth(0).inner_text() == source_name(qk["query_sources"][0]["source"], tokens)
    assert page.locator("#qk-pairs tbody tr").count() == len(qk["pairs"])
    cells = page.locator("#qk-kinds tbody td").all_inner_texts()
    assert sorted(cells) == sorted(signed(k["value"]) for k in qk["kinds"])
    return qk


def test_a_nodes_inputs_split_by_head_and_why_a_head_attended(page, live_url, screenshot):
    (shipped, *_) = api_json(page, live_url, "GET", "/transcoders")["sets"]
    page.goto(f"{live_url}/attribution?{urlencode({'text': CAESAR})}")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    tokens = api_json(page, live_url, "POST", "/tokenize", data={"text": CAESAR, "encoding": "model"})["tokens"]
    page.locator("#graph-plot").scroll_into_view_if_needed()

    # a click on the logit: its edges split by head, the request the graph's own
    with page.expect_request(re.compile(r"/api/v1/attribution/heads$")) as sent:
        page.mouse.click(*page.evaluate(LOGIT_XY))
    body = sent.value.post_data_json
    assert {k: body[k] for k in ("text", "transcoders")} == {"text": CAESAR, "transcoders": shipped["name"]}
    page.wait_for_selector("#heads-box[data-loaded='logit']")
    ans = api_json(page, live_url, "POST", "/attribution/heads", data=body)
    assert ans["target"] == "logit(' Caesar')"
    assert page.evaluate(CARRIED) == [
        [decimal(v) for v in row] + [decimal(b)] for row, b in zip(ans["carried"], ans["bypass_carried"], strict=True)
    ]
    items = page.locator("#heads-edges li")
    assert items.count() == len(ans["edges"])
    first = ans["edges"][0]
    assert items.first.locator(".weight").inner_text() == signed(first["weight"])
    assert items.first.locator(".edge-heads").inner_text() == heads_line(first)

    # the list's first edge points at the graph's; the hover card names the heads that carried it
    src = f"f{first['source']['layer']}.{first['source']['position']}.{first['source']['feature']}"
    items.first.locator(".edge-head").hover()
    page.wait_for_function("(id) => document.getElementById('hover-card').dataset.id === id", arg=f"{src}>logit")
    assert heads_line(first) in page.locator("#hover-card").inner_text()

    # head 5.2: the key its top edge came from, the query the logit's position
    page.click("#heads-carried button[data-head='5.2']")
    page.wait_for_selector("#qk-box[data-loaded^='5.2:']")
    query, key = len(tokens) - 1, max(ans["edges"], key=lambda e: abs(e["blocks"][5]["heads"][2]))["source"]["position"]
    assert page.locator("#qk-box").get_attribute("data-loaded") == f"5.2:{query}:{key}"
    assert page.locator("#qk-key").input_value() == str(key)
    qk_body = {"text": CAESAR, "transcoders": shipped["name"], "layer": 5, "head": 2, "query": query, "key": key}
    qk = check_qk(page, live_url, qk_body, tokens)
    assert page.evaluate(OVERFLOW) == []
    assert layout_faults(page) == []
    q = parse_qs(urlsplit(page.url).query)
    assert (q["heads"], q["head"], q["query"], q["key"]) == (["logit"], ["5.2"], [str(query)], [str(key)])
    assert not page.console_errors, page.console_errors

    # reloaded, the URL brings back the split and the head; a URL that names no key (as a tool may
    # write it) opens on the key a click on the head's cell chose, and the URL then names it
    del q["key"]
    page.goto(f"{live_url}/attribution?{urlencode(q, doseq=True)}")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    page.wait_for_selector(f"#qk-box[data-loaded='5.2:{query}:{key}']")
    assert parse_qs(urlsplit(page.url).query)["key"] == [str(key)]
    assert page.evaluate(CARRIED)[5][2] == decimal(ans["carried"][5][2])
    assert f"score {qk['score']:.4f}" in page.locator("#qk-stats").inner_text()
    assert not page.console_errors, page.console_errors
    page.evaluate("document.getElementById('qk-box').scrollIntoView({block: 'start'}); scrollBy(0, -60)")
    screenshot(page, "attribution-qk-from-url", full_page=False)  # the panel's top, under the page's bar
