"""Exporting panels in the browser tests: export every drawn figure of a page by its HTML button,
then open each file from disk with every request refused and compare a hover with the live page's
(tests/browser/test_export*.py)."""

from __future__ import annotations

import base64
import gzip
import json
import re
from urllib.parse import urlsplit

from playwright.sync_api import TimeoutError as PlaywrightTimeout

MAX_EXPORT_BYTES = 5_000_000

# The text a hover shows on a figure: Plotly's hover label for a point of its first hoverable trace
# (a heatmap's bottom-left cell, a line's middle point), the canvas grid's tooltip over a map, an SVG
# line's title, a cell's title; null while the figure is not drawn yet.
PROBE = """(id) => {
  const f = document.getElementById(id);
  if (!f || !f.checkVisibility()) return null;
  f.scrollIntoView({ block: "center" });   // a plot far below is drawn once the reader comes near
  const gd = f.classList.contains("js-plotly-plot") ? f : f.querySelector(".js-plotly-plot");
  if (gd) {
    for (let c = 0; c < (gd.data || []).length; c++) {
      const t = gd.data[c];
      if (t.hoverinfo === "skip" || t.visible === false) continue;
      if (Array.isArray(t.z) && t.z.length) {   // a heatmap: its last row's first cell, in data coordinates
        const last = t.z.length - 1;
        // (Fx.hover takes an axis's calc coordinates: a category's index, not its name)
        const c = (a, v) => gd._fullLayout[`${a[0]}axis${a.slice(1)}`].d2c(v);
        const xa = t.xaxis || "x";
        const ya = t.yaxis || "y";
        Plotly.Fx.hover(gd, { xval: t.x ? c(xa, t.x[0]) : 0, yval: t.y ? c(ya, t.y[last]) : last }, xa + ya);
      } else {
        const n = (t.x || t.y || t.values || []).length;
        if (!n) continue;
        Plotly.Fx.hover(gd, [{ curveNumber: c, pointNumber: Math.floor(n / 2) }]);
      }
      const text = gd.querySelector(".hoverlayer")?.textContent;
      Plotly.Fx.unhover(gd);
      if (text) return text;
    }
    return null;
  }
  const cv = f.querySelector("canvas.hg-map");
  if (cv) {
    const r = cv.getBoundingClientRect();
    if (!r.width) return null;
    cv.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.left + r.width * 0.2, clientY: r.top + r.height * 0.9 }));
    const tip = f.parentElement.querySelector(".hg-tip") || document.querySelector(".hg-tip:not([hidden])");
    return tip && !tip.hidden ? tip.textContent : null;
  }
  const title = f.querySelector("svg title, [title]");
  if (title) return title.tagName === "title" ? title.textContent : title.title;
  return null;
}"""


# What Plotly draws wrongly without a word: its first axes are `xaxis`/`yaxis` (a trace's "x"/"y"), so
# a layout's `xaxis1` is ignored and the subplot it meant falls back to the whole figure; two subplots
# whose boxes overlap (other than an axis overlaying another) draw over each other; tick labels in a
# margin too small for them are cut off; and a legend placed by hand can sit on an axis's title or
# tick labels.
LAYOUT_FAULTS = """(ids) => {
  const faults = [];
  const box = (e) => e.getBoundingClientRect();
  const meets = (a, b) => a.width > 0 && b.width > 0 && a.left < b.right - 3 && b.left < a.right - 3 && a.top < b.bottom - 3 && b.top < a.bottom - 3;
  for (const id of ids) {
    const gd = document.getElementById(id);
    const fl = gd && gd._fullLayout;
    if (!fl || !fl._plots) continue;
    for (const k of Object.keys(gd.layout)) if (/^[xy]axis1$/.test(k)) faults.push(`${id}: layout.${k} (Plotly reads ${k.slice(0, 5)})`);
    const boxes = Object.values(fl._plots)
      .filter((p) => p.xaxis && p.yaxis && !p.xaxis.overlaying && !p.yaxis.overlaying)
      .map((p) => [p.id, p.xaxis.domain, p.yaxis.domain]);
    const apart = (a, b) => a[1] <= b[0] + 1e-6 || b[1] <= a[0] + 1e-6;
    for (let i = 0; i < boxes.length; i++)
      for (let j = i + 1; j < boxes.length; j++)
        if (!apart(boxes[i][1], boxes[j][1]) && !apart(boxes[i][2], boxes[j][2])) faults.push(`${id}: subplots ${boxes[i][0]} and ${boxes[j][0]} overlap`);
    const svg = box(gd.querySelector(".main-svg"));
    const ticks = [...gd.querySelectorAll(".xtick text, .ytick text")].filter((t) => t.textContent.trim());
    for (const t of ticks) {
      const b = box(t);
      if (b.width && (b.left < svg.left - 1 || b.right > svg.right + 1 || b.top < svg.top - 1 || b.bottom > svg.bottom + 1))
        faults.push(`${id}: tick label “${t.textContent}” is cut off`);
    }
    for (const item of gd.querySelectorAll(".legend .traces")) {
      const lb = box(item);
      for (const t of [...gd.querySelectorAll(".g-xtitle text, .g-ytitle text, .g-y2title text"), ...ticks])
        if (meets(lb, box(t))) faults.push(`${id}: the legend's “${item.textContent}” covers “${t.textContent}”`);
    }
  }
  return faults;
}"""


def layout_faults(page, ids: list[str] | None = None) -> list[str]:
    """LAYOUT_FAULTS of the figures `ids`, or of every Plotly figure on the page."""
    if ids is None:
        ids = page.eval_on_selector_all(".js-plotly-plot[id]", "ps => ps.map((p) => p.id)")
    return page.evaluate(LAYOUT_FAULTS, ids)


def page_path(page) -> str:
    """The page's path and query as it stands (its URL state), for live_exports."""
    here = urlsplit(page.url)
    return f"{here.path}?{here.query}"


def live_exports(page, live_url, path, folder, panels=None):
    """Load `path` once and export every panel that has a drawn decorated figure (or only those named
    in `panels`), by the HTML button of its last such figure (every figure's button exports its
    panel: the one file holds what each of them drew): [(figure, panel, file, hover)], one row per
    drawn figure with its panel's file."""
    page.goto(f"{live_url}{path}")
    page.wait_for_selector("body[data-ready]", state="attached", timeout=90_000)
    # and what the page loads after it is ready (the feature browser's first feature, say)
    page.wait_for_function("() => !!globalThis.gptscopeSettled")
    page.evaluate("() => gptscopeSettled()")
    bars = page.eval_on_selector_all(".dl-bar", "bs => bs.map((b) => b.dataset.for)")
    assert bars and len(bars) == len(set(bars)), bars
    # every figure's bar offers the HTML file, and every drawn Plotly figure has a bar
    assert page.locator(".dl-bar button[data-format='html']").count() == len(bars)
    plots = page.eval_on_selector_all(".js-plotly-plot[id]", "ps => ps.map((p) => p.id)")
    assert set(plots) <= set(bars), sorted(set(plots) - set(bars))
    panel_of = dict(
        zip(
            bars,
            page.eval_on_selector_all(
                ".dl-bar",
                "bs => bs.map((b) => document.getElementById(b.dataset.for)?.closest(\"section[id$='-panel']\")?.id.slice(0, -6))",
            ),
        )
    )
    drawn, skipped = [], []
    for fig in bars:
        if panels is not None and panel_of[fig] not in panels:
            continue
        shown = page.evaluate(
            "(id) => { const f = document.getElementById(id); const ok = !!f && f.checkVisibility(); if (ok) f.scrollIntoView(); return ok; }",
            fig,
        )
        if not shown:  # a panel this model does not have (rope, moe, classifier)
            skipped.append(fig)
            continue
        try:
            page.wait_for_function(PROBE, arg=fig, timeout=8_000)
        except PlaywrightTimeout:  # drawn only after a click (a generation step, say): nothing to hover yet
            skipped.append(fig)
            continue
        drawn.append(fig)
    last = {panel_of[fig]: fig for fig in drawn}
    files, done = {}, []
    for fig in drawn:
        panel = panel_of[fig]
        if last[panel] == fig:  # the panel's file, made once all of its figures were drawn
            with page.expect_download(timeout=90_000) as dl:
                page.click(f".dl-bar[data-for='{fig}'] button[data-format='html']")
            files[panel] = folder / f"{path.strip('/').split('?')[0] or 'forward'}-{panel}.html"
            dl.value.save_as(files[panel])
    for fig in drawn:
        page.evaluate("(id) => document.getElementById(id).scrollIntoView()", fig)
        hover = page.wait_for_function(PROBE, arg=fig, timeout=30_000).json_value()
        done.append((fig, panel_of[fig], files[panel_of[fig]], hover))
    assert layout_faults(page, drawn) == []
    return done, skipped


def check_offline(browser, exports) -> None:
    """Open each exported file from disk in a context where every request is refused: it must draw
    each of its figures and answer the hover as the live page did. exports: [(path, figure, panel,
    file, hover)] (live_exports' rows with the page's path first)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    files = {e[3].as_uri() for e in exports}
    refused = []
    ctx.route("**/*", lambda r: r.continue_() if r.request.url in files else (refused.append(r.request.url), r.abort()))
    offline = ctx.new_page()
    errors = []
    offline.on("pageerror", lambda err: errors.append(str(err)))
    # one file per panel, opened once, where each of the panel's figures is checked
    last = {(path, panel): file for path, _, panel, file, _ in exports}
    opened = None
    try:
        for path, fig, panel, file, live in exports:
            assert len(file.read_bytes()) <= MAX_EXPORT_BYTES, (fig, file.stat().st_size)
            assert f'data-embed="{panel}"' in bundle_attrs(file), (fig, panel)  # the file is that panel's
            if opened != (path, panel):
                offline.goto(last[(path, panel)].as_uri())
                offline.wait_for_selector("body[data-ready], section[data-ready]", state="attached", timeout=60_000)
                opened = (path, panel)
            got = offline.wait_for_function(PROBE, arg=fig, timeout=60_000).json_value()
            assert got == live, (path, fig, got, live)
            assert offline.locator(".dl-bar button[data-format='html']").count() == 0  # a file does not export itself
    finally:
        ctx.close()
    assert not refused, refused  # nothing was even asked of the network
    assert not errors, errors


def bundle_attrs(file) -> str:
    """The exported file's bundle (the shell, modules and answers), unpacked: its body attributes as HTML."""
    b64 = re.search(r'id="gptscope-bundle">([A-Za-z0-9+/=]+)<', file.read_text()).group(1)
    bundle = json.loads(gzip.decompress(base64.b64decode(b64)))
    return " ".join(f'{k}="{v}"' for k, v in bundle["attrs"].items())
