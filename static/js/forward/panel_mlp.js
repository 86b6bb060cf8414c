// Stage 5: the distribution of real MLP pre-activations per layer over the model's GELU curve,
// and the neurons that fire most for the selected token. Data: the `mlp` part of POST /api/v1/forward.
// A SwiGLU MLP (`mlp.gelu` is "silu"; GeGLU, Gemma's: `mlp.gated` with a GELU): the histograms are the
// gate's pre-activations under the SiLU (GELU) curve, and a neuron's output is act(gate) × value.
// (A mixture-of-experts model has no `mlp`: panel_moe.)
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { draw } from "../lib/plot.js";

let part = null;
const G0 = -0.6;
const G1 = 4.2;
let labels = [];

export function initMlp() {
  addDownloads($("mlp-hist-plot"), "mlp-preactivations", () => part);
  addDownloads($("mlp-top-plot"), "mlp-top-neurons", () => part);
}

const swiglu = () => part && (part.gated || part.gelu === "silu");   // any gated MLP: SwiGLU or GeGLU
const actName = () => (part && part.gelu === "silu" ? "SiLU" : "GELU");
const act = () => actName().toLowerCase();

export function renderMlp(trace, tokenLabelsList) {
  if (!trace.mlp) return;
  part = trace.mlp;
  labels = tokenLabelsList;
  const m = part;
  const T = trace.tokens ? trace.tokens.length : labels.length;
  $("mlp-panel").dataset.kind = !swiglu() ? "gelu" : act() === "silu" ? "swiglu" : "geglu";
  $("mlp-shapes").innerHTML = swiglu()
    ? `<b>${act() === "silu" ? "SwiGLU" : "GeGLU"}</b>: two projections <b>d</b> = ${trace.d_model} → <b>d<sub>mlp</sub></b> = ${m.d_mlp}, a gate and a value; ` +
      `each neuron outputs ${act()}(gate) × value, and W<sub>down</sub> maps d<sub>mlp</sub> → <b>d</b> = ${trace.d_model} at each of the ` +
      `<b>T</b> = ${T} positions. The histograms count the gate's T × d<sub>mlp</sub> pre-activations.`
    : `<b>d</b> = ${trace.d_model} → <b>d<sub>mlp</sub></b> = ${m.d_mlp} → <b>d</b> = ${trace.d_model} at each of the ` +
      `<b>T</b> = ${T} positions; GELU variant: ${m.gelu === "tanh" ? "the tanh approximation" : "exact x·Φ(x)"}. ` +
      `Each histogram counts T × d<sub>mlp</sub> = every neuron at every position.`;
  later("mlp-hist", $("mlp-hist-plot"), drawHistograms);
  later("mlp-top", $("mlp-top-plot"), drawTop);
}

// Plotly names its first axes x / y (layout xaxis / yaxis), then x2, x3, ...: an "x1" is not the first.
const axisNumber = (k) => (k === 1 ? "" : String(k));

// One histogram per layer, at most 4 side by side (a 12-layer model gets 3 rows of 4).
function drawHistograms() {
  const m = part;
  const n = m.layers.length;
  const cols = Math.min(n, 4);
  const rows = Math.ceil(n / cols);
  const gap = 0.04;
  const w = (1 - gap * (cols - 1)) / cols;
  // the legend and the curve's lowest point 75 px under the last row's plots, below its tick labels
  // and axis title (at a share of one row's height they sat on the title), in a bottom margin
  // made tall enough for them up front
  const height = 370 + (rows - 1) * 250;
  const plotH = height - 160;                 // inside the top and bottom margins
  const vgap = rows === 1 ? 0 : 70 / plotH;   // room for the next row's title lines and this row's axis
  const h = (1 - vgap * (rows - 1)) / rows;
  const below = -75 / plotH;
  const data = [];
  const layout = { height, showlegend: true, legend: { orientation: "h", y: below }, margin: { l: 50, r: 50, t: 60, b: 100 }, annotations: [] };
  // the GELU curve's lowest point, picked from the curve the API sent
  let minI = 0;
  m.curve_y.forEach((v, i) => { if (v < m.curve_y[minI]) minI = i; });
  m.layers.forEach((L, j) => {
    const col = j % cols;
    const row = Math.floor(j / cols);
    const xa = `x${axisNumber(j + 1)}`;
    const ya = `y${axisNumber(2 * j + 1)}`;
    const yg = `y${axisNumber(2 * j + 2)}`;
    const dom = [col * (w + gap), col * (w + gap) + w];
    const vdom = [1 - row * (h + vgap) - h, 1 - row * (h + vgap)];
    const bottom = row === rows - 1 || j + cols >= n;
    layout[`xaxis${axisNumber(j + 1)}`] = { domain: dom, anchor: ya, title: bottom ? { text: "pre-activation" } : undefined, zeroline: true, zerolinecolor: "#bbb",
      range: [L.histogram.edges[0], L.histogram.edges[L.histogram.edges.length - 1]] };
    // both zero lines at the same height: the GELU axis runs from G0 (< 0, room for its dip) to G1
    const top = Math.max(1, ...L.histogram.counts) * 1.05;
    layout[`yaxis${axisNumber(2 * j + 1)}`] = { anchor: xa, domain: vdom, showgrid: false, title: col === 0 ? { text: "count" } : undefined, range: [top * G0 / G1, top] };
    layout[`yaxis${axisNumber(2 * j + 2)}`] = { anchor: xa, overlaying: ya, side: "right", showgrid: false, range: [G0, G1], dtick: 1,
      title: col === cols - 1 || j === n - 1 ? { text: `${actName()}(x)` } : undefined, zeroline: false, showticklabels: col === cols - 1 || j === n - 1 };
    const sel = L.layer === m.layer;
    data.push({
      type: "scatter", mode: "lines", line: { shape: "hv", color: sel ? OKABE.blue : OKABE.sky, width: 1 }, fill: "tozeroy",
      fillcolor: sel ? "rgba(0,114,178,0.55)" : "rgba(86,180,233,0.45)",
      x: L.histogram.edges, y: [...L.histogram.counts, L.histogram.counts[L.histogram.counts.length - 1]],
      xaxis: xa, yaxis: ya, name: swiglu() ? "gate pre-activations (this prompt)" : "pre-activations (this prompt)", showlegend: j === 0, legendgroup: "h",
      hovertemplate: `layer ${L.layer}<br>bin from %{x}<br>count %{y}<extra></extra>`,
    });
    data.push({
      type: "scatter", mode: "lines", x: m.curve_x, y: m.curve_y, xaxis: xa, yaxis: yg, name: swiglu() ? `${actName()} (the gate)` : "GELU",
      showlegend: j === 0, legendgroup: "g",
      line: { color: OKABE.vermillion, width: 2 }, hovertemplate: `${actName()}(%{x}) = %{y}<extra></extra>`,
    });
    layout.annotations.push({
      xref: `${xa} domain`, yref: "paper", x: 0.5, y: vdom[1] + (rows === 1 ? 0.02 : 4 / plotH),
      xanchor: "center", yanchor: "bottom", showarrow: false,
      text: `${sel ? "<b>" : ""}layer ${L.layer}${sel ? " (selected)</b>" : ""}<br>${pct(L.fraction_negative)} below 0 · mean ${decimal(L.mean, 2)} · std ${decimal(L.std, 2)}`,
      font: { size: 11 },
    });
  });
  layout.annotations.push({ xref: "paper", yref: "paper", x: 1, y: below, xanchor: "right", yanchor: "top", showarrow: false,
    text: `lowest point of the curve: ${actName()}(${decimal(m.curve_x[minI], 2)}) = ${decimal(m.curve_y[minI], 3)}`, font: { size: 11, color: "#555" } });
  draw($("mlp-hist-plot"), data, layout, "mlp-preactivations");
  $("mlp-hist-plot").dataset.grid = `${rows}x${cols}`;
}

function drawTop() {
  const m = part;
  const top = [...m.top_neurons].reverse();
  const after = swiglu() ? `${act()}(gate) × value` : "after GELU";
  draw($("mlp-top-plot"), [{
    type: "bar", orientation: "h", name: after,
    x: top.map((n) => n.post), y: top.map((n) => `neuron ${n.index}`),
    marker: { color: OKABE.blue }, customdata: top.map((n) => n.pre),
    hovertemplate: `%{y}<br>${swiglu() ? "gate pre-activation" : "pre-activation"} %{customdata}<br>${after} %{x}<extra></extra>`,
    text: top.map((n) => `${swiglu() ? "gate" : "pre"} ${decimal(n.pre, 2)} → ${decimal(n.post, 2)}`), textposition: "outside", cliponaxis: false,
  }], {
    height: 60 + 28 * top.length,
    title: { text: `layer ${m.layer}, position ${m.position} “${labels[m.position] ?? ""}”: top ${top.length} of ${m.d_mlp} neurons`, x: 0, xanchor: "left", font: { size: 12 } },
    xaxis: { title: { text: swiglu() ? `${act()}(gate) × value` : "value after GELU" }, rangemode: "tozero" },
    yaxis: { automargin: true, tickfont: { family: MONO } },
    margin: { l: 10, r: 120, t: 36, b: 40 },
  }, "mlp-top-neurons");
}

// Stage 5 (a dense model's MLP), for main.js's table.
export const panel = {
  stage: "mlp",
  parts: ["mlp"],
  init: () => initMlp(),
  render: (trace, view) => { if (view.parts.includes("mlp")) renderMlp(trace, view.labels); },
};
