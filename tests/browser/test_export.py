"""Every panel's "HTML" download: on each page (one load, in a state that draws the panels a
click would draw), every panel with a figure that addDownloads decorated and that the page drew is exported through its last such figure's HTML
button (every figure's bar has one: each exports its panel); each file is then opened from disk in
one browser context where every request is refused, and must draw each of its figures and answer a
hover with the same text (the same numbers) as the live page did."""

from __future__ import annotations

import base64
import gzip
import json
import re

from exporting import MAX_EXPORT_BYTES, check_offline, live_exports

# Each page in a state that draws every panel it has for the built-in model: the forward page with
# every stage shown under its overview (?stage=all) and one generation step on (?steps=1: replayed on
# load, so the exported file replays it too), /patch with a head's positions swept and one cell picked
# (?heads, ?cell), as a click there would leave the URL.
PAGES = [
    # the forward page: the overview and every stage's figures
    ("/?steps=1&stage=all", 24, {"overview-svg", "gen-attn-plot", "sae-active-plot", "sae-l0-plot"}),
    ("/compare", 8, set()),
    ("/patch?heads=0.1&cell=head:0:1", 6, {"hp-plot", "cell-plot"}),
]


def test_every_drawn_panel_exports_to_a_file_that_works_with_no_network(browser, live_url, page, tmp_path):
    exports = []
    for path, at_least, drawn_after_a_click in PAGES:
        done, skipped = live_exports(page, live_url, path, tmp_path)
        assert len(done) >= at_least, (path, [e[0] for e in done], skipped)
        assert drawn_after_a_click <= {e[0] for e in done}, (path, skipped)
        print(path, "exported", [e[0] for e in done], "not drawn or not shown", skipped)
        exports += [(path, *e) for e in done]
    assert not page.console_errors, page.console_errors

    check_offline(browser, exports)


def test_get_export_gives_the_same_kind_of_file_for_tools(live_url):
    """GET /api/v1/export makes a panel's file with the page's own exporter (a headless Chromium)."""
    import httpx

    def exported(**params) -> dict:
        r = httpx.get(f"{live_url}/api/v1/export", params=params, timeout=300)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r.text[:500]
        assert r.text.startswith("<!doctype html>") and 'id="gptscope-plotly"' in r.text
        assert len(r.content) <= MAX_EXPORT_BYTES
        b64 = re.search(r'id="gptscope-bundle">([A-Za-z0-9+/=]+)<', r.text).group(1)
        return json.loads(gzip.decompress(base64.b64decode(b64)))

    bundle = exported(page="learn", panel="gelu", x_max=3)
    assert bundle["attrs"]["data-embed"] == "gelu" and "x_max=3" in bundle["search"]
    assert any(k.startswith("GET /curves/gelu?") for k in bundle["answers"])
    # the forward page's overview: the diagram's architecture, the trace and the probabilities go with it
    bundle = exported(page="forward", panel="overview", text="ROMEO:\nBut soft")
    assert bundle["attrs"]["data-embed"] == "overview" and "text=ROMEO" in bundle["search"]
    asked = " ".join(bundle["answers"])
    assert "GET /architecture" in asked and "/forward" in asked and "/next-token" in asked, list(bundle["answers"])
