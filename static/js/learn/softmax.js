// Softmax and scale panel: random query-key scores before and after dividing by sqrt(d_k), one
// attention row, the saturation sweep, and temperature / shift, from GET /api/v1/curves/softmax-scale.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("softmax-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("softmax-form");
const tempForm = $("temp-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/softmax-scale?${formQuery([form, tempForm])}`, signal));
  const rawX = b.hist_raw.centers;
  const scX = b.hist_scaled.centers;
  await chart($("softmax-hist-plot"), [
    { x: rawX, y: b.hist_raw.counts, type: "bar", name: `q·k, variance ${fixed(b.variance_raw, 2)}`, marker: { color: OKABE.orange },
      opacity: 0.75, hovertemplate: "score ≈ %{x:.2f}<br>%{y} pairs<extra>raw</extra>" },
    { x: scX, y: b.hist_scaled.counts, type: "bar", name: `q·k / √d_k, variance ${fixed(b.variance_scaled, 3)}`, marker: { color: OKABE.blue },
      opacity: 0.75, hovertemplate: "score ≈ %{x:.3f}<br>%{y} pairs<extra>scaled</extra>" },
  ], { barmode: "overlay", bargap: 0, xaxis: { title: { text: "score" } }, yaxis: { title: { text: `pairs (of ${int(b.samples)})` } },
    legend: { orientation: "h", y: -0.25, x: 0 } });
  const keys = b.row_weights_raw.map((_, i) => `key ${i}`);
  await chart($("softmax-row-plot"), [
    { x: keys, y: b.row_weights_raw, type: "bar", name: "softmax(q·k)", marker: { color: OKABE.orange }, customdata: b.row_scores_raw,
      hovertemplate: "%{x}<br>score %{customdata:.3f}<br>weight %{y:.4f}<extra>unscaled</extra>" },
    { x: keys, y: b.row_weights_scaled, type: "bar", name: "softmax(q·k / √d_k)", marker: { color: OKABE.blue }, customdata: b.row_scores_scaled,
      hovertemplate: "%{x}<br>score %{customdata:.3f}<br>weight %{y:.4f}<extra>scaled</extra>" },
  ], { barmode: "group", yaxis: { title: { text: "attention weight" }, range: [0, 1] }, legend: { orientation: "h", y: -0.25, x: 0 } });
  await chart($("softmax-sweep-plot"), [
    { x: b.sweep_d_k, y: b.sweep_max_weight_raw, type: "scatter", mode: "lines+markers", name: "without the scale", line: { color: OKABE.orange, width: 2.5 },
      hovertemplate: "d_k = %{x}<br>largest weight on average %{y:.4f}<extra>unscaled</extra>" },
    { x: b.sweep_d_k, y: b.sweep_max_weight_scaled, type: "scatter", mode: "lines+markers", name: "divided by √d_k", line: { color: OKABE.blue, width: 2.5 },
      hovertemplate: "d_k = %{x}<br>largest weight on average %{y:.4f}<extra>scaled</extra>" },
  ], { xaxis: { title: { text: "d_k (log scale)" }, type: "log" }, yaxis: { title: { text: "largest weight in a row" }, range: [0, 1.05] },
    height: 260, legend: { orientation: "h", y: -0.45, x: 0 } });
  $("softmax-summary").textContent =
    `With d_k = ${b.d_k}, ${int(b.samples)} random pairs give raw scores with variance ${fixed(b.variance_raw, 2)} ` +
    `(standard deviation about √${b.d_k}); divided by √d_k the variance is ${fixed(b.variance_scaled, 3)}. ` +
    `Unscaled, this query's largest weight is ${fixed(b.row_max_weight_raw, 3)}; scaled, ${fixed(b.row_max_weight_scaled, 3)}.`;

  const labels = b.logits.map((l, i) => `token ${i}<br>logit ${l}`);
  await chart($("temp-plot"), [
    { x: labels, y: b.probs_t1, type: "bar", name: "softmax(logits)", marker: { color: OKABE.blue },
      hovertemplate: "%{x}<br>%{y:.6f}<extra>T = 1</extra>" },
    { x: labels, y: b.probs_temperature, type: "bar", name: `softmax(logits / ${b.temperature})`, marker: { color: OKABE.orange },
      hovertemplate: `%{x}<br>%{y:.6f}<extra>T = ${b.temperature}</extra>` },
    { x: labels, y: b.probs_shifted, type: "bar", name: `softmax(logits + ${b.shift})`, marker: { color: OKABE.green, pattern: { shape: "/" } },
      hovertemplate: `%{x}<br>%{y:.6f}<extra>shifted by ${b.shift}</extra>` },
  ], { barmode: "group", yaxis: { title: { text: "probability" }, range: [0, 1] }, height: 280, legend: { orientation: "h", y: -0.35, x: 0 } });
  $("temp-summary").textContent =
    `Adding ${b.shift} to every logit moves no probability by more than ${b.shift_max_abs_diff === 0 ? "0" : sci(b.shift_max_abs_diff, 2)}: ` +
    `the green bars equal the blue ones. Temperature ${b.temperature} ${b.temperature < 1 ? "sharpens" : b.temperature > 1 ? "flattens" : "leaves"} the distribution.`;
}

export function init() {
  keep = figureBars([
    ["softmax-hist-plot", "softmax-scores"],
    ["softmax-row-plot", "softmax-attention-row"],
    ["softmax-sweep-plot", "softmax-saturation"],
    ["temp-plot", "softmax-temperature"],
  ]);
  bindForms(panel, [form, tempForm], load);
}
