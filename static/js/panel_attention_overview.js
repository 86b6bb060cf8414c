// Stage 4: every layer x head as a grid of small maps (model view), the selected head large
// (#attention-plot), a head view with lines, and the selected query's weights as bars.
// Data: the `attention` part of POST /api/v1/forward. Whether a query may read later keys is the
// response's `causal`: with the mask the upper triangle is covered, without it every key is drawn.
import { $, MASKED, MONO, OKABE, SEQ, addDownloads, draw, fmt, later, padRows, relayout, squareHeatmap, tokenAxis, tokenLabels } from "./viz.js";

const SVGNS = "http://www.w3.org/2000/svg";
let trace = null;
let sel = { layer: 0, head: 0, position: 0 };
let handlers = {};

export function initAttentionOverview({ onSelectHead, onSelectPosition } = {}) {
  handlers = { onSelectHead, onSelectPosition };
  addDownloads($("model-view-plot"), "attention-all-heads", () => trace && trace.attention);
  addDownloads($("attention-plot"), "attention-head", () => trace && trace.attention);
  addDownloads($("head-view"), "head-view", () => trace && trace.attention, { svgEl: () => $("head-view").querySelector("svg") });
  addDownloads($("query-bars-plot"), "query-attention", () => trace && trace.attention);
}

export function renderAttentionOverview(t, selection) {
  if (t) trace = t;
  sel = selection;
  if (!trace || !trace.attention) return;
  const a = trace.attention;
  $("attn-shapes").innerHTML = `${a.layers.length} layers × ${a.heads.length} heads, each a <b>T × T</b> map (T = ${trace.tokens.length}).`;
  later("model-view", $("model-view-plot"), drawModelView);
  drawSelected();
}

// Only the selection changed (layer / head / position): redraw what depends on it.
export function setAttentionSelection(selection) {
  sel = selection;
  drawSelected();
}

// The model masks later keys unless the response says it was trained without the mask.
const causal = () => trace.causal !== false;

function drawSelected() {
  if (!trace || !trace.attention) return;
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
  squareHeatmap($("attention-plot"), z, tokenLabels(trace.tokens), {
    fit: true, causalMask: causal(), traceName: "attention", title: `Layer ${sel.layer}, head ${sel.head}`,
    xTitle: "key: the token being read", yTitle: "query: the token reading", colorTitle: "weight", hoverName: "weight",
    name: "attention-head",
  });
}

function drawModelView() {
  const a = trace.attention;
  const nL = a.layers.length;
  const nH = a.heads.length;
  const labels = tokenLabels(trace.tokens);
  const data = [];
  const annotations = [];
  a.layers.forEach((l, li) => a.heads.forEach((h, hi) => {
    const k = li * nH + hi + 1;
    data.push({
      type: "heatmap", z: padRows(a.pattern[li][hi], labels.length), xaxis: `x${k}`, yaxis: `y${k}`, coloraxis: "coloraxis",
      name: `L${l} H${h}`, meta: [l, h],
      customdata: labels.map((q) => labels.map((kk) => [q, kk])),
      hovertemplate: `layer ${l}, head ${h}<br>query %{y} “%{customdata[0]}” → key %{x} “%{customdata[1]}”<br>weight %{z}<extra></extra>`,
    });
    annotations.push({ text: `L${l} H${h}`, xref: `x${k} domain`, yref: `y${k} domain`, x: 0, y: 1.02,
      xanchor: "left", yanchor: "bottom", showarrow: false, font: { size: 11 } });
  }));
  const axes = {};
  const n = trace.tokens.length;
  for (let k = 1; k <= nL * nH; k++) {
    axes[`xaxis${k}`] = { showticklabels: false, showgrid: false, zeroline: false, range: [-0.5, n - 0.5], constrain: "domain" };
    axes[`yaxis${k}`] = { showticklabels: false, showgrid: false, zeroline: false, range: [n - 0.5, -0.5], scaleanchor: `x${k}`, constrain: "domain" };
    if (k % nH === 1 || nH === 1) {
      const l = a.layers[Math.floor((k - 1) / nH)];
      axes[`yaxis${k}`].title = { text: `layer ${l}`, font: { size: 12 } };
    }
  }
  const gd = $("model-view-plot");
  const width = Math.min(gd.clientWidth || 1000, 200 * nH + 120);
  draw(gd, data, {
    ...axes, annotations, width, height: Math.round(((width - 120) / nH) * nL) + 60,
    grid: { rows: nL, columns: nH, pattern: "independent", roworder: "top to bottom", xgap: 0.08, ygap: 0.12 },
    coloraxis: { colorscale: SEQ, cmin: 0, cmax: 1, colorbar: { title: { text: "weight" }, thickness: 10 } },
    margin: { l: 50, r: 10, t: 30, b: 10 },
    plot_bgcolor: MASKED,  // a causal model's masked cells (the API leaves them out) show as the mask's grey
    shapes: selectedBox(),
  }, "attention-all-heads");
  if (!gd.dataset.clickBound) {
    gd.dataset.clickBound = "1";
    gd.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (!p) return;
      const [l, h] = p.data.meta;
      if (handlers.onSelectHead) handlers.onSelectHead(l, h);
    });
  }
  gd.dataset.grid = `${nL}x${nH}`;
}

function selectedBox() {
  const a = trace.attention;
  const li = a.layers.indexOf(sel.layer);
  const hi = a.heads.indexOf(sel.head);
  $("model-view-plot").dataset.selected = `${sel.layer}.${sel.head}`;
  if (li < 0 || hi < 0) return [];
  const k = li * a.heads.length + hi + 1;
  return [{ type: "rect", xref: `x${k} domain`, yref: `y${k} domain`, x0: -0.04, x1: 1.04, y0: -0.04, y1: 1.04,
    line: { color: OKABE.vermillion, width: 3 } }];
}

function highlightModelView() {
  const gd = $("model-view-plot");
  if (!gd._fullLayout || !gd.data || gd.data.length !== trace.attention.layers.length * trace.attention.heads.length) return;
  relayout(gd, { shapes: selectedBox() });
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
  const lines = mk("g", { class: "hv-lines" });
  const hot = mk("g", { class: "hv-selected" });
  const lastKey = (q) => (causal() ? Math.min(q, z[q].length - 1) : z[q].length - 1);
  for (let q = 0; q < n; q++) {
    for (let k = 0; k <= lastKey(q); k++) {
      const w = z[q][k];
      if (w < 0.005) continue;
      const isSel = q === sel.position;
      const line = mk("line", { x1: x0, y1: y(q), x2: x1, y2: y(k), stroke: isSel ? OKABE.vermillion : OKABE.blue,
        "stroke-opacity": fmt(w, 3), "stroke-width": isSel ? 2.5 : 1.5 });
      line.append(mk("title", {}, `“${labels[q]}” (${q}) → “${labels[k]}” (${k}): ${fmt(w, 4)}`));
      (isSel ? hot : lines).append(line);
    }
  }
  svg.append(lines, hot);
  const font = n > 40 ? 10 : 12;
  labels.forEach((t, i) => {
    const isSel = i === sel.position;
    const left = mk("text", { x: x0 - 6, y: y(i) + font / 3, "text-anchor": "end", "font-size": font, "font-family": MONO,
      fill: isSel ? OKABE.vermillion : "#1d1d1f", "font-weight": isSel ? 700 : 400, class: "hv-tok", "data-index": i }, t);
    const right = mk("text", { x: x1 + 6, y: y(i) + font / 3, "font-size": font, "font-family": MONO, fill: "#1d1d1f", "data-index": i }, t);
    left.style.cursor = "pointer";
    left.addEventListener("click", () => handlers.onSelectPosition && handlers.onSelectPosition(i));
    svg.append(left, right);
  });
  box.replaceChildren(svg);
  box.dataset.lines = String(lines.childElementCount + hot.childElementCount);
}

function drawQueryBars() {
  const z = pattern();
  if (!z) return;
  const labels = tokenLabels(trace.tokens);
  const q = Math.min(sel.position, z.length - 1);
  const keys = labels.map((_, i) => i).filter((k) => !causal() || k <= q);
  const height = Math.max(260, Math.min(900, 80 + keys.length * 16));
  draw($("query-bars-plot"), [{
    type: "bar", orientation: "h", x: keys.map((k) => z[q][k]), y: keys,
    marker: { color: keys.map((k) => z[q][k]), colorscale: SEQ, cmin: 0, cmax: 1, line: { color: "#333", width: 0.5 } },
    text: keys.map((k) => fmt(z[q][k], 3)), textposition: "outside", cliponaxis: false,
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
