// Scaling-law panel: Kaplan et al.'s L = (N / N_c)^-alpha on log-log axes with known models
// marked, from GET /api/v1/curves/scaling-law; below it, the texts' word on the floor the line
// cannot cross and on Chinchilla (the answer's `texts`).
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { textFactBlock } from "../lib/text_facts.js";
import { figureBars } from "./bars.js";

const panel = $("scaling-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("scaling-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/scaling-law?${formQuery(form)}`, signal));
  await chart($("scaling-plot"), [
    { x: b.n, y: b.loss, type: "scatter", mode: "lines", name: b.formula, line: { color: OKABE.blue, width: 3 },
      hovertemplate: "N = %{x:.3s} parameters<br>L = %{y:.4f} nats per token<extra></extra>" },
    { x: b.marks.map((m) => m.n), y: b.marks.map((m) => m.loss), type: "scatter", mode: "markers+text", name: "models (non-embedding N)",
      text: b.marks.map((m) => m.label), textposition: b.marks.map((_, i) => (i % 2 ? "bottom left" : "top right")), cliponaxis: false,
      marker: { color: OKABE.vermillion, size: 9, symbol: "diamond" },
      hovertemplate: "%{text}<br>N = %{x:,} non-embedding parameters<br>L on the line = %{y:.4f}<extra></extra>" },
  ], { xaxis: { title: { text: "N, non-embedding parameters (log scale)" }, type: "log", exponentformat: "power" },
    yaxis: { title: { text: "loss L, nats per token (log scale)" }, type: "log" }, height: 400,
    legend: { orientation: "h", y: -0.22, x: 0 } });
  $("scaling-summary").textContent =
    `${b.formula}. Every tenfold increase in N multiplies the loss by ${fixed(b.ratio_per_tenfold, 3)}, that is, lowers ` +
    `ln L by α·ln 10 = ${fixed(b.per_tenfold, 3)}. N_c = ${sci(b.n_c, 2)} is where the fitted line would reach a loss of 1.`;
  // the floor under the line and Chinchilla's balance: the texts' facts the answer carries
  $("scaling-texts").replaceChildren(...b.texts.map((f) => textFactBlock(f, `scaling-fact-${f.name}`)));
}

export function init() {
  keep = figureBars([["scaling-plot", "scaling-law"]]);
  bindForms(panel, form, load);
}
