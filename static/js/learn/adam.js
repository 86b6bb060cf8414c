// Adam panel: the weight of past gradients in each moving average (memory about 1/(1-beta)), bias
// correction in the first steps and where epsilon matters, from GET /api/v1/curves/adam.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, pct, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("adam-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("adam-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/adam?${formQuery(form)}`, signal));
  await chart($("adam-memory-plot"), [
    { x: b.ages, y: b.weights_beta1, type: "scatter", mode: "lines", name: `first moment, β₁ = ${b.beta1}`, line: { color: OKABE.blue } },
    { x: b.ages, y: b.weights_beta2, type: "scatter", mode: "lines", name: `second moment, β₂ = ${b.beta2}`, line: { color: OKABE.vermillion } },
  ], { height: 300, xaxis: { title: { text: "steps ago" }, type: "log" }, yaxis: { title: { text: "weight (1 − β) β^age" }, type: "log" },
    shapes: [b.memory_beta1, b.memory_beta2].map((x) => ({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { dash: "dot", color: "#555" } })) });
  await chart($("adam-bias-plot"), [
    { x: b.steps, y: b.m, type: "scatter", mode: "lines", name: "m (raw)", line: { color: OKABE.blue, dash: "dot" } },
    { x: b.steps, y: b.m_hat, type: "scatter", mode: "lines", name: "m̂ = m / (1 − β₁ᵗ)", line: { color: OKABE.blue } },
    { x: b.steps, y: b.step_uncorrected, type: "scatter", mode: "lines", name: "step without correction (÷ lr)", line: { color: OKABE.vermillion, dash: "dot" } },
    { x: b.steps, y: b.step, type: "scatter", mode: "lines", name: "Adam's step (÷ lr)", line: { color: OKABE.vermillion } },
  ], { height: 300, xaxis: { title: { text: "update t" } }, yaxis: { title: { text: "value" } } });
  await chart($("adam-eps-plot"), [
    { x: b.eps_gradients, y: b.eps_ratio, type: "scatter", mode: "lines", name: `m̂ / (√v̂ + ε), ε = ${b.eps}`, line: { color: OKABE.green, width: 3 } },
  ], { height: 260, xaxis: { title: { text: "size of a steady gradient" }, type: "log", exponentformat: "power" },
    yaxis: { title: { text: "step ÷ lr" }, range: [0, 1.1] } });
  $("adam-table").querySelector("tbody").innerHTML = b.presets.map((p) => `<tr><td>${p.label}</td><td class="num">${p.lr === null ? "—" : sci(p.lr, 1)}</td>
    <td class="num">${p.beta1}</td><td class="num">${p.beta2}</td><td class="num">${sci(p.eps, 0)}</td>
    <td class="num">${int(p.memory_beta1)} steps</td><td class="num">${int(p.memory_beta2)} steps</td></tr>`).join("");
  $("adam-summary").textContent = `β₁ = ${b.beta1} remembers about ${int(b.memory_beta1)} steps and β₂ = ${b.beta2} about ` +
    `${int(b.memory_beta2)}; the last ${int(b.memory_beta2)} steps carry ${pct(b.weight_within_memory_beta2)} of the second average. ` +
    `Without bias correction the very first step would be ${fixed(b.step_uncorrected[0], 2)} times the learning rate; with it, ` +
    `${fixed(b.step[0], 4)}.`;
}

export function init() {
  keep = figureBars([
    ["adam-memory-plot", "adam-memory"],
    ["adam-bias-plot", "adam-bias-correction"],
    ["adam-eps-plot", "adam-epsilon"],
  ]);
  bindForms(panel, form, load);
}
