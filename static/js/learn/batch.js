// Tokens-per-update panel: batch x context predictions per update, predictions over pretraining
// against a labelled data set, and each model's training batch, from GET /api/v1/curves/tokens-per-update.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("batch-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("batch-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/tokens-per-update?${formQuery(form)}`, signal));
  await chart($("batch-plot"), [{
    x: [b.per_update, b.labelled_examples, b.total_predictions],
    y: ["one update", "labelled examples", "all of pretraining"], type: "bar", orientation: "h", name: "predictions",
    marker: { color: [OKABE.sky, OKABE.orange, OKABE.blue] }, hovertemplate: "%{y}: %{x:,}<extra></extra>",
  }], { height: 220, showlegend: false, xaxis: { title: { text: "next-token predictions (log scale)" }, type: "log", exponentformat: "power" } });
  $("batch-table").querySelector("tbody").innerHTML = b.models.map((m) => `<tr><td>${m.label}</td><td class="num">${int(m.batch)}</td>
    <td class="num">${int(m.context)}</td><td class="num">${int(m.per_update)}</td></tr>`).join("");
  $("batch-summary").textContent = `${int(b.batch)} × ${int(b.context)} = ${int(b.per_update)} predictions per update; ` +
    `${sci(b.corpus_tokens, 1)} tokens × ${b.epochs} passes = ${sci(b.total_predictions, 1)} predictions in ${sci(b.updates, 2)} updates, ` +
    `${sci(b.predictions_per_labelled_example, 2)} for each of the ${int(b.labelled_examples)} labelled examples.`;
}

export function init() {
  keep = figureBars([["batch-plot", "tokens-per-update"]]);
  bindForms(panel, form, load);
}
