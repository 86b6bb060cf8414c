// Shared drawing helpers for the stage panels: token axes, heatmaps, colour scales, downloads.
// Nothing here computes a model number: it only formats, selects and lays out what the API sent.
import { visible } from "./api.js";

export const MONO = "ui-monospace, Menlo, Consolas, monospace";
// Colour-blind-safe: Viridis for 0..1 / non-negative data, Cividis for signed data (centred on 0).
export const SEQ = "Viridis";
export const SIGNED = "Cividis";
// Okabe–Ito colours for categorical series (safe for the common colour-vision deficiencies).
// `grey` fills bars and markers; `line` is the darker grey of thin reference lines and curves.
export const OKABE = { blue: "#0072B2", orange: "#E69F00", green: "#009E73", sky: "#56B4E9",
  vermillion: "#D55E00", purple: "#CC79A7", yellow: "#F0E442", grey: "#999999", line: "#888888", black: "#222222" };
// The same colours in the order a list of series takes them.
export const SERIES = [OKABE.blue, OKABE.orange, OKABE.green, OKABE.vermillion, OKABE.purple, OKABE.sky, OKABE.black];
// The masked cells of an attention map: drawn empty, not as a (dark) weight of 0.
export const MASKED = "#eeeeee";  // cells a causal mask (or a sliding window) hides
// A cyclic scale for angles (-π..π: both ends the same colour, so a turn past π does not jump),
// light -> blue -> dark -> vermillion -> light, after matplotlib's "twilight".
export const CYCLIC = [[0, "#e2d9e2"], [0.125, "#9db1cf"], [0.25, "#5f78b5"], [0.375, "#4b3b8f"], [0.5, "#2f1436"],
  [0.625, "#6d1f4a"], [0.75, "#a84f52"], [0.875, "#cf9a8c"], [1, "#e2d9e2"]];

// Whether a sliding window of `window` keys (0: none) hides key k from query q: k is more than
// window - 1 positions back. (Keys after q are the causal mask's.)
export const outsideWindow = (window, q, k) => window > 0 && k <= q - window;

export const $ = (id) => document.getElementById(id);

export function tokenLabels(tokens) {
  return tokens.map((t) => visible(t.text));
}

export function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "—";
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return x.toFixed(digits);
}

// A probability as a percentage; one too small for `digits` decimals (a 50,257-token vocabulary has
// many) keeps two significant digits instead of reading "0.0%".
export function pct(p, digits = 1) {
  if (p === null || p === undefined) return "—";
  const s = (100 * p).toFixed(digits);
  return p > 0 && Number(s) === 0 ? `${(100 * p).toPrecision(2)}%` : `${s}%`;
}

// Plotly tick format for a probability axis: percentages with two significant digits, so an axis
// that ends at 0.004% still reads 0.001%, 0.002%, ... rather than 0% five times.
export const PROB_TICKS = ".2~p";

// `digits` significant digits after the first, in scientific notation when very small or large.
export function sci(x, digits = 2) {
  if (x === null || x === undefined) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a < 1e-3 || a >= 1e5 ? x.toExponential(digits) : x.toPrecision(digits + 1);
}

export function fixed(x, digits = 3) {
  return x === null || x === undefined ? "—" : x.toFixed(digits);
}

// A whole number with thousands separators: 1,811,939,328.
export function int(x) {
  return x === null || x === undefined ? "—" : Math.round(x).toLocaleString("en-US");
}

// Seconds as "42 s" or "3 min 5 s".
export function duration(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - 60 * m)} s`;
}

const UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
export function bytes(n) {
  let i = 0;
  let v = n;
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${n} bytes` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${UNITS[i]}`;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

// A token axis: one label per row/column while they fit (>= 14 px each; `gap` px for slanted
// labels), else every k-th with k a round step (2, 4, 5, 10, ...), the label prefixed by its
// position; the hover always names every token. A 128-token prompt gets 32 labels on a 500-px
// axis, never 128.
const TICK_PX = 14;
export const SLANTED_TICK_PX = 20;
const TICK_STEPS = [1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000];

// ticklabeloverflow "allow": the margins are sized for the labels, and Plotly's default ("hide
// past div") measures every label once per label drawn, each measure a layout of the whole page
// (2 s of one task for a 128-token map on a page of 17,000 elements).
export function tokenAxis(labels, px, extra = {}, gap = TICK_PX) {
  const n = labels.length;
  const room = Math.max(1, Math.floor(px / gap));
  const step = TICK_STEPS.find((s) => Math.ceil(n / s) <= room) ?? Math.ceil(n / room);
  const size = Math.max(9, Math.min(12, Math.floor((px * step) / Math.max(1, n)) - 2));
  const vals = labels.map((_, i) => i).filter((i) => i % step === 0);
  const text = (i) => (step === 1 || labels[i] === String(i) ? labels[i] : `${i} ${labels[i]}`);
  return {
    tickmode: "array", tickvals: vals, ticktext: vals.map(text),
    tickfont: { family: MONO, size }, showgrid: false, zeroline: false, automargin: true,
    ticklabeloverflow: "allow", ...extra,
  };
}

// Robust symmetric limit for signed data: the 99th percentile of |z| (so one outlier does not
// wash out the rest); the colour bar says it clips, hover gives the exact value.
export function signedLimit(rows) {
  const a = [];
  for (const r of rows) for (const v of r) if (v !== null && v !== undefined) a.push(Math.abs(v));
  if (!a.length) return 1;
  a.sort((x, y) => x - y);
  return a[Math.min(a.length - 1, Math.floor(a.length * 0.99))] || a[a.length - 1] || 1;
}

function plotConfig(name) {
  return {
    displaylogo: false, responsive: true,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
    toImageButtonOptions: { filename: name },
  };
}

function baseLayout(extra = {}) {
  return {
    font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: "#1d1d1f" },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff",
    margin: { l: 60, r: 20, t: 40, b: 40 },
    hoverlabel: { font: { family: MONO, size: 12 } },
    ...extra,
  };
}

// The one place a plot is drawn (or redrawn in place). Resolves once Plotly has drawn it.
export function draw(gd, data, layout, name) {
  const done = Plotly.react(gd, data, baseLayout(layout), plotConfig(name || gd.id));
  gd.dataset.drawn = String((+gd.dataset.drawn || 0) + 1);
  return done;
}

// Change only the layout of a drawn plot (e.g. move a selection outline).
export function relayout(gd, update) {
  return Plotly.relayout(gd, update);
}

// Remove a plot (its panel has nothing to show).
export function clearPlot(gd) {
  Plotly.purge(gd);
}

// A line or bar chart as the /learn panels draw them: a legend under the plot, axes that make
// room for their labels, the page's font and Plotly's own hover labels. Resolves once drawn.
export function chart(gd, data, layout = {}) {
  const full = {
    margin: { l: 64, r: 16, t: 28, b: 48 },
    height: 340,
    hovermode: "closest",
    legend: { orientation: "h", y: -0.22, x: 0 },
    font: { family: "system-ui, -apple-system, 'Segoe UI', sans-serif", size: 12 },
    hoverlabel: {},
    ...layout,
  };
  full.xaxis = { automargin: true, ...(full.xaxis || {}) };
  full.yaxis = { automargin: true, ...(full.yaxis || {}) };
  return draw(gd, data, full);
}

// --- drawing queue ---------------------------------------------------------------------------
// Plots are drawn one per task, the one nearest the viewport first, yielding to the browser in
// between, so a new prompt never freezes the page. Plots far below or above the viewport wait
// until the reader scrolls near them. A task with the same key replaces a stale one.
// body[data-drawn="1"] once nothing near the viewport is waiting.
const tasks = new Map();
let draining = false;
const near = () => innerHeight * 1.5;

export function later(key, node, fn) {
  tasks.set(key, { node, fn });
  document.body.dataset.drawn = "0";
  if (!draining) { draining = true; setTimeout(drain, 0); }
}

function distance(node) {
  const r = node.getBoundingClientRect();
  if (r.bottom < 0) return -r.bottom;
  if (r.top > innerHeight) return r.top - innerHeight;
  return 0;
}

function drain() {
  let best = null;
  let bestD = Infinity;
  for (const [k, t] of tasks) {
    const d = distance(t.node);
    if (d < bestD) { best = k; bestD = d; }
  }
  if (best === null || bestD > near()) {
    draining = false;
    document.body.dataset.drawn = "1";
    document.body.dataset.deferred = String(tasks.size);
    return;
  }
  const t = tasks.get(best);
  tasks.delete(best);
  const start = performance.now();
  try { t.fn(); } catch (err) { console.error(err); }
  // a User Timing entry per drawing ("draw <key>", the latest one kept), for a profiler or a test
  performance.clearMeasures(`draw ${best}`);
  performance.measure(`draw ${best}`, { start, end: performance.now() });
  setTimeout(drain, 0);
}

// After a scroll: draw what came near. Called by the page's keyboard navigation right after it
// scrolls, so body[data-drawn] turns "0" at once when something is waiting there.
export function drawNearby() {
  if (draining || !tasks.size) return;
  for (const t of tasks.values()) {
    if (distance(t.node) <= near()) {
      document.body.dataset.drawn = "0";
      draining = true;
      setTimeout(drain, 0);
      return;
    }
  }
}
addEventListener("scroll", drawNearby, { passive: true });
addEventListener("resize", drawNearby);

// --- downloads -------------------------------------------------------------------------------

function downloadBlob(blob, filename) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

function downloadJSON(obj, filename) {
  downloadBlob(new Blob([JSON.stringify(obj, null, 1)], { type: "application/json" }), `${filename}.json`);
}

function downloadPlotly(gd, format, filename) {
  const fl = gd._fullLayout || {};
  return Plotly.downloadImage(gd, { format, filename, width: fl.width || 900, height: fl.height || 500, scale: format === "png" ? 2 : 1 });
}

// An SVG element (not Plotly) as SVG or PNG.
function downloadSvgElement(svg, format, filename) {
  const clone = svg.cloneNode(true);
  clone.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  const text = new XMLSerializer().serializeToString(clone);
  if (format === "svg") {
    downloadBlob(new Blob([text], { type: "image/svg+xml" }), `${filename}.svg`);
    return;
  }
  const { width, height } = svg.getBoundingClientRect();
  const img = new Image();
  img.onload = () => {
    const c = document.createElement("canvas");
    c.width = Math.ceil(width * 2); c.height = Math.ceil(height * 2);
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    ctx.scale(2, 2); ctx.drawImage(img, 0, 0, width, height);
    c.toBlob((b) => downloadBlob(b, `${filename}.png`), "image/png");
  };
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(text)}`;
}

// A small PNG / SVG / JSON bar placed just above a figure. `getData` returns the exact API
// (part of the) response the figure was drawn from; `svgEl` switches images to a plain SVG;
// `canvas` (a function returning a <canvas>) makes the image a PNG of that canvas, with no SVG.
export function addDownloads(figure, name, getData, { svgEl = null, canvas = null } = {}) {
  if (figure.previousElementSibling?.classList.contains("dl-bar")) return;
  const image = (format) => () => {
    if (canvas) {
      const c = canvas();
      if (c) c.toBlob((b) => downloadBlob(b, `${name}.png`), "image/png");
      return;
    }
    const svg = typeof svgEl === "function" ? svgEl() : svgEl;
    if (svg) downloadSvgElement(svg, format, name);
    else if (figure._fullLayout) downloadPlotly(figure, format, name);
  };
  const bar = el("div", { class: "dl-bar", role: "group", "aria-label": `download ${name}`, "data-for": figure.id },
    el("span", { class: "dl-label", text: "download" }),
    el("button", { type: "button", class: "dl", "data-format": "png", title: `${name} as a PNG image`, onclick: image("png"), text: "PNG" }),
    canvas ? null : el("button", { type: "button", class: "dl", "data-format": "svg", title: `${name} as an SVG image`, onclick: image("svg"), text: "SVG" }),
    el("button", { type: "button", class: "dl", "data-format": "json", title: `the API data behind ${name} as JSON`,
      onclick: () => { const d = getData(); if (d) downloadJSON(d, name); }, text: "JSON" }));
  figure.before(bar);
}

// --- heatmaps ------------------------------------------------------------------------------

// A (rows x cols) heatmap whose rows are tokens and whose columns are features.
// opts: rowLabels, colTitle, rowTitle, signed, zmin/zmax, title, colorTitle, hoverName, height
export function tokenFeatureHeatmap(gd, z, opts) {
  const rows = opts.rowLabels;
  const n = rows.length;
  const lim = opts.signed ? signedLimit(z) : null;
  const height = opts.height || Math.max(220, Math.min(1000, 90 + n * 15));
  const data = [{
    type: "heatmap", z,
    x: z.length ? z[0].map((_, i) => i) : [], y: rows.map((_, i) => i),
    colorscale: opts.signed ? SIGNED : SEQ,
    zmin: opts.signed ? -lim : opts.zmin, zmax: opts.signed ? lim : opts.zmax, zmid: opts.signed ? 0 : undefined,
    colorbar: { title: { text: opts.colorTitle || "value", side: "right" }, thickness: 12 },
    customdata: (opts.rowHover || rows.map((r) => `“${r}”`)).map((r) => z[0].map(() => r)),
    hovertemplate: `${opts.rowName || "token"} %{y} %{customdata}<br>${opts.colName || "feature"} %{x}<br>${opts.hoverName || "value"} %{z}<extra></extra>`,
  }];
  const ncols = z.length ? z[0].length : 0;
  draw(gd, data, {
    title: opts.title ? { text: opts.title, x: 0, xanchor: "left", font: { size: 13 } } : undefined,
    height,
    shapes: opts.row === undefined || opts.row === null ? [] : [rowBox(opts.row, ncols)],
    margin: { l: 20, r: 10, t: opts.title ? 40 : 20, b: 40 },
    xaxis: { title: { text: opts.colTitle || "feature (0..d−1)" }, showgrid: false, zeroline: false },
    yaxis: { title: { text: opts.rowTitle || "" }, ...tokenAxis(rows, height - 60), autorange: "reversed" },
  }, opts.name || gd.id);
}

// A heat strip over a prompt's tokens: one row per entry of z (a layer, or one head of a layer),
// one column per token, Viridis from zmin to zmax (0..1). opts: rowNames, colorTitle, hoverName,
// name (download name), mark (a column outlined, e.g. the position read).
export function tokenStrip(gd, z, labels, opts = {}) {
  const names = opts.rowNames || z.map((_, r) => String(r));
  const height = Math.max(170, Math.min(900, 130 + z.length * 22));
  const data = [{
    type: "heatmap", z, x: labels.map((_, i) => i), y: z.map((_, r) => r), colorscale: SEQ,
    zmin: opts.zmin ?? 0, zmax: opts.zmax ?? 1, xgap: 1, ygap: 1,
    colorbar: { title: { text: opts.colorTitle || "", side: "right" }, thickness: 10 },
    customdata: z.map((_, r) => labels.map((t) => [names[r], t])),
    hovertemplate: `%{customdata[0]} · token %{x} “%{customdata[1]}”<br>${opts.hoverName || "value"} %{z}<extra></extra>`,
  }];
  const shapes = opts.mark === undefined || opts.mark === null ? [] : [{ type: "rect", xref: "x", yref: "paper",
    x0: opts.mark - 0.5, x1: opts.mark + 0.5, y0: 0, y1: 1, line: { color: OKABE.vermillion, width: 2 }, fillcolor: "rgba(0,0,0,0)" }];
  return draw(gd, data, {
    height, shapes, margin: { l: 20, r: 10, t: 10, b: 10 },
    xaxis: { ...tokenAxis(labels, Math.max(300, (gd.clientWidth || 900) - 220), {}, SLANTED_TICK_PX), side: "bottom", tickangle: -60 },
    yaxis: { tickmode: "array", tickvals: names.map((_, r) => r), ticktext: names, autorange: "reversed",
      tickfont: { family: MONO, size: 11 }, showgrid: false, zeroline: false, automargin: true },
  }, opts.name || gd.id);
}

const plainAxis = { tickmode: "auto", nticks: 9, showgrid: false, zeroline: false, automargin: true, ticklabeloverflow: "allow" };

// Rows of a causal model's attention stop at the diagonal (the API leaves out the masked keys,
// whose weight is exactly 0): pad each row to n columns with `fill` so a square can be drawn.
export function padRows(rows, n, fill = null) {
  return rows.map((r) => (r.length < n ? [...r, ...Array(n - r.length).fill(fill)] : r));
}

// A (T x T) query-by-key map. `z` may hold null (drawn as the masked "−∞"); rows shorter than T
// (a causal model's attention) are padded with empty cells, which causalMask covers.
// opts: signed, limit, zmin/zmax, colorTitle, hoverName, title, xTitle/yTitle, row (outlined),
//   cell/minSide/maxSide (the square's size), colorbar (false: none), tickangle, plain (numbered axes),
//   name (download name), traceName,
//   fit: size the square to the element's width, margins to the longest label (the big head map),
//   causalMask: cover the cells above the diagonal (a key after its query) with a light overlay
//     named "causal mask"; only for a model that has the mask (the response's `causal` says so).
//   window: a sliding window's width (the response's `window`; 0 none): the keys it hides are
//     covered by an overlay named "window mask" the same way.
//   shapes, annotations: more layout shapes / annotations (e.g. marks on the square)
export function squareHeatmap(gd, z, labels, opts = {}) {
  const n = labels.length;
  const signed = !!opts.signed;
  const lim = signed ? (opts.limit ?? signedLimit(z)) : null;
  const hasNull = z.some((r) => r.some((v) => v === null));
  const text = opts.plain ? null : padRows(z.map((r) => r.map((v) => (v === null ? "−∞ (masked)" : String(v)))), n, "");
  z = padRows(z, n);
  const pairs = opts.plain ? null : labels.map((q) => labels.map((k) => [q, k]));
  let side;
  let margin;
  let width;
  let height;
  let axis;
  if (opts.fit) {
    // as large as the element allows (30 px a cell, 220..620 px), with room for the labels above and left:
    // a first guess of the side picks the (thinned) labels, the margins fit the labels picked
    const bar = opts.colorbar === false ? 0 : 90;
    const room = (gd.clientWidth || 900) - bar - 10;
    const guess = Math.max(220, Math.min(620, room - 180, n * 30));
    axis = opts.plain ? plainAxis : tokenAxis(labels, guess, { automargin: false });
    const font = opts.plain ? 12 : axis.tickfont.size;
    const longest = Math.max(1, ...(opts.plain ? [String(n)] : axis.ticktext).map((s) => [...s].length));
    const labelPx = Math.min(140, Math.ceil(longest * font * 0.62) + 8);
    margin = { l: labelPx + 40, r: 10, t: Math.ceil(labelPx * 0.87) + 70, b: 10 };
    side = Math.max(220, Math.min(620, room - margin.l, n * 30));
    if (side < guess && !opts.plain) axis = tokenAxis(labels, side, { automargin: false });
    width = side + margin.l + margin.r + bar;
    height = side + margin.t + margin.b;
  } else {
    side = Math.max(180, Math.min(opts.maxSide || 560, Math.max(n * (opts.cell || 14), opts.minSide || 0)));
    margin = { l: 10, r: 10, t: opts.title ? 70 : 40, b: 10 };
    width = side + (opts.colorbar === false ? 90 : 150);
    height = side + 110;
    axis = opts.plain ? plainAxis : tokenAxis(labels, side);
  }
  const data = [{
    type: "heatmap", name: opts.traceName, z, x: labels.map((_, i) => i), y: labels.map((_, i) => i),
    colorscale: signed ? SIGNED : SEQ,
    zmin: signed ? -lim : (opts.zmin ?? 0), zmax: signed ? lim : (opts.zmax ?? 1), zmid: signed ? 0 : undefined,
    colorbar: opts.fit ? { title: { text: opts.colorTitle || "" }, thickness: 14, len: 1, lenmode: "fraction" }
      : { title: { text: opts.colorTitle || "", side: "right" }, thickness: 10 },
    showscale: opts.colorbar !== false,
    text, hoverongaps: true,
    customdata: pairs,
    hovertemplate: `query %{y} “%{customdata[0]}” · key %{x} “%{customdata[1]}”<br>${opts.hoverName || "value"} %{text}<extra></extra>`,
  }];
  if (opts.plain) {   // numbered rows and columns (positions): no per-cell labels needed
    delete data[0].text;
    delete data[0].customdata;
    data[0].hovertemplate = `${opts.yTitle} %{y} · ${opts.xTitle} %{x}<br>${opts.hoverName || "value"} %{z}<extra></extra>`;
  }
  if (opts.causalMask) {
    data.push({
      type: "heatmap", name: "causal mask", x: data[0].x, y: data[0].y,
      z: z.map((r, q) => r.map((_, k) => (k > q ? 1 : null))),
      colorscale: [[0, MASKED], [1, MASKED]], showscale: false, hoverongaps: false, customdata: pairs,
      hovertemplate: "token %{y} “%{customdata[0]}” cannot see the later token %{x} “%{customdata[1]}” (causal mask)<extra></extra>",
    });
  }
  if (opts.window > 0) {
    data.push({
      type: "heatmap", name: "window mask", x: data[0].x, y: data[0].y,
      z: z.map((r, q) => r.map((_, k) => (outsideWindow(opts.window, q, k) ? 1 : null))),
      colorscale: [[0, MASKED], [1, MASKED]], showscale: false, hoverongaps: false, customdata: pairs,
      hovertemplate: opts.plain ? `${opts.yTitle} %{y} · ${opts.xTitle} %{x}: outside the sliding window of ${opts.window} (masked)<extra></extra>`
        : `token %{y} “%{customdata[0]}” cannot see %{x} “%{customdata[1]}”: outside the sliding window of ${opts.window} (masked)<extra></extra>`,
    });
  }
  if (hasNull && side / n >= 16) {
    // write −∞ into the masked cells (a sliding window's too) while they are large enough to read
    const cells = { type: "scatter", mode: "text", hoverinfo: "skip", showlegend: false,
      x: [], y: [], text: [], textfont: { family: MONO, size: n > 14 ? 9 : 11, color: "#444" } };
    const masked = (v, q, k) => v === null || outsideWindow(opts.window || 0, q, k);
    z.forEach((r, q) => { r.forEach((v, k) => { if (masked(v, q, k)) { cells.x.push(k); cells.y.push(q); cells.text.push("−∞"); } }); });
    data.push(cells);
  }
  const title = !opts.title ? undefined : opts.fit
    ? { text: opts.title, x: 0, xanchor: "left", xref: "paper", y: 1, yanchor: "top", yref: "container", pad: { t: 8 } }
    : { text: opts.title, x: 0, xanchor: "left", font: { size: 13 } };
  // fit: the margins are already sized to the labels, so the square keeps its side
  const axisTitle = (t) => (opts.fit ? { text: t || "", standoff: 6 } : { text: t || "" });
  return draw(gd, data, {
    title, width, height, margin,
    plot_bgcolor: hasNull ? "#e9e9e9" : "#fff",
    shapes: [...(opts.row === undefined || opts.row === null ? [] : [rowBox(opts.row, n)]), ...(opts.shapes || [])],
    annotations: opts.annotations || [],
    xaxis: { ...axis, side: "top", tickangle: opts.tickangle ?? -60, range: [-0.5, n - 0.5], constrain: "domain", title: axisTitle(opts.xTitle) },
    yaxis: { ...axis, range: [n - 0.5, -0.5], constrain: "domain", scaleanchor: "x", title: axisTitle(opts.yTitle) },
  }, opts.name || gd.id);
}

// --- small multiples on <canvas> ------------------------------------------------------------
// Many small maps (every layer x head) as one grid of <canvas> elements, one pixel per cell of a
// map: 144 maps of 128 x 128 weights cost a few hundred DOM nodes, and a map is painted only when
// it scrolls into view (IntersectionObserver). Plotly would build one subplot and 16k hover
// entries per map and freeze the tab for seconds.

// Plotly's Viridis (the same stops), as a 256-colour lookup table for the canvases.
const VIRIDIS = [[0, "#440154"], [16, "#48186a"], [32, "#472d7b"], [48, "#424086"], [64, "#3b528b"], [80, "#33638d"],
  [96, "#2c728e"], [112, "#26828e"], [128, "#21918c"], [144, "#1fa088"], [160, "#28ae80"], [176, "#3fbc73"],
  [192, "#5ec962"], [208, "#84d44b"], [224, "#addc30"], [240, "#d8e219"], [255, "#fde725"]];
const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
let viridisLut = null;
function viridis() {
  if (viridisLut) return viridisLut;
  viridisLut = new Uint8ClampedArray(256 * 3);
  for (let j = 0; j + 1 < VIRIDIS.length; j++) {
    const [a, ca] = VIRIDIS[j];
    const [b, cb] = VIRIDIS[j + 1];
    const [x, y] = [rgb(ca), rgb(cb)];
    for (let i = a; i <= b; i++) {
      const f = (i - a) / (b - a);
      for (let c = 0; c < 3; c++) viridisLut[3 * i + c] = Math.round(x[c] + f * (y[c] - x[c]));
    }
  }
  return viridisLut;
}

// Paint one map (rows of values; a missing or null value is a masked cell, and so is a key outside
// a sliding window of `window` keys) into a canvas.
function paintMap(canvas, rows, n, zmin, zmax, window = 0) {
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  const lut = viridis();
  const masked = rgb(MASKED);
  const span = zmax - zmin || 1;
  for (let q = 0; q < n; q++) {
    const row = rows[q] || [];
    for (let k = 0; k < n; k++) {
      const v = row[k];
      const o = 4 * (q * n + k);
      if (v === null || v === undefined || outsideWindow(window, q, k)) {
        img.data[o] = masked[0]; img.data[o + 1] = masked[1]; img.data[o + 2] = masked[2];
      } else {
        const i = 3 * Math.max(0, Math.min(255, Math.round((255 * (v - zmin)) / span)));
        img.data[o] = lut[i]; img.data[o + 1] = lut[i + 1]; img.data[o + 2] = lut[i + 2];
      }
      img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

// A colour bar for the grid: Viridis from zmin to zmax, with its title.
function gridColorbar(zmin, zmax, title, maskedName) {
  const stops = VIRIDIS.map(([i, c]) => `${c} ${((100 * i) / 255).toFixed(1)}%`).join(", ");
  return el("div", { class: "hg-bar", "aria-hidden": "true" },
    el("span", { text: title || "" }), el("span", { class: "mono", text: fmt(zmin, 2) }),
    el("span", { class: "hg-ramp", style: `background: linear-gradient(to right, ${stops})` }),
    el("span", { class: "mono", text: fmt(zmax, 2) }),
    maskedName ? el("span", { class: "hg-key", style: `background: ${MASKED}` }) : null,
    maskedName ? el("span", { text: maskedName }) : null);
}

// The grid: maps[r][c] is a T x T map (rows may stop short: a causal model's masked keys).
// opts: rowNames, colNames (the headers), cellName(r, c) (its accessible name), zmin/zmax,
//   colorTitle, maskedName (the colour key's name for masked cells; none without it),
//   hoverText(r, c, q, k, value) (the tooltip's text), onSelect(r, c) (click, Enter or Space),
//   maxCell (the widest a map is drawn, 200 px), window (a sliding window: keys it hides are
//   painted as masked), colGroups ([{ label, title, from, to }]: a bracket over columns from..to,
//   e.g. the query heads sharing one key/value head).
// The box gets data-grid "RxC", data-drawn (+1 per build) and data-painted (maps painted so far);
// each canvas data-row, data-col and data-painted="1" once painted; each sits in a div.hg-cell
// whose div.hg-marks holds small marks a panel adds (marks(r, c)). Returns { select(r, c), marks(r, c) }.
export function heatGrid(box, maps, n, opts = {}) {
  if (box._grid) box._grid.observer.disconnect();
  const nR = maps.length;
  const nC = nR ? maps[0].length : 0;
  const zmin = opts.zmin ?? 0;
  const zmax = opts.zmax ?? 1;
  let painted = 0;
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      const c = e.target;
      observer.unobserve(c);
      paintMap(c, maps[+c.dataset.row][+c.dataset.col], n, zmin, zmax, opts.window || 0);
      c.dataset.painted = "1";
      painted += 1;
    }
    box.dataset.painted = String(painted);
  }, { rootMargin: "300px 0px" });
  const cells = [];
  if (opts.colGroups?.length) {
    cells.push(el("span", {}));
    for (const g of opts.colGroups) {
      cells.push(el("span", { class: "hg-group", style: `grid-column: span ${g.to - g.from + 1}`, title: g.title || null,
        dataset: { from: g.from, to: g.to }, text: g.label }));
    }
  }
  cells.push(el("span", {}));
  for (let c = 0; c < nC; c++) cells.push(el("span", { class: "hg-col", text: (opts.colNames || [])[c] ?? String(c) }));
  const canvases = [];
  const overlays = [];
  for (let r = 0; r < nR; r++) {
    cells.push(el("span", { class: "hg-row", text: (opts.rowNames || [])[r] ?? String(r) }));
    overlays.push([]);
    for (let c = 0; c < nC; c++) {
      const cv = el("canvas", { class: "hg-map", width: n, height: n, tabindex: 0, role: "button",
        "aria-label": opts.cellName ? opts.cellName(r, c) : `row ${r}, column ${c}`, dataset: { row: r, col: c } });
      const marks = el("div", { class: "hg-marks" });
      canvases.push(cv);
      overlays[r].push(marks);
      cells.push(el("div", { class: "hg-cell" }, cv, marks));
    }
  }
  const grid = el("div", { class: "hg-grid",   // maps at most maxCell (200) px wide
    style: `grid-template-columns: auto repeat(${nC}, minmax(0, 1fr)); max-width: ${nC * ((opts.maxCell || 200) + 6) + 40}px` }, cells);
  const tip = el("div", { class: "hg-tip mono", role: "tooltip", hidden: true });
  box.replaceChildren(gridColorbar(zmin, zmax, opts.colorTitle, opts.maskedName), grid, tip);
  const at = (ev) => {
    const cv = ev.target.closest?.("canvas.hg-map");
    return cv && box.contains(cv) ? cv : null;
  };
  grid.addEventListener("mousemove", (ev) => {
    const cv = at(ev);
    if (!cv || !opts.hoverText) { tip.hidden = true; return; }
    const r = +cv.dataset.row;
    const c = +cv.dataset.col;
    const rect = cv.getBoundingClientRect();
    const k = Math.min(n - 1, Math.max(0, Math.floor(((ev.clientX - rect.left) / rect.width) * n)));
    const q = Math.min(n - 1, Math.max(0, Math.floor(((ev.clientY - rect.top) / rect.height) * n)));
    const row = maps[r][c][q] || [];
    tip.textContent = opts.hoverText(r, c, q, k, row[k] ?? null);
    tip.hidden = false;
    tip.style.left = `${Math.min(ev.clientX + 14, innerWidth - tip.offsetWidth - 8)}px`;
    tip.style.top = `${ev.clientY + 14}px`;
  });
  grid.addEventListener("mouseleave", () => { tip.hidden = true; });
  const choose = (ev) => {
    const cv = at(ev);
    if (cv && opts.onSelect) opts.onSelect(+cv.dataset.row, +cv.dataset.col);
  };
  grid.addEventListener("click", choose);
  grid.addEventListener("keydown", (ev) => {   // a mark inside a cell is a button: it keeps its own keys
    if ((ev.key === "Enter" || ev.key === " ") && at(ev)) { ev.preventDefault(); choose(ev); }
  });
  // a map shown at least as large as its cells: crisp pixels; smaller: smoothed
  requestAnimationFrame(() => {
    const w = canvases.length ? canvases[0].clientWidth : 0;
    box.classList.toggle("hg-crisp", w >= n);
  });
  for (const cv of canvases) observer.observe(cv);
  box._grid = { observer };
  box.dataset.grid = `${nR}x${nC}`;
  box.dataset.painted = "0";
  box.dataset.drawn = String((+box.dataset.drawn || 0) + 1);
  return {
    select(r, c) {
      for (const cv of canvases) cv.classList.toggle("sel", +cv.dataset.row === r && +cv.dataset.col === c);
    },
    marks(r, c) {
      return (overlays[r] || [])[c] || null;
    },
  };
}

// The whole grid as one PNG-ready canvas (every map painted, headers written), for the download bar.
export function heatGridImage(maps, n, opts = {}) {
  const nR = maps.length;
  const nC = nR ? maps[0].length : 0;
  const cell = Math.max(n, 48);
  const gap = 6;
  const left = 44;
  const top = 22;
  const out = document.createElement("canvas");
  out.width = left + nC * (cell + gap);
  out.height = top + nR * (cell + gap);
  const ctx = out.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.fillStyle = "#1d1d1f";
  ctx.font = `12px ${MONO}`;
  const one = document.createElement("canvas");
  for (let c = 0; c < nC; c++) ctx.fillText((opts.colNames || [])[c] ?? String(c), left + c * (cell + gap), 14);
  for (let r = 0; r < nR; r++) {
    ctx.fillText((opts.rowNames || [])[r] ?? String(r), 2, top + r * (cell + gap) + cell / 2);
    for (let c = 0; c < nC; c++) {
      paintMap(one, maps[r][c], n, opts.zmin ?? 0, opts.zmax ?? 1, opts.window || 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(one, left + c * (cell + gap), top + r * (cell + gap), cell, cell);
    }
  }
  return out;
}

// An outline around one row of a heatmap (the selected position).
export function rowBox(row, ncols, color = "#D55E00", xref = "x", yref = "y") {
  return { type: "rect", xref, yref, x0: -0.5, x1: ncols - 0.5, y0: row - 0.5, y1: row + 0.5,
    line: { color, width: 2 }, fillcolor: "rgba(0,0,0,0)" };
}

// Show a panel-level note (e.g. an endpoint this server does not offer yet).
export function setNote(node, message, kind = "note") {
  if (!node) return;
  node.textContent = message || "";
  node.className = `note ${kind}`;
  node.hidden = !message;
}

// --- head roles -------------------------------------------------------------------------------
// One Okabe–Ito colour and one marker symbol per head role (the roles of GET /api/v1/heads and
// /training/{id}/heads), so a role looks the same in every chart; the symbols tell the roles apart
// without colour too.
export const ROLE_COLOURS = { "previous-token": OKABE.blue, "first-token": OKABE.purple, "current-token": OKABE.sky,
  local: OKABE.green, "duplicate-token": OKABE.orange, induction: OKABE.vermillion };
export const ROLE_SYMBOLS = { "previous-token": "circle", "first-token": "square", "current-token": "diamond",
  local: "triangle-up", "duplicate-token": "cross", induction: "star" };

// The outline of each ROLE_SYMBOLS marker in a 16 x 16 box (as SVG path data).
const star = Array.from({ length: 10 }, (_, i) => {
  const a = -Math.PI / 2 + (i * Math.PI) / 5;
  const r = i % 2 ? 3 : 7;
  return `${(8 + r * Math.cos(a)).toFixed(2)},${(8.6 + r * Math.sin(a)).toFixed(2)}`;
});
const SYMBOL_PATHS = {
  circle: "M8,2.5a5.5,5.5 0 1,0 0.001,0z", square: "M2.8,2.8h10.4v10.4h-10.4z", diamond: "M8,1.5L14.5,8L8,14.5L1.5,8z",
  "triangle-up": "M8,2L14.5,13.5H1.5z", cross: "M6,1.8h4v4.2h4.2v4h-4.2v4.2h-4v-4.2h-4.2v-4h4.2z", star: `M${star.join("L")}z`,
};

// A head role's marker as a small SVG: the role's colour and symbol; filled when the role is
// confirmed by ablation, hollow when ablation did not confirm it, hollow and dashed when untested.
export function roleMark(role, status = "confirmed", size = 14) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", size);
  svg.setAttribute("height", size);
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "role-symbol");
  const path = document.createElementNS(ns, "path");
  const colour = ROLE_COLOURS[role] || OKABE.grey;
  path.setAttribute("d", SYMBOL_PATHS[ROLE_SYMBOLS[role]] || SYMBOL_PATHS.circle);
  path.setAttribute("fill", status === "confirmed" ? colour : "#fff");
  path.setAttribute("stroke", colour);
  path.setAttribute("stroke-width", status === "confirmed" ? "1" : "2");
  path.setAttribute("stroke-linejoin", "round");
  if (status === "untested") path.setAttribute("stroke-dasharray", "2.2 1.6");
  svg.append(path);
  return svg;
}

// --- colours as CSS strings (cells drawn as HTML, e.g. /compare's character strips) ----------------
// A diverging, colour-blind-safe scale for signed differences: Okabe–Ito blue below 0, near-white
// at 0, vermillion above (as a Plotly colorscale, too).
export const DIVERGING = [[0, OKABE.blue], [0.5, "#f7f7f7"], [1, OKABE.vermillion]];

// Plotly's Viridis stops, evenly spaced (what a Plotly heatmap with colorscale SEQ shows).
const VIRIDIS_CSS = ["#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d", "#2c728e", "#26828e", "#21918c",
  "#1fa088", "#28ae80", "#3fbc73", "#5ec962", "#84d44b", "#addc30", "#d8e219", "#fde725"];
const hexRgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
const mix = (a, b, f) => `rgb(${a.map((c, k) => Math.round(c + f * (b[k] - c))).join(", ")})`;

// v's colour on Viridis between zmin and zmax (clipped), as "rgb(r, g, b)".
export function seqColour(v, zmin, zmax) {
  const t = (VIRIDIS_CSS.length - 1) * Math.max(0, Math.min(1, (v - zmin) / (zmax - zmin || 1)));
  const j = Math.min(VIRIDIS_CSS.length - 2, Math.floor(t));
  return mix(hexRgb(VIRIDIS_CSS[j]), hexRgb(VIRIDIS_CSS[j + 1]), t - j);
}

// v's colour on DIVERGING between -lim and +lim (clipped), as "rgb(r, g, b)".
export function divColour(v, lim) {
  const f = Math.max(-1, Math.min(1, v / (lim || 1)));
  return mix(hexRgb(DIVERGING[1][1]), hexRgb(DIVERGING[f < 0 ? 0 : 2][1]), Math.abs(f));
}

// Dark or white text, whichever reads better on an "rgb(r, g, b)" background.
export function inkOn(colour) {
  const [r, g, b] = (colour.match(/\d+/g) || [255, 255, 255]).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#1d1d1f" : "#fff";
}
