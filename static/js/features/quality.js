// The /features page's SAE panel (its quality figures, each beside its baseline, the losses and
// the training curve) and the training form (POST /api/v1/saes, then its job polled until done).
import { apiGet, apiPost } from "../lib/api.js";
import { going } from "../lib/jobs.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, duration, grouped, pct } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart, clearPlot } from "../lib/plot.js";

const QUALITY_ROWS = [
  ["variance explained", (q) => pct(q.fve), (q) => `as many principal components as L0: ${pct(q.fve_pca_same_l0)}; before training: ${pct(q.fve_at_init)}`],
  ["features per token (L0)", (q) => decimal(q.l0, 2), (q) => `the stream's width: ${q.d_model}; before training: ${decimal(q.l0_at_init, 2)}`],
  ["next-token loss with the SAE", (q) => `${decimal(q.loss_sae, 3)} (+${decimal(q.loss_added, 3)})`,
    (q) => `clean: ${decimal(q.loss_clean, 3)}; stream zeroed: ${decimal(q.loss_zero_ablation, 3)} (+${decimal(q.loss_added_zero_ablation, 3)})`],
  ["loss recovered", (q) => (q.loss_recovered === null ? "–" : pct(q.loss_recovered)), () => "zeroed stream: 0%; clean model: 100%"],
  ["dead features", (q) => `${grouped(q.dead)} of ${grouped(q.d_sae)}`, (q) => `before training: ${grouped(q.dead_at_init)}`],
  ["dense features", (q) => grouped(q.dense), (q) => `firing on > ${pct(q.dense_threshold, 0)} of tokens; before training: ${grouped(q.dense_at_init)}`],
];

let shown = null;   // the SAE drawn: its entry of GET /api/v1/saes

export function renderSaeQuality(sae) {
  const panel = $("sae-panel");
  shown = sae;
  if (!sae) {
    setNote($("sae-note"), "The served model has no SAE yet: train one below.");
    $("sae-summary").textContent = "";
    $("sae-quality").replaceChildren();
    clearPlot($("sae-loss-plot"));
    clearPlot($("sae-train-plot"));
    panel.dataset.state = "empty";
    return;
  }
  setNote($("sae-note"), "");
  const q = sae.quality;
  $("sae-summary").textContent = `${sae.name}: ${sae.activation === "topk" ? `TopK, k = ${sae.k}` : "ReLU + L1"}, ` +
    `${grouped(sae.d_sae)} features on ${sae.hook_name} (width ${sae.d_in}); trained on ${grouped(sae.tokens)} tokens of ` +
    `${sae.corpus} in ${duration(sae.train_seconds)} (${sae.steps} steps); measured on ${grouped(q.tokens)} held-out tokens. ` +
    `Made by: ${sae.command}`;
  const head = el("tr", {}, ...["figure", "this SAE", "baseline"].map((t) => el("th", { text: t })));
  $("sae-quality").replaceChildren(el("thead", {}, head), el("tbody", {}, ...QUALITY_ROWS.map(([name, val, base]) =>
    el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: val(q) }), el("td", { class: "muted", text: base(q) })))));
  chart($("sae-loss-plot"), [{
    type: "bar", x: ["clean model", "SAE in place", "stream zeroed"], y: [q.loss_clean, q.loss_sae, q.loss_zero_ablation],
    marker: { color: [OKABE.green, OKABE.blue, OKABE.vermillion] }, hovertemplate: "%{x}: %{y:.4f} nats<extra></extra>",
  }], { height: 260, yaxis: { title: { text: "nats per token" } }, showlegend: false });
  const h = sae.history;
  chart($("sae-train-plot"), [
    { type: "scatter", mode: "lines", name: "unexplained variance", x: h.map((r) => r.tokens), y: h.map((r) => r.fvu), line: { color: OKABE.blue } },
    { type: "scatter", mode: "lines", name: "L0", x: h.map((r) => r.tokens), y: h.map((r) => r.l0), yaxis: "y2", line: { color: OKABE.orange } },
  ], { height: 260, xaxis: { title: { text: "training tokens" } }, yaxis: { title: { text: "1 - variance explained" }, rangemode: "tozero" },
    yaxis2: { title: { text: "L0" }, overlaying: "y", side: "right", rangemode: "tozero" } });
  panel.dataset.state = "ready";
}

let job = null;
let onDone = () => {};

function formBody() {
  const num = (id) => Number($(id).value);
  const body = { layer: num("sae-layer"), expansion: num("sae-expansion"), activation: $("sae-activation").value,
    k: num("sae-k"), l1_coefficient: num("sae-l1"), time_budget: num("sae-budget"), seed: num("sae-seed") };
  if ($("sae-name").value.trim()) body.name = $("sae-name").value.trim();
  return body;
}

function showJob(j) {
  job = j;
  $("sae-bar").style.width = `${Math.round(100 * j.progress)}%`;
  $("sae-progress").setAttribute("aria-valuenow", String(Math.round(100 * j.progress)));
  const what = j.phase === "evaluating" && j.status === "running" ? "evaluating on held-out text" : j.status === "queued" ? "queued: waiting for memory other work holds" : j.status;
  $("sae-job").textContent = `${j.sae}: ${what} · step ${j.step} · ${grouped(j.tokens)} tokens · ` +
    (j.fvu === null ? "" : `unexplained variance ${decimal(j.fvu, 3)} · L0 ${decimal(j.l0, 1)} · dead ${j.dead} · `) +
    `${duration(j.elapsed)}` + (j.error ? ` · ${j.error}` : "");
  $("sae-start").disabled = going(j);
  $("sae-cancel").disabled = !going(j);
  $("train-sae-panel").dataset.state = j.status;
}

async function poll() {
  if (!going(job)) return;
  try {
    showJob(await apiGet(`/saes/jobs/${job.id}`));
  } catch (err) {
    setNote($("sae-train-note"), `Could not follow the job: ${err.message}`, "error");
    return;
  }
  if (going(job)) setTimeout(poll, 1000);
  else if (job.status === "done") onDone(job.sae);
}

export function initSaeTraining({ onTrained }) {
  onDone = onTrained;
  addDownloads($("sae-loss-plot"), "sae-loss", () => shown && { name: shown.name, quality: shown.quality });
  addDownloads($("sae-train-plot"), "sae-training", () => shown && { name: shown.name, history: shown.history });
  $("sae-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    setNote($("sae-train-note"), "");
    try {
      showJob(await apiPost("/saes", formBody()));
      setTimeout(poll, 1000);
    } catch (err) {
      setNote($("sae-train-note"), `Not started: ${err.message}`, "error");
    }
  });
  $("sae-cancel").addEventListener("click", async () => {
    if (job) showJob(await apiPost(`/saes/jobs/${job.id}/cancel`, {}));
  });
  $("sae-activation").addEventListener("change", () => { $("sae-k").disabled = $("sae-activation").value !== "topk"; });
}
