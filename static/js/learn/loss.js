// Loss panel: -ln p against p with uniform baselines, and the softmax cross-entropy gradient p - q
// for editable logits, both from GET /api/v1/curves/cross-entropy.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE, SERIES } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("loss-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const lossForm = $("loss-form");
const gradForm = $("grad-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/cross-entropy?${formQuery([lossForm, gradForm])}`, signal));
  if ($("loss-vocab").value === "") $("loss-vocab").value = b.vocab_size;
  const pMin = b.p[0];
  const baselines = [b.uniform, ...b.baselines.filter((x) => x.vocab_size !== b.uniform.vocab_size)];
  const data = [{
    x: b.p, y: b.loss, type: "scatter", mode: "lines", name: "loss = −ln p", line: { color: OKABE.blue, width: 3 },
    hovertemplate: "p = %{x:.4g}<br>loss %{y:.4f} nats<extra></extra>",
  }];
  data.push(...baselines.map((bl, i) => ({
    x: [pMin, 1], y: [bl.loss, bl.loss], type: "scatter", mode: "lines",
    name: `uniform guess, ${bl.label}: ln ${int(bl.vocab_size)} = ${fixed(bl.loss, 2)}`,
    line: { color: SERIES[(i + 1) % SERIES.length], dash: i === 0 ? "dash" : "dot", width: i === 0 ? 2 : 1.5 },
    hovertemplate: `${bl.label}<br>ln V = %{y:.4f} nats<extra></extra>`,
  })));
  data.push({
    x: b.marks.map((m) => m.p), y: b.marks.map((m) => m.loss), type: "scatter", mode: "markers+text", name: "marked points",
    text: b.marks.map((m) => m.short), textposition: b.marks.map((_, i) => (i === 1 ? "bottom right" : "middle right")), cliponaxis: false,
    marker: { size: 10, color: OKABE.vermillion, symbol: "diamond" }, customdata: b.marks.map((m) => m.label),
    hovertemplate: "%{customdata}<br>p = %{x:.6g}<br>loss %{y:.4f} nats<extra></extra>", showlegend: false,
  });
  await chart($("loss-plot"), data, {
    xaxis: $("loss-log").checked
      ? { title: { text: "p, the probability given to the true token (log scale)" }, type: "log" }
      : { title: { text: "p, the probability given to the true token" }, range: [0, 1.02] },
    yaxis: { title: { text: "loss (nats)" }, rangemode: "tozero" }, height: 420, legend: { orientation: "h", y: -0.2, x: 0 },
  });
  const quarter = b.marks[0];
  $("loss-summary").textContent =
    `Giving the true token p = ${quarter.p} costs ${fixed(quarter.loss, 3)} nats. A uniform guess over V = ` +
    `${int(b.uniform.vocab_size)} tokens costs ln V = ${fixed(b.uniform.loss, 3)} nats; training is the work of getting ` +
    "below that line. Hover the marked points for what each one means.";

  const g = b.gradient;
  const labels = g.logits.map((l, i) => `token ${i}${i === g.target ? " (true)" : ""}<br>logit ${l}`);
  await chart($("grad-plot"), [
    { x: labels, y: g.p, type: "bar", name: "p = softmax(logits)", marker: { color: OKABE.blue },
      hovertemplate: "%{x}<br>p = %{y:.6f}<extra></extra>" },
    { x: labels, y: g.q, type: "bar", name: "q, the target", marker: { color: OKABE.orange },
      hovertemplate: "%{x}<br>q = %{y:.6f}<extra></extra>" },
    { x: labels, y: g.grad, type: "bar", name: "gradient p − q", marker: { color: OKABE.vermillion },
      hovertemplate: "%{x}<br>p − q = %{y:.6f}<extra></extra>" },
  ], { barmode: "group", yaxis: { title: { text: "value" }, zeroline: true }, height: 300,
    legend: { orientation: "h", y: -0.3, x: 0 } });
  $("grad-summary").textContent =
    `Loss ${fixed(g.loss, 4)} nats. The true token's gradient is ${fixed(g.grad[g.target], 4)} (negative: gradient descent ` +
    `raises its score); the others are positive. Sum of all the gradients: ${g.grad_sum === 0 ? "0" : sci(g.grad_sum, 2)}.`;
}

export function init() {
  keep = figureBars([
    ["loss-plot", "cross-entropy-loss"],
    ["grad-plot", "cross-entropy-gradient", (b) => b.gradient],
  ]);
  bindForms(panel, [lossForm, gradForm], load);
}
