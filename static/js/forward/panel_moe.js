// Stage 5 for a mixture-of-experts model (its blocks have no single MLP): which experts each token
// went to (tokens x layers, coloured by expert), the router's probabilities for the selected token
// (layers x experts, the chosen ones ringed), and the load each expert got over the prompt.
// Data: the `moe` part of POST /api/v1/forward (every layer, every token: a new position needs no request).
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct, tokenLabels } from "../lib/format.js";
import { MONO, OKABE, SEQ, seqColour } from "../lib/palette.js";
import { draw, tokenAxis } from "../lib/plot.js";

let part = null;
let labels = [];
let position = 0;

// One colour per expert: Okabe–Ito while there are few, evenly spaced Viridis beyond eight.
const FEW = [OKABE.blue, OKABE.orange, OKABE.green, OKABE.vermillion, OKABE.purple, OKABE.sky, OKABE.yellow, OKABE.grey];
function expertColour(e, n) {
  return n <= FEW.length ? FEW[e] : seqColour(e, 0, n - 1);
}

export function initMoe() {
  if (!$("moe-box")) return;
  addDownloads($("moe-choice-plot"), "moe-choices", () => part);
  addDownloads($("moe-probs-plot"), "moe-router-probabilities", () => part);
  addDownloads($("moe-load-plot"), "moe-load", () => part);
}

export function renderMoe(trace) {
  if (!trace.moe || !$("moe-box")) return;
  part = trace.moe;
  labels = tokenLabels(trace.tokens);
  position = trace.position;
  const m = part;
  $("moe-shapes").innerHTML = `<b>${m.n_expert}</b> experts per block, top <b>${m.top_k}</b> per token, ` +
    `${m.layers.length} layers × <b>T</b> = ${labels.length} tokens: the router's probabilities are T × ${m.n_expert} per layer, ` +
    `the choices T × ${m.top_k}. An even load would give each expert ${pct(1 / m.n_expert)}.`;
  later("moe-choice", $("moe-choice-plot"), drawChoices);
  later("moe-load", $("moe-load-plot"), drawLoad);
  setMoePosition(position);
}

// The selected position changed: only the router's probabilities depend on it.
export function setMoePosition(p) {
  if (!part) return;
  position = Math.min(p, labels.length - 1);
  later("moe-probs", $("moe-probs-plot"), drawProbs);
}

// A discrete colour scale: expert e (z = e) gets its own flat band.
function expertScale(n) {
  const s = [];
  for (let e = 0; e < n; e++) s.push([e / n, expertColour(e, n)], [(e + 1) / n, expertColour(e, n)]);
  return s;
}

function drawChoices() {
  const m = part;
  const T = labels.length;
  const cols = [];
  for (const L of m.layers) for (let k = 0; k < m.top_k; k++) cols.push([L, k]);
  const z = labels.map((_, t) => cols.map(([L, k]) => L.choice[t][k]));
  const probs = labels.map((_, t) => cols.map(([L, k]) => L.probs[t][L.choice[t][k]]));
  const names = cols.map(([L, k]) => (m.top_k > 1 ? `L${L.layer} #${k + 1}` : `L${L.layer}`));
  const height = Math.max(240, Math.min(1000, 110 + T * 16));
  const written = (height - 110) / T >= 12;
  draw($("moe-choice-plot"), [{
    type: "heatmap", z, x: names, y: labels.map((_, t) => t), zmin: -0.5, zmax: m.n_expert - 0.5,
    colorscale: expertScale(m.n_expert), xgap: 1, ygap: 1,
    showscale: m.n_expert <= 16,
    colorbar: { title: { text: "expert" }, thickness: 10, tickvals: [...Array(m.n_expert).keys()], ticktext: [...Array(m.n_expert).keys()].map((e) => `E${e}`) },
    text: z.map((r) => r.map((e) => `E${e}`)), texttemplate: written ? "%{text}" : undefined, textfont: { family: MONO, size: 11 },
    customdata: probs.map((r, t) => r.map((p) => [labels[t], decimal(p, 4)])),
    hovertemplate: "token %{y} “%{customdata[0]}” · %{x}<br>expert %{text} (router probability %{customdata[1]})<extra></extra>",
  }], {
    height, margin: { l: 20, r: 10, t: 30, b: 20 },
    xaxis: { side: "top", type: "category", tickfont: { family: MONO } },
    yaxis: { ...tokenAxis(labels, height - 60), autorange: "reversed" },
    shapes: m.layers.slice(1).map((_, i) => ({ type: "line", xref: "x", yref: "paper", x0: (i + 1) * m.top_k - 0.5, x1: (i + 1) * m.top_k - 0.5,
      y0: 0, y1: 1, line: { color: "#fff", width: 4 } })),
  }, "moe-choices");
  $("moe-choice-plot").dataset.cols = JSON.stringify(names);
}

// layers (rows) x experts (columns) with the values written in the cells
function layerExpertMap(gd, z, opts) {
  const m = part;
  const experts = [...Array(m.n_expert).keys()].map((e) => `E${e}`);
  const rows = m.layers.map((L) => `layer ${L.layer}`);
  const height = Math.max(200, 90 + rows.length * 34);
  return draw(gd, [{
    type: "heatmap", z, x: experts, y: rows, colorscale: SEQ, zmin: 0, zmax: opts.zmax, xgap: 1, ygap: 1,
    colorbar: { title: { text: opts.colorTitle }, thickness: 10 },
    text: z.map((r) => r.map((v) => opts.text(v))), texttemplate: m.n_expert <= 16 ? "%{text}" : undefined,
    hovertemplate: `%{y} · expert %{x}<br>${opts.hoverName} %{z}<extra></extra>`,
  }, ...(opts.extra || [])], {
    height, margin: { l: 70, r: 10, t: opts.title ? 36 : 20, b: 40 },
    title: opts.title ? { text: opts.title, x: 0, xanchor: "left", font: { size: 12 } } : undefined,
    xaxis: { type: "category", title: { text: "expert" }, tickfont: { family: MONO } },
    yaxis: { type: "category", autorange: "reversed" },
    showlegend: false,
  }, opts.name);
}

function drawProbs() {
  const m = part;
  const p = position;
  const z = m.layers.map((L) => L.probs[p]);
  // a white ring inside a dark one: visible on every Viridis colour
  const ring = (name, size, color, width) => ({ type: "scatter", mode: "markers", name, hoverinfo: "skip",
    x: m.layers.flatMap((L) => L.choice[p].map((e) => `E${e}`)), y: m.layers.flatMap((L) => L.choice[p].map(() => `layer ${L.layer}`)),
    marker: { symbol: "circle-open", size, color, line: { width } } });
  layerExpertMap($("moe-probs-plot"), z, { zmax: 1, colorTitle: "probability", hoverName: "router probability",
    text: (v) => decimal(v, 2), extra: [ring("chosen", 32, OKABE.black, 5), ring("chosen ", 32, "#fff", 2)], name: "moe-router-probabilities",
    title: `token ${p} “${labels[p] ?? ""}”: went to ${m.layers.map((L) => `${L.choice[p].map((e) => `E${e}`).join("+")} (L${L.layer})`).join(", ")}` });
  $("moe-box").dataset.position = String(p);
}

function drawLoad() {
  const m = part;
  const z = m.layers.map((L) => L.load);
  const top = Math.max(2 / m.n_expert, ...z.flat());
  layerExpertMap($("moe-load-plot"), z, { zmax: top, colorTitle: "share", hoverName: "share of the assignments",
    text: (v) => pct(v, 0), name: "moe-load", title: `even load: ${pct(1 / m.n_expert)} each` });
}

// Stage 5 (a mixture of experts), for main.js's table.
export const panel = {
  stage: "mlp",
  parts: ["moe"],
  init: () => initMoe(),
  render: (trace, view) => { if (view.parts.includes("moe")) renderMoe(trace); },
  position: (sel) => setMoePosition(sel.position),
};
