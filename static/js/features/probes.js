// The /features page's probes panel: a shipped task or pasted `label,text` lines, POST /api/v1/probes,
// and the held-out accuracy per layer drawn against the majority baseline and the random-model
// control. Every number is the API's; the panel only reads the form and draws the answer.
import { apiPost } from "../lib/api.js";
import { $, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { grouped, pct } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";

let shown = null;   // the last answer of POST /api/v1/probes

// Pasted lines `label,text` (the first comma splits; blank lines skipped) as the request's examples
// (the steering panel reads its lines the same way).
export function pastedExamples(text) {
  const out = [];
  for (const [n, line] of text.split("\n").entries()) {
    if (!line.trim()) continue;
    const comma = line.indexOf(",");
    if (comma < 1) throw new Error(`line ${n + 1}: write label,text`);
    out.push({ label: line.slice(0, comma).trim(), text: line.slice(comma + 1).trim() });
  }
  return out;
}

function requestBody() {
  const body = { stage: $("probe-stage").value, pool: $("probe-pool").value, seed: Number($("probe-seed").value) };
  const task = $("probe-task").value;
  if (task === "paste") body.examples = pastedExamples($("probe-paste").value);
  else body.task = task;
  return body;
}

function drawCurve(a) {
  const x = a.layers.map((p) => p.layer);
  const hover = (name) => `${name}<br>layer %{x}: %{y:.1%}<extra></extra>`;
  chart($("probes-plot"), [
    { type: "scatter", mode: "lines+markers", name: "probe on the model", x, y: a.layers.map((p) => p.accuracy),
      line: { color: OKABE.blue }, hovertemplate: hover("probe") },
    { type: "scatter", mode: "lines+markers", name: "same probe, random model", x, y: a.layers.map((p) => p.control_accuracy),
      line: { color: OKABE.orange, dash: "dot" }, hovertemplate: hover("random model") },
    { type: "scatter", mode: "lines", name: `majority (${a.majority_label})`, x, y: x.map(() => a.majority_baseline),
      line: { color: OKABE.black, dash: "dash" }, hovertemplate: hover("always the majority label") },
  ], { height: 320, xaxis: { title: { text: `layer (${a.stage}, ${a.pool} over the tokens)` }, dtick: 1 },
    yaxis: { title: { text: "held-out accuracy" }, range: [0, 1], tickformat: ".0%" } });
}

function render(a) {
  shown = a;
  $("probes-figure").hidden = false;
  drawCurve(a);
  const best = a.layers.find((p) => p.layer === a.best_layer);
  $("probes-summary").textContent = `${a.description} ${grouped(a.n_train)} training and ${grouped(a.n_test)} test ` +
    `examples; labels ${a.labels.join(", ")}. Best: layer ${best.layer}, ${pct(best.accuracy)} (random model there: ` +
    `${pct(best.control_accuracy)}; majority: ${pct(a.majority_baseline)}). ${a.seconds.toFixed(1)} s.`;
  $("probes-panel").dataset.state = "ready";
}

async function run(e) {
  e.preventDefault();
  setNote($("probes-note"), "");
  $("probes-panel").dataset.state = "running";
  $("probe-run").disabled = true;
  try {
    render(await apiPost("/probes", requestBody()));
  } catch (err) {
    setNote($("probes-note"), `No probe: ${err.message}`, "error");
    $("probes-panel").dataset.state = "error";
  } finally {
    $("probe-run").disabled = false;
  }
}

export function initProbes() {
  addDownloads($("probes-plot"), "probes", () => shown);
  $("probe-task").addEventListener("change", () => { $("probe-paste").hidden = $("probe-task").value !== "paste"; });
  $("probes-form").addEventListener("submit", run);
  $("probes-panel").dataset.state = "idle";
}
