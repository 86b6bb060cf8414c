// The one place a Plotly figure is drawn: the page's layout and config, token axes, colour limits
// and the shapes the heatmaps share. Nothing here computes a model number: it only selects and
// lays out what the API sent.
import { MONO } from "./palette.js";

// Plotly tick format for a probability axis: percentages with two significant digits, so an axis
// that ends at 0.004% still reads 0.001%, 0.002%, ... rather than 0% five times.
export const PROB_TICKS = ".2~p";

// Whether a sliding window of `window` keys (0: none) hides key k from query q: k is more than
// window - 1 positions back. (Keys after q are the causal mask's.)
export const outsideWindow = (window, q, k) => window > 0 && k <= q - window;

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
// (A typed array sorts natively, numerically: a 128 x 768 map's limit in a few ms, where an Array
// sorted with a comparator took about 50.)
export function signedLimit(rows) {
  let n = 0;
  for (const r of rows) n += r.length;
  const all = new Float64Array(n);
  let k = 0;
  for (const r of rows) for (const v of r) if (v !== null && v !== undefined) all[k++] = Math.abs(v);
  if (!k) return 1;
  const a = all.subarray(0, k).sort();
  return a[Math.min(k - 1, Math.floor(k * 0.99))] || a[k - 1] || 1;
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

// Every axis of a figure, its traces' included: xaxis, yaxis, xaxis2, ...
function axisKeys(data, layout) {
  const keys = new Set(["xaxis", "yaxis"]);
  for (const k of Object.keys(layout)) if (/^[xy]axis\d*$/.test(k)) keys.add(k);
  for (const t of data) {
    if (t.xaxis) keys.add(`xaxis${t.xaxis.slice(1)}`);
    if (t.yaxis) keys.add(`yaxis${t.yaxis.slice(1)}`);
  }
  return keys;
}

// Tick labels may overflow: the axes make room for them (automargin). Plotly's default ("hide past
// div") measures every tick label of every axis on each draw, each measure a layout of the whole
// page: most of a second per plot on a 17,000-element page. And an axis drawn over another (a second
// y axis on the right) picks round ticks of its own: Plotly's default for it puts them at the first
// axis's grid lines, at values such as 6.8, 13.6, 20.4.
function axisDefaults(data, layout) {
  const out = { ...layout };
  for (const k of axisKeys(data, layout)) {
    const own = layout[k] || {};
    const ownTicks = own.overlaying && (own.tickmode || own.dtick !== undefined || own.tickvals);
    out[k] = { ticklabeloverflow: "allow", ...(own.overlaying && !ownTicks ? { tickmode: "auto" } : {}), ...own };
  }
  return out;
}

// The one place a plot is drawn (or redrawn in place). Resolves once Plotly has drawn it.
export function draw(gd, data, layout, name) {
  const done = Plotly.react(gd, data, axisDefaults(data, baseLayout(layout)), plotConfig(name || gd.id));
  gd.dataset.drawn = String((+gd.dataset.drawn || 0) + 1);
  return done;
}

// Fit every plot under `root` to its box again: one drawn while its section was hidden (a closed
// stage of the forward page) was laid out at Plotly's default width.
export function resizePlots(root) {
  for (const gd of root.querySelectorAll(".js-plotly-plot")) if (gd._fullLayout) Plotly.Plots.resize(gd);
}

// Remove a plot (its panel has nothing to show).
export function clearPlot(gd) {
  Plotly.purge(gd);
}

// A chart's legend goes under the plot, below the x axis's tick labels and title, with the bottom
// margin made tall enough for it up front: a legend that has to push the margin itself shrinks the
// plot, and its place (a share of the plot's height) moves up onto the axis's title.
function placeLegend(gd, data, full) {
  const gap = legendGap(full.xaxis, data);
  const rows = legendRows(data, full, (gd.clientWidth || 900) - full.margin.l - full.margin.r);
  full.margin = { ...full.margin, b: Math.max(full.margin.b, gap + rows * 19 + 10) };
  full.legend = { orientation: "h", x: 0, y: -gap / (full.height - full.margin.t - full.margin.b), yanchor: "top" };
}

// The rows a horizontal legend will take: its entries (a symbol, then the name at about 6.6 px a
// character) laid left to right, a new row when the next one does not fit.
function legendRows(data, full, width) {
  const named = data.filter((t) => t.showlegend !== false && t.name);
  if (full.showlegend === false || (named.length < 2 && full.showlegend !== true)) return 0;
  let rows = 1;
  let x = 0;
  for (const t of named) {
    const w = 48 + [...t.name].length * 6.6;
    if (x > 0 && x + w > width) { rows++; x = 0; }
    x += w;
  }
  return rows;
}

// How far under the plot the legend starts, in pixels: below the x axis's tick labels (slanted ones
// reach down by their length) and its title.
function legendGap(xaxis, data) {
  let ticks = 24;
  if (xaxis?.tickangle) {
    const labels = xaxis.ticktext || data.flatMap((t) => (t.x || []).filter((v) => typeof v === "string"));
    const longest = Math.max(3, ...labels.map((s) => [...s].length));
    ticks = 12 + Math.ceil(longest * 6.5 * Math.abs(Math.sin((xaxis.tickangle * Math.PI) / 180)));
  }
  return ticks + 6 + (xaxis?.title ? 36 : 0);
}

// A line or bar chart as the /learn panels draw them: a legend under the plot, axes that make
// room for their labels, the page's font and Plotly's own hover labels. Resolves once drawn.
export function chart(gd, data, layout = {}) {
  const full = {
    margin: { l: 64, r: 16, t: 28, b: 48 },
    height: 340,
    hovermode: "closest",
    font: { family: "system-ui, -apple-system, 'Segoe UI', sans-serif", size: 12 },
    hoverlabel: {},
    ...layout,
  };
  if (!full.legend) placeLegend(gd, data, full);
  full.xaxis = { automargin: true, ...(full.xaxis || {}) };
  full.yaxis = { automargin: true, ...(full.yaxis || {}) };
  return draw(gd, data, full);
}

// An outline around one row of a heatmap (the selected position).
export function rowBox(row, ncols, color = "#D55E00", xref = "x", yref = "y") {
  return { type: "rect", xref, yref, x0: -0.5, x1: ncols - 0.5, y0: row - 0.5, y1: row + 0.5,
    line: { color, width: 2 }, fillcolor: "rgba(0,0,0,0)" };
}
