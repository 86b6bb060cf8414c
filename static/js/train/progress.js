// Panel 2 · Live progress of the shown run: step / total, tokens/s, ETA, a progress bar; train and
// validation loss against the uniform-guess line ln(V) and the training text's unigram and bigram
// entropies; the learning rate; the gradient norms.
import { apiGet } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { decimal, duration, int } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { draw } from "../lib/plot.js";
import * as runs from "./runs.js";

const LAYER_COLOURS = [OKABE.blue, OKABE.orange, OKABE.green, OKABE.purple, OKABE.sky, OKABE.vermillion,
  OKABE.yellow, OKABE.grey];

const STATUS_TEXT = {
  queued: "queued: waiting for memory other work holds (it starts when that ends)",
  starting: "starting: reading the corpus and learning its tokenizer",
  running: "training",
  done: "done",
  cancelled: "cancelled",
  failed: "failed",
};

function xRange(run) {
  // a running run is drawn on its whole length (the curve grows into it); a stopped one on what it did
  const planned = ["cancelled", "failed"].includes(run.body.status) ? 0 : run.body.total_steps || 0;
  const end = Math.max(planned, run.lastStep || 0, 1);
  return [0, end];
}

// One run's loss curves: train loss per step, validation loss at each evaluation, uniform guess.
function lossTraces(run, { colour = OKABE.blue, valColour = OKABE.vermillion, label = "", baseline = true } = {}) {
  const h = run.history;
  const pre = label ? `${label}: ` : "";
  const traces = [{
    type: "scatter", mode: "lines", name: `${pre}train loss`, x: h.map((r) => r.step), y: h.map((r) => r.loss),
    line: { color: colour, width: 1.5 },
    hovertemplate: `${pre}step %{x}<br>train loss %{y:.4f}<extra></extra>`,
  }, {
    type: "scatter", mode: "lines+markers", name: `${pre}validation loss`,
    x: run.body.evals.map((e) => e.step), y: run.body.evals.map((e) => e.val_loss),
    line: { color: valColour, width: 2, dash: label ? "dot" : "solid" }, marker: { size: 7, symbol: "diamond" },
    hovertemplate: `${pre}step %{x}<br>validation loss %{y:.4f}<extra></extra>`,
  }];
  if (baseline) traces.push(...referenceTraces(run.body, xRange(run)));
  return traces;
}

// The reference lines of a loss chart, each only where the run reports it: the uniform guess ln V,
// the training text's unigram entropy (a model that knows only how often each token occurs) and its
// bigram conditional entropy (a model that knows only which token follows which).
export function referenceTraces(body, range) {
  const traces = [];
  if (body.uniform_loss !== null && body.uniform_loss !== undefined) traces.push(uniformTrace(body.uniform_loss, range));
  if (body.unigram_loss !== null && body.unigram_loss !== undefined) {
    traces.push(levelTrace(`token frequencies only (unigram entropy) = ${decimal(body.unigram_loss, 3)}`, body.unigram_loss,
      range, { color: OKABE.line, width: 1.5, dash: "dashdot" }, "unigram entropy: a model that knows only token frequencies"));
  }
  if (body.bigram_loss !== null && body.bigram_loss !== undefined) {
    traces.push(levelTrace(`token pairs only (bigram entropy) = ${decimal(body.bigram_loss, 3)}`, body.bigram_loss,
      range, { color: OKABE.purple, width: 1.5, dash: "dot" }, "bigram entropy: a model that knows only which token follows which"));
  }
  return traces;
}

function levelTrace(name, y, [x0, x1], line, hover) {
  return {
    type: "scatter", mode: "lines", name, x: [x0, x1], y: [y, y], line,
    hovertemplate: `${hover}<br>${decimal(y, 4)} nats per token<extra></extra>`,
  };
}

function uniformTrace(u, [x0, x1]) {
  return {
    type: "scatter", mode: "lines", name: `uniform guess: ln V = ${decimal(u, 3)}`, x: [x0, x1], y: [u, u],
    line: { color: OKABE.black, width: 1.5, dash: "dash" },
    hovertemplate: `uniform guess ln V = ${decimal(u, 4)}<extra></extra>`,
  };
}

function drawLoss(run) {
  const gd = $("loss-plot");
  const b = run.body;
  const ys = run.history.map((r) => r.loss).concat(b.evals.map((e) => e.val_loss), b.uniform_loss ?? [], b.unigram_loss ?? []);
  const top = ys.length ? Math.max(...ys) * 1.05 : 1;
  draw(gd, lossTraces(run), {
    height: 360, xaxis: { title: { text: "step" }, range: xRange(run) },
    yaxis: { title: { text: "loss (nats per token)" }, range: [0, top] },
    legend: { orientation: "h", y: 1.02, yanchor: "bottom", x: 0 }, margin: { l: 60, r: 20, t: 80, b: 45 },
  }, `loss-${run.id}`);
  gd.dataset.points = String(run.history.length);
  gd.dataset.run = run.id;
}

function drawLr(run) {
  const h = run.history;
  draw($("lr-plot"), [{
    type: "scatter", mode: "lines", name: "learning rate", x: h.map((r) => r.step), y: h.map((r) => r.lr),
    line: { color: OKABE.green, width: 2 }, hovertemplate: "step %{x}<br>learning rate %{y:.3e}<extra></extra>",
  }], {
    height: 280, xaxis: { title: { text: "step" }, range: xRange(run) },
    yaxis: { title: { text: "learning rate" }, exponentformat: "e", rangemode: "tozero" },
    margin: { l: 70, r: 10, t: 10, b: 45 }, showlegend: false,
  }, `lr-${run.id}`);
}

export function gradTraces(run, { layers = true, total = true, xaxis, yaxis, legend = true } = {}) {
  const h = run.history;
  const traces = [];
  const nLayers = h.length ? h[0].layer_grad_norms.length : 0;
  const axes = { ...(xaxis ? { xaxis } : {}), ...(yaxis ? { yaxis } : {}) };
  if (layers) {
    for (let i = 0; i < nLayers; i++) {
      traces.push({
        type: "scatter", mode: "lines", name: `block ${i}`, legendgroup: `block ${i}`, showlegend: legend,
        x: h.map((r) => r.step), y: h.map((r) => r.layer_grad_norms[i]),
        line: { color: LAYER_COLOURS[i % LAYER_COLOURS.length], width: 1 },
        hovertemplate: `step %{x}<br>block ${i} gradient norm %{y:.4f}<extra></extra>`, ...axes,
      });
    }
  }
  if (total) {
    traces.push({
      type: "scatter", mode: "lines", name: "whole model", x: h.map((r) => r.step), y: h.map((r) => r.grad_norm),
      line: { color: OKABE.black, width: 2 }, showlegend: legend,
      hovertemplate: "step %{x}<br>gradient norm %{y:.4f}<extra></extra>", ...axes,
    });
  }
  return traces;
}

function drawGrad(run) {
  draw($("grad-plot"), gradTraces(run), {
    height: 280, xaxis: { title: { text: "step" }, range: xRange(run) },
    yaxis: { title: { text: "gradient norm" }, rangemode: "tozero" },
    legend: { orientation: "h", y: 1.15, x: 0, font: { size: 11 } }, margin: { l: 60, r: 10, t: 30, b: 45 },
  }, `grad-norm-${run.id}`);
}

function drawStats(run) {
  const b = run.body;
  $("progress-empty").hidden = true;
  $("progress-body").hidden = false;
  $("run-desc").textContent = `Run ${run.id}${run.label ? ` (${run.label})` : ""}: ${runs.describeRequest(b.request)}`;
  const pill = $("run-status");
  pill.textContent = STATUS_TEXT[b.status] || b.status;
  pill.dataset.status = b.status;
  const bar = $("run-progress");
  bar.max = b.total_steps || 1;
  bar.value = b.total_steps ? b.step : 0;
  if (b.status === "queued" || b.status === "starting" || (b.status === "running" && !b.total_steps)) bar.removeAttribute("value");
  const parts = [`step ${int(b.step)} / ${b.total_steps ? int(b.total_steps) : "?"}`];
  if (b.tokens_per_s !== null) parts.push(`${int(b.tokens_per_s)} tokens/s`);
  if (b.precision) parts.push(`computing in ${b.precision}`);
  parts.push(`elapsed ${duration(b.elapsed_s)}`);
  if (b.status === "running") parts.push(b.eta_s === null ? "time left: estimating…" : `about ${duration(b.eta_s)} left`);
  const lastEval = b.evals[b.evals.length - 1];
  if (lastEval) {
    const refs = [`uniform guess ${decimal(b.uniform_loss, 3)}`];
    if (b.unigram_loss !== null && b.unigram_loss !== undefined) refs.push(`unigram ${decimal(b.unigram_loss, 3)}`);
    if (b.bigram_loss !== null && b.bigram_loss !== undefined) refs.push(`bigram ${decimal(b.bigram_loss, 3)}`);
    parts.push(`validation loss ${decimal(lastEval.val_loss, 3)} (${refs.join(", ")})`);
  }
  $("run-stats").textContent = parts.join(" · ");
  $("run-stats").dataset.step = String(b.step);
  const err = $("run-error");
  err.hidden = !b.error;
  err.textContent = b.error ? `The run failed: ${b.error}` : "";
}

function optionText(s, label) {
  return `${s.id} · ${s.status}${label ? ` (${label})` : ""} · ${runs.describeRequest(s.request)}`;
}

function render(run) {
  if (!run) return;
  const opt = [...$("run-select").options].find((o) => o.value === run.id);
  if (opt) opt.textContent = optionText(run.body, run.label);
  if (run !== runs.shownRun()) return;
  drawStats(run);
  const empty = run.history.length === 0;
  $("curves-wait").hidden = !empty;
  $("curves-wait").textContent = runs.isRunning(run) ? "The curves appear after the first training step."
    : "No step history is known for this run (the app keeps it for finished runs and for runs of this session).";
  $("curves").hidden = empty;
  if (empty || !panelShown("progress")) return;
  drawLoss(run);
  drawLr(run);
  drawGrad(run);
}

async function refreshList() {
  const list = await apiGet("/training");
  const sel = $("run-select");
  const shown = runs.shownRun();
  const keep = shown ? shown.id : sel.value;
  sel.replaceChildren(...list.slice().reverse().map((s) => {
    const known = runs.getRun(s.id);
    return el("option", { value: s.id, text: optionText(s, known?.label) });
  }));
  if (keep && list.some((s) => s.id === keep)) sel.value = keep;
  return list;
}

// The shown run as GET /api/v1/training/{id} gives it from step 0: its status and whole history.
function shownStatus() {
  const run = runs.shownRun();
  return run && { ...run.body, history: run.history };
}

export async function init() {
  addDownloads($("loss-plot"), "loss", shownStatus);
  addDownloads($("lr-plot"), "learning-rate", shownStatus);
  addDownloads($("grad-plot"), "gradient-norms", shownStatus);
  runs.on("run-update", (run) => { render(run); });
  runs.on("run-shown", ({ id }) => { $("run-select").value = id; if (!$("run-select").value) refreshList(); });
  runs.on("runs-changed", refreshList);
  runs.on("run-finished", refreshList);
  $("run-select").addEventListener("change", (e) => runs.show(e.target.value));
  const list = await refreshList();
  // a run still going (started before the page was opened) is followed; else the newest is shown
  const going = list.find((s) => !runs.TERMINAL.has(s.status));
  const pick = going || list[list.length - 1];
  if (pick) await runs.show(pick.id);
}
