// Stage 4: every layer x head as a grid of small maps (model view), the selected head large
// (#attention-plot), a head view with lines, and the selected query's weights as bars.
// Data: the `attention` part of POST /api/v1/forward. Whether a query may read later keys is the
// response's `causal`: with the mask the upper triangle is covered, without it every key is drawn;
// a sliding window (the response's `window`) masks the keys too far back the same way. With
// grouped-query attention (/health's n_kv_head < n_head) a bracket over the grid's columns names
// the key/value head each group of query heads shares. Other panels may put marks on the grid's
// cells (setGridDecorator: panel_heads' role marks).
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, tokenLabels } from "../lib/format.js";
import { heatGrid, heatGridImage } from "../lib/grid.js";
import { squareHeatmap } from "../lib/heatmaps.js";
import { MONO, OKABE, SEQ } from "../lib/palette.js";
import { draw, outsideWindow, tokenAxis } from "../lib/plot.js";

const SVGNS = "http://www.w3.org/2000/svg";
const BANDS = 50;        // head view: lines drawn as one path per band of weight 0.02 wide
let trace = null;
let sel = { layer: 0, head: 0, position: 0 };
let handlers = {};
let grid = null;         // the model view's grid (lib/grid.js heatGrid), for moving the selection outline
let nKvHead = 0;         // key/value heads (/health); 0 or n_head: every head has its own
let decorate = null;     // (marksOf(layer, head) -> element | null) => void, after each grid build

export function initAttentionOverview({ onSelectHead, onSelectPosition, kvHeads = 0 } = {}) {
  handlers = { onSelectHead, onSelectPosition };
  nKvHead = kvHeads;
  addDownloads($("model-view-plot"), "attention-all-heads", () => trace?.attention, { canvas: gridImage });
  addDownloads($("attention-plot"), "attention-head", () => trace?.attention);
  addDownloads($("head-view"), "head-view", () => trace?.attention, { svgEl: () => $("head-view").querySelector("svg") });
  addDownloads($("query-bars-plot"), "query-attention", () => trace?.attention);
}

export function renderAttentionOverview(t, selection) {
  if (t) trace = t;
  sel = selection;
  if (!trace?.attention) return;
  const a = trace.attention;
  $("attn-shapes").innerHTML = `${a.layers.length} layers × ${a.heads.length} heads, each a <b>T × T</b> map (T = ${trace.tokens.length}).`;
  later("model-view", $("model-view-plot"), drawModelView);
  drawSelected();
}

// Marks on the grid's cells: `fn(marksOf)` now (if the grid is built) and after every rebuild.
export function setGridDecorator(fn) {
  decorate = fn;
  applyDecorator();
}

function applyDecorator() {
  if (!grid || !decorate || !trace?.attention) return;
  const a = trace.attention;
  const g = grid;
  decorate((layer, head) => g.marks(a.layers.indexOf(layer), a.heads.indexOf(head)));
}

// Query heads per key/value head (1 without grouped-query attention).
function kvGroupSize(nHead) {
  return nKvHead > 0 && nKvHead < nHead ? nHead / nKvHead : 1;
}

// Only the selection changed (layer / head / position): redraw what depends on it.
export function setAttentionSelection(selection) {
  sel = selection;
  drawSelected();
}

// The model masks later keys unless the response says it was trained without the mask.
const causal = () => trace.causal !== false;
const windowOf = () => trace.window || 0;

function drawSelected() {
  if (!trace?.attention) return;
  drawHead();
  highlightModelView();
  later("head-view", $("head-view"), drawHeadView);
  later("query-bars", $("query-bars-plot"), drawQueryBars);
}

function pattern() {
  const a = trace.attention;
  const li = a.layers.indexOf(sel.layer);
  const hi = a.heads.indexOf(sel.head);
  return li < 0 || hi < 0 ? null : a.pattern[li][hi];
}

// The selected head, large: queries down the side, keys along the top.
function drawHead() {
  const z = pattern();
  if (!z) return;
  const group = kvGroupSize(trace.n_head);
  const kv = group > 1 ? ` (key/value head ${Math.floor(sel.head / group)})` : "";
  squareHeatmap($("attention-plot"), z, tokenLabels(trace.tokens), {
    fit: true, causalMask: causal(), window: windowOf(), traceName: "attention", title: `Layer ${sel.layer}, head ${sel.head}${kv}`,
    xTitle: "key: the token being read", yTitle: "query: the token reading", colorTitle: "weight", hoverName: "weight",
    name: "attention-head",
  });
}

// Every layer x head as a grid of small canvases (lib/grid.js heatGrid), each painted when it scrolls into view.
function drawModelView() {
  const a = trace.attention;
  const labels = tokenLabels(trace.tokens);
  const gd = $("model-view-plot");
  const win = windowOf();
  const maskedName = win ? `masked (${causal() ? "a later token, or " : ""}more than ${win - 1} back: the window)`
    : causal() ? "masked (a later token)" : null;
  grid = heatGrid(gd, a.pattern, labels.length, {
    rowNames: a.layers.map((l) => `L${l}`), colNames: a.heads.map((h) => `H${h}`),
    cellName: (li, hi) => `layer ${a.layers[li]}, head ${a.heads[hi]}: open it large`,
    zmin: 0, zmax: 1, colorTitle: "weight", maskedName, window: win, colGroups: kvGroups(a.heads),
    hoverText: (li, hi, q, k, w) => `layer ${a.layers[li]}, head ${a.heads[hi]} · query ${q} “${labels[q]}” → key ${k} “${labels[k]}” · ` +
      `weight ${w === null ? "masked" : outsideWindow(win, q, k) ? "masked (outside the window)" : w}`,
    onSelect: (li, hi) => { if (handlers.onSelectHead) handlers.onSelectHead(a.layers[li], a.heads[hi]); },
  });
  gd.dataset.window = String(win);
  highlightModelView();
  applyDecorator();
}

// Grouped-query attention: one bracket per key/value head over the query heads that share it
// (only when every head is in the grid, as the page asks for).
function kvGroups(heads) {
  const group = kvGroupSize(trace.n_head);
  if (group <= 1 || heads.length !== trace.n_head) return null;
  return Array.from({ length: trace.n_head / group }, (_, g) => ({
    label: `KV ${g}`, from: g * group, to: (g + 1) * group - 1,
    title: `query heads ${g * group}–${(g + 1) * group - 1} share key/value head ${g}: the same keys and values, their own queries`,
  }));
}

function gridImage() {
  if (!trace?.attention) return null;
  const a = trace.attention;
  return heatGridImage(a.pattern, trace.tokens.length,
    { rowNames: a.layers.map((l) => `L${l}`), colNames: a.heads.map((h) => `H${h}`), window: windowOf() });
}

function highlightModelView() {
  const a = trace.attention;
  $("model-view-plot").dataset.selected = `${sel.layer}.${sel.head}`;
  if (grid) grid.select(a.layers.indexOf(sel.layer), a.heads.indexOf(sel.head));
}

function drawHeadView() {
  const box = $("head-view");
  const z = pattern();
  if (!z) { box.replaceChildren(); return; }
  const labels = tokenLabels(trace.tokens);
  const n = labels.length;
  const rowH = n > 40 ? 14 : 18;
  const colW = 150;
  const gap = 140;
  const W = colW * 2 + gap;
  const H = n * rowH + 30;
  const svg = document.createElementNS(SVGNS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `head view of layer ${sel.layer}, head ${sel.head}`);
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  svg.append(mk("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }));
  svg.append(mk("text", { x: colW - 6, y: 14, "text-anchor": "end", "font-size": 11, fill: "#555", "font-family": "system-ui, sans-serif" }, "reading (query)"));
  svg.append(mk("text", { x: colW + gap + 6, y: 14, "font-size": 11, fill: "#555", "font-family": "system-ui, sans-serif" }, "read (key)"));
  const y = (i) => 30 + i * rowH + rowH / 2;
  const x0 = colW;
  const x1 = colW + gap;
  // The selected query's lines one by one (each names its weight on hover). Every other line goes
  // into one <path> per band of weight (BANDS of them, the band's middle as the opacity), so a
  // 128-token prompt's ~8,000 lines are a few dozen elements, not 16,000.
  const hot = mk("g", { class: "hv-selected" });
  const bands = Array.from({ length: BANDS }, () => []);
  const lastKey = (q) => (causal() ? Math.min(q, z[q].length - 1) : z[q].length - 1);
  let count = 0;
  for (let q = 0; q < n; q++) {
    for (let k = 0; k <= lastKey(q); k++) {
      const w = z[q][k];
      if (w < 0.005) continue;
      count += 1;
      if (q === sel.position) {
        const line = mk("line", { x1: x0, y1: y(q), x2: x1, y2: y(k), stroke: OKABE.vermillion,
          "stroke-opacity": decimal(w, 3), "stroke-width": 2.5 });
        line.append(mk("title", {}, `“${labels[q]}” (${q}) → “${labels[k]}” (${k}): ${decimal(w, 4)}`));
        hot.append(line);
      } else {
        bands[Math.min(BANDS - 1, Math.floor(w * BANDS))].push(`M${x0} ${y(q)}L${x1} ${y(k)}`);
      }
    }
  }
  const lines = mk("g", { class: "hv-lines" });
  bands.forEach((segs, b) => {
    if (segs.length) lines.append(mk("path", { d: segs.join(""), fill: "none", stroke: OKABE.blue, "stroke-width": 1.5,
      "stroke-opacity": decimal((b + 0.5) / BANDS, 3), "data-band": b }));
  });
  svg.append(lines, hot);
  const font = n > 40 ? 10 : 12;
  labels.forEach((t, i) => {
    const isSel = i === sel.position;
    const left = mk("text", { x: x0 - 6, y: y(i) + font / 3, "text-anchor": "end", "font-size": font, "font-family": MONO,
      fill: isSel ? OKABE.vermillion : "#1d1d1f", "font-weight": isSel ? 700 : 400, class: "hv-tok", "data-index": i }, t);
    const right = mk("text", { x: x1 + 6, y: y(i) + font / 3, "font-size": font, "font-family": MONO, fill: "#1d1d1f", "data-index": i }, t);
    left.style.cursor = "pointer";
    left.addEventListener("click", () => handlers.onSelectPosition?.(i));
    svg.append(left, right);
  });
  box.replaceChildren(svg);
  box.dataset.lines = String(count);
}

function drawQueryBars() {
  const z = pattern();
  if (!z) return;
  const labels = tokenLabels(trace.tokens);
  const q = Math.min(sel.position, z.length - 1);
  const keys = labels.map((_, i) => i).filter((k) => !causal() || k <= q);
  const height = Math.max(260, Math.min(900, 80 + keys.length * 16));
  const written = (height - 80) / keys.length >= 12;   // each weight written next to its bar while the bars are tall enough
  draw($("query-bars-plot"), [{
    type: "bar", orientation: "h", x: keys.map((k) => z[q][k]), y: keys,
    marker: { color: keys.map((k) => z[q][k]), colorscale: SEQ, cmin: 0, cmax: 1, line: { color: "#333", width: keys.length > 60 ? 0 : 0.5 } },
    text: written ? keys.map((k) => decimal(z[q][k], 3)) : undefined, textposition: "outside", cliponaxis: false,
    customdata: keys.map((k) => labels[k]),
    hovertemplate: "key %{y} “%{customdata}”<br>weight %{x}<extra></extra>",
  }], {
    height,
    title: { text: `query ${q} “${labels[q]}”, layer ${sel.layer}, head ${sel.head}`, x: 0, xanchor: "left", font: { size: 12 } },
    xaxis: { title: { text: "attention weight" }, rangemode: "tozero" },
    yaxis: { ...tokenAxis(labels.slice(0, keys.length), height - 80), autorange: "reversed" },
    margin: { l: 10, r: 20, t: 40, b: 40 },
  }, "query-attention");
}

// Stage 4, for main.js's table (its head roles are panel_heads'): drawn once per prompt, then
// only the selection moves.
export const panel = {
  stage: "attention",
  parts: ["attention"],
  init: (page) => initAttentionOverview({ kvHeads: page.nKvHead, onSelectPosition: page.selectPosition,
    onSelectHead: (l, h) => { page.selectHead(l, h); $("attention-plot").scrollIntoView({ block: "center" }); } }),
  render: (trace, view) => {
    if (view.promptChanged) renderAttentionOverview(trace, view.sel);
    else setAttentionSelection(view.sel);
  },
  position: (sel) => setAttentionSelection(sel),
};
