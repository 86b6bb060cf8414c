// Backpropagation panel: real gradients of the loaded model on a text, at one head (A, dL/dA, V and
// dL/dV) and on every head's weights, from GET /api/v1/curves/head-gradients.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, sci, tokenLabels } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { DIVERGING, OKABE, SEQ } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("backprop-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("backprop-form");

function square(gd, z, labels, opts) {
  return chart(gd, [{ z, x: labels, y: labels, type: "heatmap", name: opts.name, ...opts.scale,
    hovertemplate: `query %{y}<br>key %{x}<br>${opts.name} %{z:.3g}<extra></extra>` }],
  { height: 360, xaxis: { title: { text: "key position" }, tickangle: -45 }, yaxis: { title: { text: "query position" }, autorange: "reversed" } });
}

async function load(signal) {
  const b = keep(await apiGet(`/curves/head-gradients?${formQuery(form)}`, signal));
  $("backprop-layer").max = String(b.norms.length - 1);
  $("backprop-head").max = String(b.norms[0].length - 1);
  const labels = tokenLabels(b.inputs).map((l, i) => `${i} ${l}`);
  const masked = (z) => z.map((row, i) => row.map((v, j) => (b.causal && j > i ? null : v)));
  await square($("backprop-a-plot"), masked(b.A), labels, { name: "A", scale: { colorscale: SEQ, zmin: 0, zmax: 1 } });
  const lim = Math.max(...masked(b.dA).flat().filter((v) => v !== null).map(Math.abs)) || 1;
  await square($("backprop-da-plot"), masked(b.dA), labels, { name: "∂L/∂A", scale: { colorscale: DIVERGING, zmin: -lim, zmax: lim } });
  await chart($("backprop-dv-plot"), [
    { x: labels, y: b.attention_received, type: "bar", name: "attention received (Σ over queries)", marker: { color: OKABE.sky } },
    { x: labels, y: b.dV_row_norms, type: "scatter", mode: "lines+markers", name: "|∂L/∂V| at that key", yaxis: "y2", line: { color: OKABE.vermillion } },
  ], { height: 300, margin: { l: 64, r: 64, t: 28, b: 48 }, xaxis: { tickangle: -45 }, yaxis: { title: { text: "attention" } },
    yaxis2: { title: { text: "|∂L/∂V|" }, overlaying: "y", side: "right", rangemode: "tozero" } });
  const heads = b.norms[0].map((_, h) => `head ${h}`);
  await chart($("backprop-norms-plot"), [{ z: b.norms.map((row) => row.map((n) => n.total)), x: heads, y: b.norms.map((_, l) => `layer ${l}`),
    type: "heatmap", colorscale: SEQ, name: "gradient norm", customdata: b.norms.map((row) => row.map((n) => [n.q, n.k, n.v, n.o])),
    hovertemplate: "%{y}, %{x}<br>‖∇‖ = %{z:.3g}<br>W_Q %{customdata[0]:.3g}, W_K %{customdata[1]:.3g}, W_V %{customdata[2]:.3g}, W_O %{customdata[3]:.3g}<extra></extra>" }],
  { height: 300, yaxis: { autorange: "reversed" } });
  const n = b.norms[b.layer][b.head];
  $("backprop-summary").textContent = `Loss ${fixed(b.loss, 3)} nats per token. Layer ${b.layer}, head ${b.head}: autograd's ∂L/∂A matches G Vᵀ ` +
    `to ${sci(b.dA_formula_max_abs_diff, 1)} and ∂L/∂V matches Aᵀ G to ${sci(b.dV_formula_max_abs_diff, 1)}. Its weights' gradient norm is ` +
    `${sci(n.total, 2)} (W_Q ${sci(n.q, 2)}, W_K ${sci(n.k, 2)}, W_V ${sci(n.v, 2)}, W_O ${sci(n.o, 2)}).`;
}

export function init() {
  keep = figureBars([
    ["backprop-a-plot", "head-attention"],
    ["backprop-da-plot", "head-attention-gradient"],
    ["backprop-dv-plot", "head-value-gradient"],
    ["backprop-norms-plot", "head-gradient-norms"],
  ]);
  bindForms(panel, form, load);
}
