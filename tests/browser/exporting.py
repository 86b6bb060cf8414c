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
# tick labels. Then what reads badly on a page (issue #49): two text labels of a figure drawn on top
# of each other (a Plotly figure's annotations and trace texts, or any text of an SVG the page draws
# itself: the forward page's overview, a head view), or one point labelled twice (one label just
# above the other); a download bar that is not directly above its own figure (nor just beside it, on
# its right), or shown for a hidden figure; a figure that draws on less than WIDE_SHARE of its card's
# width while nothing else stands in the rest of its row; and (BANDS) a blank band taller than
# BAND_PX between two cards of the page.
WIDE_SHARE = 0.6
BAND_PX = 64  # the cards stand 1rem apart; the hole a sticky bar leaves in a full-page shot is 100-140 px

# The box (viewport coordinates) around what a figure draws: Plotly's plot areas, texts, legend, colour
# bars and images; another figure's canvases, SVGs and images (a grid of maps, a head view), or its
# own box when it has none (token chips, text: it flows to its box's width); null while it is empty
# (not drawn yet: a figure far from the window waits for the reader).
INK = """(f) => {
  if (!f.children.length && !f.textContent.trim()) return null;
  const graphics = /^(svg|canvas|img)$/i.test(f.tagName) ? [f] : [...f.querySelectorAll("canvas, svg, img")].filter((e) => !e.parentElement.closest("svg"));
  const parts = f._fullLayout
    ? f.querySelectorAll(".main-svg .bglayer rect, .main-svg text, .main-svg image, .legend .bg, .colorbar")
    : graphics.length ? graphics : [f];
  const boxes = [...parts].map((e) => e.getBoundingClientRect()).filter((b) => b.width > 0 && b.height > 0);
  if (!boxes.length) return null;
  return { left: Math.min(...boxes.map((b) => b.left)), right: Math.max(...boxes.map((b) => b.right)),
    top: Math.min(...boxes.map((b) => b.top)), bottom: Math.max(...boxes.map((b) => b.bottom)) };
}"""

# Blank bands between the cards of the page (main's children, in page coordinates): [] or the faults.
# `captured`: where things are drawn now (what a full-page screenshot at this scroll shows: a sticky
# bar stuck at the top of the window has left its own place empty); otherwise a sticky element counts
# at its own place in the page, where a reader scrolling up finds it.
BANDS = f"""(captured) => {{
  const main = document.querySelector("main");
  if (!main) return [];
  const cards = [...main.children].filter((e) => e.checkVisibility()).map((e) => {{
    const sticky = !captured && getComputedStyle(e).position === "sticky";
    if (sticky) e.style.setProperty("position", "static", "important");
    const b = e.getBoundingClientRect();
    if (sticky) e.style.removeProperty("position");
    return {{ name: e.id || e.className || e.tagName.toLowerCase(), top: b.top + scrollY, bottom: b.bottom + scrollY, h: b.height }};
  }}).filter((c) => c.h > 0).sort((a, b) => a.top - b.top);
  const faults = [];
  let above = null;
  for (const c of cards) {{
    if (above && c.top - above.bottom > {BAND_PX})
      faults.push(`page: a blank band of ${{Math.round(c.top - above.bottom)}} px between ${{above.name}} and ${{c.name}}`);
    if (!above || c.bottom > above.bottom) above = c;
  }}
  return faults;
}}"""

FIGURES = """() => [...new Set([...document.querySelectorAll(".js-plotly-plot[id]")].map((p) => p.id)
  .concat([...document.querySelectorAll(".dl-bar")].map((b) => b.dataset.for)))]"""

LAYOUT_FAULTS = f"""(ids) => {{
  const faults = [];
  const box = (e) => e.getBoundingClientRect();
  const meets = (a, b) => a.width > 0 && b.width > 0 && a.left < b.right - 3 && b.left < a.right - 3 && a.top < b.bottom - 3 && b.top < a.bottom - 3;
  const ink = {INK};
  for (const id of ids) {{
    const gd = document.getElementById(id);
    if (!gd || !gd.checkVisibility()) continue;
    barPlace(gd, id, faults);
    widthUsed(gd, id, faults);
    const fl = gd._fullLayout;
    if (!fl) svgLabelsApart(gd, id, faults);
    if (!fl || !fl._plots) continue;
    for (const k of Object.keys(gd.layout)) if (/^[xy]axis1$/.test(k)) faults.push(`${{id}}: layout.${{k}} (Plotly reads ${{k.slice(0, 5)}})`);
    const boxes = Object.values(fl._plots)
      .filter((p) => p.xaxis && p.yaxis && !p.xaxis.overlaying && !p.yaxis.overlaying)
      .map((p) => [p.id, p.xaxis.domain, p.yaxis.domain]);
    const apart = (a, b) => a[1] <= b[0] + 1e-6 || b[1] <= a[0] + 1e-6;
    for (let i = 0; i < boxes.length; i++)
      for (let j = i + 1; j < boxes.length; j++)
        if (!apart(boxes[i][1], boxes[j][1]) && !apart(boxes[i][2], boxes[j][2])) faults.push(`${{id}}: subplots ${{boxes[i][0]}} and ${{boxes[j][0]}} overlap`);
    const svg = box(gd.querySelector(".main-svg"));
    const ticks = [...gd.querySelectorAll(".xtick text, .ytick text")].filter((t) => t.textContent.trim());
    for (const t of ticks) {{
      const b = box(t);
      if (b.width && (b.left < svg.left - 1 || b.right > svg.right + 1 || b.top < svg.top - 1 || b.bottom > svg.bottom + 1))
        faults.push(`${{id}}: tick label “${{t.textContent}}” is cut off`);
    }}
    for (const item of gd.querySelectorAll(".legend .traces")) {{
      const lb = box(item);
      for (const t of [...gd.querySelectorAll(".g-xtitle text, .g-ytitle text, .g-y2title text"), ...ticks])
        if (meets(lb, box(t))) faults.push(`${{id}}: the legend's “${{item.textContent}}” covers “${{t.textContent}}”`);
    }}
    labelsApart(gd, id, faults);
  }}
  for (const bar of document.querySelectorAll(".dl-bar"))   // a bar for nothing: its figure hidden
    if (bar.checkVisibility() && !document.getElementById(bar.dataset.for)?.checkVisibility())
      faults.push(`${{bar.dataset.for}}: its download bar is shown, the figure is not`);
  return [...faults, ...({BANDS})(false)];

  // the figure's download bar: its buttons end just above the figure's box and within its width,
  // or stand just beside it on its right
  function barPlace(f, id, faults) {{
    const bar = document.querySelector(`.dl-bar[data-for="${{id}}"]`);
    if (!bar || !bar.checkVisibility()) return;
    const parts = [...bar.children].map(box).filter((b) => b.width > 0);
    if (!parts.length) return;
    const b = {{ left: Math.min(...parts.map((p) => p.left)), right: Math.max(...parts.map((p) => p.right)),
      top: Math.min(...parts.map((p) => p.top)), bottom: Math.max(...parts.map((p) => p.bottom)) }};
    const fb = box(f);
    const above = b.bottom <= fb.top + 4 && fb.top - b.bottom <= 24 && b.left >= fb.left - 4 && b.right <= fb.right + 4;
    const beside = b.left >= fb.right - 4 && b.left - fb.right <= 24 && b.top >= fb.top - 4 && b.bottom <= fb.bottom + 4;
    const at = (r) => `x ${{Math.round(r.left)}}-${{Math.round(r.right)}}, y ${{Math.round(r.top + scrollY)}}-${{Math.round(r.bottom + scrollY)}}`;
    if (!above && !beside) faults.push(`${{id}}: its download bar (${{at(b)}}) is neither just above nor beside it (${{at(fb)}})`);
  }}

  // the figure draws on less than WIDE_SHARE of its card's width and nothing else stands in its row
  function widthUsed(f, id, faults) {{
    const card = f.closest("section");
    const drawn = ink(f);
    if (!card || !drawn) return;
    const cs = getComputedStyle(card);
    const inner = card.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    if (drawn.right - drawn.left >= {WIDE_SHARE} * inner) return;
    // anything of the card beside it (another figure, its grid cell, text), but what holds it, what
    // it holds and its own bar
    const bar = document.querySelector(`.dl-bar[data-for="${{id}}"]`);
    for (const e of card.querySelectorAll("*")) {{
      if (e.contains(f) || f.contains(e) || (bar && bar.contains(e))) continue;
      const b = box(e);
      const shared = Math.min(b.bottom, drawn.bottom) - Math.max(b.top, drawn.top);   // of the row's height
      if (!b.width || !b.height || shared < Math.min(40, b.height / 2, (drawn.bottom - drawn.top) / 2)) continue;
      if (b.right > drawn.right + 8 || b.left < drawn.left - 8) return;   // something beside it
    }}
    faults.push(`${{id}}: draws on ${{Math.round((100 * (drawn.right - drawn.left)) / inner)}}% of its card's width, the rest of its row empty`);
  }}

  // a figure drawn by the page itself (an SVG: the forward page's overview, a head view, a graph):
  // two of its text labels drawn over each other (Plotly figures inside it are labelsApart's)
  function svgLabelsApart(f, id, faults) {{
    const labels = [...f.querySelectorAll("svg text")]
      .filter((t) => t.textContent.trim() && !t.closest(".js-plotly-plot") && t.checkVisibility())
      .map((t) => [t.textContent, box(t)]).filter(([, b]) => b.width > 0);
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++)
        if (meets(labels[i][1], labels[j][1])) faults.push(`${{id}}: the labels “${{labels[i][0]}}” and “${{labels[j][0]}}” are drawn on top of each other`);
  }}

  // two of the figure's text labels (annotations, trace texts) drawn over each other, or one point
  // labelled twice (two traces, or an annotation and a trace, writing at the same x and y)
  function labelsApart(f, id, faults) {{
    const labels = [...f.querySelectorAll(".annotation-text, .textpoint text, .bartext, .heatmaplayer text")]
      .filter((t) => t.textContent.trim()).map((t) => [t.textContent, box(t)]).filter(([, b]) => b.width > 0);
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++)
        if (meets(labels[i][1], labels[j][1])) faults.push(`${{id}}: the labels “${{labels[i][0]}}” and “${{labels[j][0]}}” are drawn on top of each other`);
    const at = new Map();
    const put = (xa, ya, x, y, text, who) => {{
      if (text === undefined || text === null || String(text).trim() === "") return;
      const k = JSON.stringify([xa, ya, x, y]);
      if (at.has(k) && at.get(k) !== who) faults.push(`${{id}}: the point (${{x}}, ${{y}}) is labelled twice (“${{text}}”)`);
      at.set(k, who);
    }};
    const nth = (v, i) => (Array.isArray(v) ? v[i] : v);
    (f.data || []).forEach((t, c) => {{
      if (t.visible === false || !/text/.test(t.mode || "")) return;
      (t.x || []).forEach((x, i) => put(t.xaxis || "x", t.yaxis || "y", x, t.y[i], nth(t.texttemplate, i) ?? nth(t.text, i), `trace ${{c}}`));
    }});
    for (const [i, a] of ((f.layout || {{}}).annotations || []).entries())
      if (a.xref !== "paper" && a.yref !== "paper") put(a.xref || "x", a.yref || "y", a.x, a.y, a.text, `annotation ${{i}}`);
  }}
}}"""


def layout_faults(page, ids: list[str] | None = None) -> list[str]:
    """LAYOUT_FAULTS of the figures `ids`, or of every Plotly figure and every figure with a download
    bar on the page, and the page's blank bands."""
    if ids is None:
        ids = page.evaluate(FIGURES)
    return page.evaluate(LAYOUT_FAULTS, ids)


def captured_bands(page) -> list[str]:
    """BANDS of the page as a full-page screenshot would show it now."""
    return page.evaluate(BANDS, True)


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
    each of its figures, answer the hover as the live page did, and lay them out with no
    LAYOUT_FAULTS. exports: [(path, figure, panel, file, hover)] (live_exports' rows with the page's
    path first)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    files = {e[3].as_uri() for e in exports}
    refused = []
    ctx.route("**/*", lambda r: r.continue_() if r.request.url in files else (refused.append(r.request.url), r.abort()))
    offline = ctx.new_page()
    errors = []
    offline.on("pageerror", lambda err: errors.append(str(err)))
    # one file per panel, opened once, where each of the panel's figures is checked
    last = {(path, panel): file for path, _, panel, file, _ in exports}
    opened, shown = None, []
    try:
        for path, fig, panel, file, live in exports:
            assert len(file.read_bytes()) <= MAX_EXPORT_BYTES, (fig, file.stat().st_size)
            assert f'data-embed="{panel}"' in bundle_attrs(file), (fig, panel)  # the file is that panel's
            if opened != (path, panel):
                assert not shown or layout_faults(offline, shown) == [], opened  # the file before, all drawn
                offline.goto(last[(path, panel)].as_uri())
                offline.wait_for_selector("body[data-ready], section[data-ready]", state="attached", timeout=60_000)
                opened, shown = (path, panel), []
            got = offline.wait_for_function(PROBE, arg=fig, timeout=60_000).json_value()
            assert got == live, (path, fig, got, live)
            assert offline.locator(".dl-bar button[data-format='html']").count() == 0  # a file does not export itself
            assert offline.locator(".export-note").is_visible()  # and says what it is
            shown.append(fig)
        assert layout_faults(offline, shown) == [], opened
    finally:
        ctx.close()
    assert not refused, refused  # nothing was even asked of the network
    assert not errors, errors


def bundle_attrs(file) -> str:
    """The exported file's bundle (the shell, modules and answers), unpacked: its body attributes as HTML."""
    b64 = re.search(r'id="gptscope-bundle">([A-Za-z0-9+/=]+)<', file.read_text()).group(1)
    bundle = json.loads(gzip.decompress(base64.b64decode(b64)))
    return " ".join(f'{k}="{v}"' for k, v in bundle["attrs"].items())
