"""/circuits in a real headless Chromium on the built-in model: the page opens on the shipped pair,
scores every edge exactly through the job form (its progress shown), and draws the circuit as a
graph, the faithfulness curve and the estimates against the exact scores from the job's own answer;
a shared URL's settings fill the form and the request, and a refusal of exact scores of every edge
(a 422 naming `exact`) is shown and the job asked again for the top edges' exact scores."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from apihelp import api_json
from exporting import layout_faults

pytestmark = pytest.mark.browser

JOB = re.compile(r"/api/v1/circuits/jobs/([0-9a-f]+)$")


def job_answer(page, live_url) -> dict:
    """The answer of the last job the page polled, as the API holds it."""
    (job_id,) = [m.group(1) for m in map(JOB.search, page.requests) if m][-1:]
    job = api_json(page, live_url, "GET", f"/circuits/jobs/{job_id}")
    assert job["status"] == "done", job
    return job


def plot(page, id_: str, expr: str):
    return page.evaluate(f"(() => {{ const gd = document.getElementById('{id_}'); return {expr}; }})()")


def test_the_page_draws_the_circuit_the_curve_and_the_scatter_of_the_jobs_answer(page, live_url, screenshot):
    page.goto(f"{live_url}/circuits")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    assert page.locator("nav a[aria-current='page']").inner_text() == "Circuits"
    assert page.locator("#pair").input_value() == "dead-caesar"
    assert page.locator("#clean-tokens .tok.differs").count() == 2
    job = job_answer(page, live_url)
    res = job["result"]
    assert [s["method"] for s in res["scores"]] == ["atp", "eap_ig", "exact"]
    assert all(s["edges"] is None for s in res["scores"])  # exact="all": every edge measured
    # the progress bar ended where the job did: every graph run it counted
    assert plot(page, "progress", "[gd.value, gd.max]") == [job["total"], job["total"]]
    assert page.locator("#progress-text").inner_text().startswith(f"{job['total']:,} / {job['total']:,} graph runs · ")
    assert f"clean {res['clean_metric']:.3f}" in page.locator("#metric-stats").inner_text()

    # the graph: one curve per edge of the circuit, a hover square at each, its nodes emphasised
    circuit = res["circuit"]
    names = [res["edges"][e] for e in circuit["edges"]]
    assert 0 < len(names) <= 200
    assert plot(page, "graph-plot", "gd.layout.shapes.filter((s) => s.type === 'path').length") == len(names)
    hovers = plot(page, "graph-plot", "gd.data[0].text")
    assert [h.split("</b>")[0].removeprefix("<b>") for h in hovers] == [
        n.replace("<", "&lt;").replace(">", "&gt;") for n in names
    ]
    exact = next(s for s in res["scores"] if s["method"] == "exact")["values"]
    assert f"exact {exact[circuit['edges'][0]]:.4f}" in hovers[0]
    nodes = plot(page, "graph-plot", "gd.data[1].text.filter((_, i) => gd.data[1].marker.color[i] !== '#c9ceda')")
    assert {"input", "a5.h2", "logits"} <= set(nodes)
    assert str(len(names)) in page.locator("#circuit-stats").inner_text()

    # the curve and the circuit's mark are the answer's numbers
    assert plot(page, "curve-plot", "gd.data[0].y") == [p["recovered"] for p in circuit["curve"]]
    assert plot(page, "curve-plot", "gd.data[0].customdata.map((c) => c[0])") == [p["edges"] for p in circuit["curve"]]
    assert plot(page, "curve-plot", "[gd.data[2].y[0], gd.data[2].customdata[0][0]]") == [
        circuit["recovered"],
        len(circuit["edges"]),
    ]
    assert plot(page, "curve-plot", "gd.data[1].y") == [circuit["target"]] * 2

    # the scatter: exact score across, each estimate up, r in the legend
    traces = plot(page, "scatter-plot", "gd.data.map((t) => [t.name, t.x, t.y])")
    for comparison, (name, x, y) in zip(res["comparisons"], traces, strict=False):
        est = next(s for s in res["scores"] if s["method"] == comparison["method"])["values"]
        assert x == exact and y == est
        assert f"Pearson r = {comparison['pearson']:.3f}" in name
    assert page.locator("#errors tbody tr").count() == sum(len(c["largest_errors"]) for c in res["comparisons"])
    rows = page.locator("#edges-table tbody tr td.mono").all_inner_texts()
    assert rows == names[:60]

    assert layout_faults(page) == []
    for fig in ("graph-plot", "curve-plot", "scatter-plot", "edges-table"):
        assert page.locator(f".dl-bar[data-for='{fig}'] button").count() == 4  # PNG, SVG, JSON, HTML
    screenshot(page, "circuits-page")
    assert not page.console_errors, page.console_errors


REFUSAL = "this is about 1,142 graph runs (a refusal made by the test, as the API words it)"


def test_a_shared_url_fills_the_form_and_the_request_and_a_refused_exact_asks_for_the_top_edges(page, live_url):
    bodies = []

    def jobs(route):
        body = json.loads(route.request.post_data)
        bodies.append(body)
        if body["exact"] == "all":  # as the API refuses more work than a job may do
            detail = [{"loc": ["body", "exact"], "msg": REFUSAL, "type": "value_error"}]
            route.fulfill(status=422, content_type="application/json", body=json.dumps({"detail": detail}))
        else:
            route.continue_()

    page.route("**/api/v1/circuits/jobs", jobs)
    page.goto(f"{live_url}/circuits?steps=5&target=0.6&rank_by=atp&exact=all")
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    form = {id_: page.locator(f"#{id_}").input_value() for id_ in ("steps", "target", "rank-by", "exact")}
    assert form == {"steps": "5", "target": "0.6", "rank-by": "atp", "exact": "all"}
    settings = [{k: b[k] for k in ("steps", "target", "rank_by", "exact")} for b in bodies]
    assert settings == [
        {"steps": 5, "target": 0.6, "rank_by": "atp", "exact": "all"},
        {"steps": 5, "target": 0.6, "rank_by": "atp", "exact": "top"},
    ]
    assert REFUSAL in page.locator("#exact-note").inner_text()
    res = job_answer(page, live_url)["result"]
    assert res["circuit"]["ranked_by"] == "atp" and res["circuit"]["target"] == 0.6
    exact = next(s for s in res["scores"] if s["method"] == "exact")
    assert len(exact["edges"]) == 64  # the API's exact_top
    eap = next(s for s in res["scores"] if s["method"] == "eap_ig")
    assert eap["steps"] == 5
    name, x, y = plot(page, "scatter-plot", "[gd.data[1].name, gd.data[1].x, gd.data[1].y]")
    assert name.startswith("EAP-IG") and x == exact["values"] and y == [eap["values"][e] for e in exact["edges"]]
    assert "ranking by AtP" in plot(page, "curve-plot", "gd.layout.xaxis.title.text")
    q = parse_qs(urlsplit(page.url).query)
    assert {k: q[k] for k in ("steps", "target", "rank_by", "exact")} == {
        "steps": ["5"],
        "target": ["0.6"],
        "rank_by": ["atp"],
        "exact": ["all"],
    }
    assert q["answer"] == [str(res["metric"]["answer"]["id"])]
    # the refusal the test made is the one console error (a 422 of a resource)
    assert [e for e in page.console_errors if "422" not in e] == [], page.console_errors
