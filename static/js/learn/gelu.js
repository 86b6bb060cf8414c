// GELU panel: exact GELU, the tanh formula and ReLU with their slopes, from GET /api/v1/curves/gelu;
// the minimum and GELU'(-1) are marked where the API says they are.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("gelu-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("gelu-form");

function line(x, y, name, color, dash = "solid", width = 2.5) {
  return {
    x, y, name, type: "scatter", mode: "lines", line: { color, dash, width },
    hovertemplate: `${name}<br>x = %{x:.4f}<br>%{y:.6f}<extra></extra>`,
  };
}

function marker(pt, name, color) {
  return {
    x: [pt.x], y: [pt.y], name, type: "scatter", mode: "markers", cliponaxis: false,
    marker: { size: 11, color, symbol: "diamond", line: { color: "#fff", width: 1 } },
    hovertemplate: `${name}<br>x = %{x:.6f}<br>value %{y:.6f}<extra></extra>`,
  };
}

// A label in the empty space above-left of a point, with an arrow to it.
function callout(pt, text) {
  return { x: pt.x, y: pt.y, text, showarrow: true, arrowhead: 2, arrowsize: 1, arrowwidth: 1.2, arrowcolor: "#444",
    ax: -70, ay: -70, font: { size: 12 }, bgcolor: "rgba(255,255,255,0.9)", bordercolor: "#bbb", borderpad: 3 };
}

async function load(signal) {
  const b = keep(await apiGet(`/curves/gelu?${formQuery(form)}`, signal));
  const axes = { xaxis: { title: { text: "input x" }, zeroline: true } };
  await chart($("gelu-plot"), [
    line(b.x, b.relu, "ReLU = max(0, x)", OKABE.line, "dot", 2),
    line(b.x, b.gelu_tanh, "GELU, tanh formula", OKABE.orange, "dash", 2),
    line(b.x, b.gelu_exact, "GELU = x·Φ(x)", OKABE.blue),
    marker(b.minimum, "GELU minimum", OKABE.vermillion),
  ], { ...axes, yaxis: { title: { text: "output" } },
    annotations: [callout(b.minimum, `lowest point: ${fixed(b.minimum.y, 3)}<br>at x = ${fixed(b.minimum.x, 3)}`)] });
  await chart($("gelu-grad-plot"), [
    line(b.x, b.d_relu, "ReLU slope", OKABE.line, "dot", 2),
    line(b.x, b.d_gelu_tanh, "tanh formula slope", OKABE.orange, "dash", 2),
    line(b.x, b.d_gelu_exact, "GELU slope", OKABE.blue),
    marker(b.derivative_at_minus_one, "GELU slope at x = -1", OKABE.vermillion),
    marker(b.relu_derivative_at_minus_one, "ReLU slope at x = -1", OKABE.black),
  ], { ...axes, yaxis: { title: { text: "slope (derivative)" } },
    annotations: [callout(b.derivative_at_minus_one, `at x = −1: GELU's slope ${fixed(b.derivative_at_minus_one.y, 3)},<br>ReLU's ${fixed(b.relu_derivative_at_minus_one.y, 0)}`)] });
  await chart($("gelu-gap-plot"), [
    { ...line(b.x, b.gap, "tanh formula − exact", OKABE.purple), hovertemplate: "x = %{x:.4f}<br>difference %{y:.3e}<extra></extra>" },
  ], { xaxis: { title: { text: "input x" } }, yaxis: { title: { text: "difference" }, exponentformat: "e" }, height: 240,
    showlegend: false,
    shapes: [-2, 2].map((x) => ({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { color: OKABE.line, dash: "dot", width: 1 } })),
    annotations: [{ x: 0, yref: "paper", y: 1, text: "most MLP inputs fall between −2 and 2", showarrow: false, font: { size: 11, color: "#555" } }] });
  $("gelu-summary").textContent =
    `GELU's lowest point is ${fixed(b.minimum.y, 4)} at x = ${fixed(b.minimum.x, 4)} (tanh formula: ${fixed(b.minimum_tanh.y, 4)} ` +
    `at ${fixed(b.minimum_tanh.x, 4)}). At x = −1 its slope is ${fixed(b.derivative_at_minus_one.y, 4)}; ReLU's is ` +
    `${fixed(b.relu_derivative_at_minus_one.y, 0)}. The tanh formula is never further than ${sci(Math.abs(b.max_abs_gap_band.y), 2)} ` +
    `from the exact curve inside [−2, 2] (at x = ${fixed(b.max_abs_gap_band.x, 2)}), where most inputs to the MLP fall.`;
}

export function init() {
  keep = figureBars([
    ["gelu-plot", "gelu"],
    ["gelu-grad-plot", "gelu-slopes"],
    ["gelu-gap-plot", "gelu-tanh-gap"],
  ]);
  bindForms(panel, form, load);
}
