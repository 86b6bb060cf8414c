// Teacher-forcing panel: inputs and targets one position apart, and the loaded model's loss at every
// position from one forward pass against one pass per prefix, from GET /api/v1/curves/teacher-forcing.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, sci, tokenLabels, visible } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("shift-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("shift-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/teacher-forcing?${formQuery(form)}`, signal));
  const cells = (toks) => toks.map((t) => `<td><code>${visible(t.text)}</code></td>`).join("");
  $("shift-table").querySelector("tbody").innerHTML =
    `<tr><th scope="row">position</th>${b.inputs.map((_, i) => `<td class="num">${i}</td>`).join("")}</tr>` +
    `<tr><th scope="row">input</th>${cells(b.inputs)}</tr><tr><th scope="row">target</th>${cells(b.targets)}</tr>` +
    `<tr><th scope="row">p(target)</th>${b.prob.map((p) => `<td class="num">${fixed(p, 3)}</td>`).join("")}</tr>`;
  const x = b.targets.map((t, i) => `${i} → ${tokenLabels([t])[0]}`);
  await chart($("shift-plot"), [
    { x, y: b.loss, type: "bar", name: "−ln p(target), one forward pass", marker: { color: OKABE.blue } },
    { x, y: b.loss_one_prefix_at_a_time, type: "scatter", mode: "markers", name: "one pass per prefix",
      marker: { color: OKABE.black, size: 8, symbol: "circle-open" } },
  ], { height: 300, xaxis: { title: { text: "position → its target" }, tickangle: -45 }, yaxis: { title: { text: "loss (nats)" } } });
  $("shift-summary").textContent = `${b.predictions} next-token problems from ${b.tokens.length} tokens, all scored by one forward pass ` +
    `(mean loss ${fixed(b.mean_loss, 3)} nats); one pass per prefix takes ${b.forward_passes_one_at_a_time} passes and agrees to within ` +
    `${sci(b.max_abs_diff, 1)}.`;
}

export function init() {
  keep = figureBars([["shift-plot", "teacher-forcing-loss"]]);
  bindForms(panel, form, load);
}
