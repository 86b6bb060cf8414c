// Label smoothing panel: the loss against a smoothed target and the floor it cannot go below,
// from GET /api/v1/curves/label-smoothing.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("smoothing-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("smoothing-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/label-smoothing?${formQuery(form)}`, signal));
  const ends = [b.p[0], b.p[b.p.length - 1]];
  await chart($("smoothing-plot"), [
    { x: b.p, y: b.loss_one_hot, type: "scatter", mode: "lines", name: "one-hot target: −ln p", line: { color: OKABE.line, dash: "dot", width: 2 },
      hovertemplate: "p = %{x:.4f}<br>loss %{y:.4f} nats<extra>one-hot</extra>" },
    { x: b.p, y: b.loss_smoothed, type: "scatter", mode: "lines", name: `smoothed target (ε = ${b.epsilon})`, line: { color: OKABE.blue, width: 3 },
      hovertemplate: "p = %{x:.4f}<br>loss %{y:.4f} nats<extra>smoothed</extra>" },
    { x: ends, y: [b.floor, b.floor], type: "scatter", mode: "lines", name: `floor: entropy of the target = ${fixed(b.floor, 3)}`,
      line: { color: OKABE.vermillion, dash: "dash", width: 2 }, hovertemplate: "floor %{y:.6f} nats<extra></extra>" },
    { x: [b.best_p], y: [b.floor], type: "scatter", mode: "markers", name: "best the model can do", showlegend: false,
      marker: { color: OKABE.vermillion, size: 11, symbol: "diamond" },
      hovertemplate: "lowest loss at p = %{x:.6f}<br>%{y:.6f} nats<extra></extra>" },
  ], { xaxis: { title: { text: "p given to the true token (rest shared evenly)" } },
    yaxis: { title: { text: "loss (nats)" }, range: [0, Math.max(b.floor * 2.5, 3)] },
    title: { text: "Loss against the smoothed target", font: { size: 13 } } });
  await chart($("smoothing-floor-plot"), [
    { x: b.epsilons, y: b.floors, type: "scatter", mode: "lines", name: "floor", line: { color: OKABE.vermillion, width: 3 },
      hovertemplate: "ε = %{x:.2f}<br>floor %{y:.4f} nats<extra></extra>" },
    { x: [b.epsilon], y: [b.floor], type: "scatter", mode: "markers+text", name: "this ε", text: [`${fixed(b.floor, 3)} nats`],
      textposition: "bottom right", marker: { color: OKABE.blue, size: 11 }, hovertemplate: "ε = %{x}<br>floor %{y:.6f} nats<extra></extra>" },
  ], { xaxis: { title: { text: "ε (share of the target spread over the vocabulary)" } }, yaxis: { title: { text: "floor (nats)" }, rangemode: "tozero" },
    showlegend: false, title: { text: `The floor for V = ${int(b.vocab_size)}`, font: { size: 13 } } });
  const check = b.floor_by_sum === null ? "" : ` Adding up −q ln q over all ${int(b.vocab_size)} entries of the target gives ${fixed(b.floor_by_sum, 6)}, the same number.`;
  $("smoothing-summary").textContent =
    `With ε = ${b.epsilon} and V = ${int(b.vocab_size)}, the true token's target is ${fixed(b.q_true, 6)} and every other ` +
    `token's is ${sci(b.q_other, 3)}. The entropy of that target, the lowest loss possible, is ${fixed(b.floor, 4)} nats.` + check;
}

export function init() {
  keep = figureBars([
    ["smoothing-plot", "label-smoothing-loss"],
    ["smoothing-floor-plot", "label-smoothing-floor"],
  ]);
  bindForms(panel, form, load);
}
