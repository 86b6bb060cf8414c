// Stage 3: one block's attention half for the selected layer / head / position:
// LayerNorm (or RMSNorm: `layernorm.kind`) -> Q, K, V (after RoPE's turn when `head_detail.rotated`;
// K and V those of the shared key/value head `kv_head` with grouped-query attention) -> scores ->
// causal mask (and a sliding window, the trace's `window`) -> softmax -> z -> head result -> residual add.
// Data: the `layernorm` and `head_detail` parts of POST /api/v1/forward.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, tokenLabels } from "../lib/format.js";
import { squareHeatmap, tokenFeatureHeatmap } from "../lib/heatmaps.js";
import { MONO, OKABE, SIGNED } from "../lib/palette.js";
import { draw, rowBox, signedLimit, tokenAxis } from "../lib/plot.js";

let ln = null;
let hd = null;
let labels = [];
let feature = 0;
let onFeature = null;
let win = 0;             // sliding window (0: none)
let nHead = 1;
let nKvHead = 0;         // /health's n_kv_head (0: as many as query heads)

export function initBlock({ feature: f = 0, onFeatureChange, kvHeads = 0 } = {}) {
  feature = f;
  nKvHead = kvHeads;
  onFeature = onFeatureChange || null;
  const input = $("ln-feature");
  input.value = String(feature);
  input.addEventListener("change", () => setFeature(+input.value));
  addDownloads($("ln-plot"), "layernorm", () => ln);
  for (const [id, name] of [["qkv-plot", "qkv"], ["scores-plot", "scores"], ["masked-plot", "masked-scores"],
    ["pattern-plot", "pattern"], ["z-plot", "z"], ["result-plot", "head-result"], ["resid-add-plot", "residual-add"]]) {
    addDownloads($(id), name, () => hd);
  }
}

function setFeature(i) {
  if (!ln) return;
  const d = ln.input.length;
  feature = Math.max(0, Math.min(d - 1, Number.isFinite(i) ? Math.round(i) : 0));
  $("ln-feature").value = String(feature);
  drawLayerNorm();
  if (onFeature) onFeature(feature);
}

// Query heads per key/value head (1 without grouped-query attention).
const groupSize = () => (nKvHead > 0 && nKvHead < nHead ? nHead / nKvHead : 1);

export function renderBlock(trace, parts = ["layernorm", "head_detail"]) {
  if (trace.tokens) labels = tokenLabels(trace.tokens);
  win = trace.window || 0;
  nHead = trace.n_head || 1;
  if (trace.layernorm && parts.includes("layernorm")) { ln = trace.layernorm; later("ln", $("ln-plot"), drawLayerNorm); }
  if (trace.head_detail && parts.includes("head_detail")) { hd = trace.head_detail; drawHead(trace.d_model); }
  const l = (hd || ln)?.layer;
  const p = (hd || ln)?.position;
  const kv = hd && groupSize() > 1 ? ` (key/value head ${hd.kv_head})` : "";
  $("block-tag").textContent = hd ? `layer ${hd.layer} · head ${hd.head}${kv} · position ${p} “${labels[p] ?? ""}”`
    : (l !== undefined ? `layer ${l}` : "");
}

function drawLayerNorm() {
  const rms = ln.kind === "rmsnorm";
  const step = $("step-ln");
  step.dataset.kind = ln.kind || "layernorm";
  $("ln-title").textContent = `a · ${rms ? "RMSNorm" : "LayerNorm"}`;
  for (const c of step.querySelectorAll("[data-kind]")) c.hidden = c.dataset.kind !== step.dataset.kind;
  const d = ln.input.length;
  if (feature >= d) feature = d - 1;
  $("ln-feature").max = String(d - 1);
  const idx = ln.input.map((_, i) => i);
  const sel = feature;
  const pointColors = (c) => idx.map((i) => (i === sel ? OKABE.vermillion : c));
  const sizes = idx.map((i) => (i === sel ? 11 : 5));
  const data = [
    { type: "scatter", mode: "markers", name: "input x", x: idx, y: ln.input, xaxis: "x", yaxis: "y",
      marker: { color: pointColors(OKABE.blue), size: sizes }, hovertemplate: "feature %{x}<br>input %{y}<extra></extra>" },
    { type: "scatter", mode: "markers", name: rms ? "normalised x / rms" : "normalised (x − mean) / std", x: idx, y: ln.normalized, xaxis: "x2", yaxis: "y2",
      marker: { color: pointColors(OKABE.grey), size: sizes, symbol: "circle-open" }, hovertemplate: "feature %{x}<br>normalised %{y}<extra></extra>" },
    { type: "scatter", mode: "markers", name: ln.shift ? "output γ·normalised + β" : "output γ·normalised", x: idx, y: ln.output, xaxis: "x2", yaxis: "y2",
      marker: { color: pointColors(OKABE.orange), size: sizes }, hovertemplate: "feature %{x}<br>output %{y}<extra></extra>" },
  ];
  const hasMean = ln.mean !== null && ln.mean !== undefined;   // RMSNorm subtracts no mean
  const shapes = [
    ...(hasMean ? [{ type: "line", xref: "x", yref: "y", x0: -0.5, x1: d - 0.5, y0: ln.mean, y1: ln.mean, line: { color: OKABE.black, dash: "dash", width: 1 } }] : []),
    { type: "line", xref: "x", yref: "paper", x0: sel, x1: sel, y0: 0, y1: 1, line: { color: OKABE.vermillion, width: 1 } },
  ];
  draw($("ln-plot"), data, {
    height: 420, showlegend: true, legend: { orientation: "h", y: 1.12 },
    grid: { rows: 2, columns: 1, subplots: [["xy"], ["x2y2"]], roworder: "top to bottom" },
    xaxis: { title: { text: "" }, range: [-1, d], showgrid: false, matches: "x2" },
    xaxis2: { title: { text: `feature (0..${d - 1})` }, range: [-1, d], showgrid: false },
    yaxis: { title: { text: "input" } }, yaxis2: { title: { text: "after" } },
    annotations: hasMean ? [{ xref: "paper", yref: "y", x: 1, y: ln.mean, xanchor: "right", yanchor: "bottom", showarrow: false,
      text: `mean ${decimal(ln.mean, 4)}`, font: { size: 11 } }]
      : [{ xref: "paper", yref: "paper", x: 1, y: 1, xanchor: "right", yanchor: "bottom", showarrow: false,
        text: `no mean subtracted · rms ${decimal(ln.std, 4)}`, font: { size: 11 } }],
    shapes, margin: { l: 60, r: 10, t: 40, b: 40 },
  }, "layernorm");
  const gd = $("ln-plot");
  if (!gd.dataset.clickBound) {
    gd.dataset.clickBound = "1";
    gd.on("plotly_click", (ev) => { const p = ev.points?.[0]; if (p) setFeature(p.x); });
  }
  const i = sel;
  const row = (k, v, title) => el("tr", { title: title || "" }, el("th", { text: k }), el("td", { class: "mono", text: v }));
  const caption = el("caption", { text: `ln1 (${rms ? "RMSNorm" : "LayerNorm"}) of layer ${ln.layer}, position ${ln.position} “${labels[ln.position] ?? ""}”, feature ${i}` });
  const shift = row(`shift β[${i}]`, ln.shift ? decimal(ln.shift[i], 5) : "none");
  const out = row(ln.shift ? "output γ·normalised + β" : "output γ·normalised", decimal(ln.output[i], 5));
  $("ln-table").replaceChildren(...(rms ? [caption,
    row(`input x[${i}]`, decimal(ln.input[i], 5)),
    row("mean subtracted", "none (RMSNorm)", "RMSNorm keeps the mean: it only rescales"),
    row("mean of squares x²", decimal(ln.variance, 5)),
    row("ε", String(ln.eps)),
    row("rms = √(mean x² + ε)", decimal(ln.std, 5)),
    row(`normalised x[${i}] / rms`, decimal(ln.normalized[i], 5)),
    row(`gain γ[${i}]`, decimal(ln.gain[i], 5)),
    shift, out,
  ] : [caption,
    row(`input x[${i}]`, decimal(ln.input[i], 5)),
    row("mean μ (over all features)", decimal(ln.mean, 5)),
    row("variance σ²", decimal(ln.variance, 5)),
    row("ε", String(ln.eps)),
    row("std = √(σ² + ε)", decimal(ln.std, 5)),
    row(`normalised (x[${i}] − μ) / std`, decimal(ln.normalized[i], 5)),
    row(`gain γ[${i}]`, decimal(ln.gain[i], 5)),
    shift, out,
  ]));
  $("step-ln").dataset.feature = String(i);
}

function drawHead(dModel) {
  const T = hd.pattern.length;
  const p = hd.position;
  const g = groupSize();
  const first = Math.floor(hd.head / g) * g;
  $("block-shapes").innerHTML = `<b>T</b> = ${T}, <b>d</b> = ${dModel}, <b>d<sub>head</sub></b> = ${hd.d_head}: ` +
    `Q, K, V are T × d<sub>head</sub>; scores and pattern T × T; z is T × d<sub>head</sub>; the head result T × d. ` +
    `Scale 1/√d<sub>head</sub> = ${decimal(hd.scale, 5)}.` +
    (g > 1 ? ` <span id="kv-note">Grouped-query attention: query head ${hd.head} reads <b>key/value head ${hd.kv_head}</b>, ` +
      `shared by query heads ${first}–${first + g - 1}; K and V below are that shared head's.</span>` : "") +
    (hd.rotated ? " Q and K are shown after RoPE has turned them by their positions (b′)." : "") +
    (win ? ` Sliding window: each query sees its last ${win} keys.` : "");
  $("block-panel").dataset.kvHead = String(hd.kv_head ?? hd.head);

  const h = hd;
  later("qkv", $("qkv-plot"), () => drawQKV(h, T, p));
  // three maps side by side while each fits in a third of the panel (the first map shares the
  // second one's colour bar: 2 bars of ~60 px, 3 label margins of ~90 px), otherwise one a row, each
  // two thirds of the panel wide (narrower, a map alone in its row leaves most of the row empty)
  const wide = $("step-scores").clientWidth || 1100;
  const room = (wide - 40 - 120) / 3 - 90;
  const across = T * 10 <= room;
  const alone = Math.max(180, Math.floor((wide * 2) / 3) - 150);
  const sq = across ? { row: p, cell: 10, maxSide: Math.floor(room), minSide: Math.floor(room), xTitle: "key", yTitle: "query" }
    : { row: p, maxSide: alone, minSide: alone, xTitle: "key", yTitle: "query" };
  later("scores", $("scores-plot"), () => squareHeatmap($("scores-plot"), h.scores, labels, { ...sq, signed: true, colorbar: !across, colorTitle: "score", hoverName: "score", name: "scores" }));
  const w = win;
  later("masked", $("masked-plot"), () => squareHeatmap($("masked-plot"), h.masked_scores, labels, { ...sq, signed: true, limit: signedLimit(h.scores), colorTitle: "score", hoverName: "masked score", name: "masked-scores", window: w }));
  later("pattern", $("pattern-plot"), () => squareHeatmap($("pattern-plot"), h.pattern, labels, { ...sq, zmin: 0, zmax: 1, colorTitle: "weight", hoverName: "weight", name: "pattern", window: w }));
  later("z", $("z-plot"), () => tokenFeatureHeatmap($("z-plot"), h.z, { rowLabels: labels, signed: true, row: p, colTitle: `z: dim 0..${h.d_head - 1}`, colName: "dim", colorTitle: "z", hoverName: "z", name: "z" }));
  later("result", $("result-plot"), () => tokenFeatureHeatmap($("result-plot"), h.result, { rowLabels: labels, signed: true, row: p, colTitle: `feature 0..${dModel - 1}`, colorTitle: "result", hoverName: "head result", name: "head-result" }));
  later("resid-add", $("resid-add-plot"), () => drawResidAdd(h, p, dModel));
  $("scores-caption").hidden = !across;
  $("block-panel").dataset.head = `${hd.layer}.${hd.head}.${p}`;
}

// Q, K, V side by side on one colour scale.
function drawQKV(hd, T, p) {
  const lim = Math.max(signedLimit(hd.q), signedLimit(hd.k), signedLimit(hd.v));
  const height = Math.max(240, Math.min(1000, 100 + T * 15));
  const kv = groupSize() > 1 ? `, key/value head ${hd.kv_head}` : "";
  const turned = hd.rotated ? ", turned" : "";
  const mats = [["q", `Q (queries${turned})`], ["k", `K (keys${turned}${kv})`], ["v", `V (values${kv})`]];
  const data = mats.map(([key, name], j) => ({
    type: "heatmap", z: hd[key], name, xaxis: `x${j ? j + 1 : ""}`, yaxis: "y", coloraxis: "coloraxis",
    customdata: labels.map((t) => hd[key][0].map(() => t)),
    hovertemplate: `${name}<br>token %{y} “%{customdata}”<br>dim %{x}: %{z}<extra></extra>`,
  }));
  const gap = 0.03;
  const w = (1 - 2 * gap) / 3;
  const axes = {};
  mats.forEach(([, name], j) => {
    axes[`xaxis${j ? j + 1 : ""}`] = { domain: [j * (w + gap), j * (w + gap) + w], anchor: "y", showgrid: false, zeroline: false,
      title: { text: `${name}: dim 0..${hd.d_head - 1}` } };
  });
  draw($("qkv-plot"), data, {
    height, ...axes,
    yaxis: { ...tokenAxis(labels, height - 70), autorange: "reversed" },
    coloraxis: { colorscale: SIGNED, cmin: -lim, cmax: lim, cmid: 0, colorbar: { title: { text: "value" }, thickness: 10 } },
    shapes: [0, 1, 2].map((j) => rowBox(p, hd.d_head, OKABE.vermillion, `x${j ? j + 1 : ""}`, "y")),
    margin: { l: 20, r: 10, t: 20, b: 45 },
  }, "qkv");
}

// resid_pre + attn_out = resid_mid at the selected position
function drawResidAdd(hd, p, dModel) {
  const rows = [hd.resid_pre, hd.attn_out, hd.resid_mid];
  const names = ["stream before (resid_pre)", "+ attention output (all heads)", "= stream after (resid_mid)"];
  const rl = signedLimit(rows);
  draw($("resid-add-plot"), [{
    type: "heatmap", z: rows, y: names, x: hd.resid_pre.map((_, i) => i), colorscale: SIGNED, zmin: -rl, zmax: rl, zmid: 0,
    colorbar: { title: { text: "value" }, thickness: 10 },
    hovertemplate: "%{y}<br>feature %{x}: %{z}<extra></extra>",
  }], {
    height: 200, margin: { l: 220, r: 10, t: 20, b: 40 },
    title: { text: `position ${p} “${labels[p] ?? ""}”`, x: 0, xanchor: "left", font: { size: 12 } },
    xaxis: { title: { text: `feature (0..${dModel - 1})` }, showgrid: false },
    yaxis: { autorange: "reversed", tickfont: { family: MONO, size: 12 }, automargin: true },
  }, "residual-add");
}

// Stage 3, for main.js's table (its RoPE step is panel_rope's).
export const panel = {
  stage: "block",
  parts: ["layernorm", "head_detail"],
  init: (page) => initBlock({ feature: page.state.feature, kvHeads: page.nKvHead,
    onFeatureChange: (f) => { page.state.feature = f; page.writeUrl(); } }),
  render: (trace, view) => renderBlock(trace, view.parts),
};
