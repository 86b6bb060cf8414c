// Panel 6 · Experiments from GET /api/v1/experiments: "Run" starts the variants one after another
// (POST /api/v1/training, then poll to the end; an identical finished request comes back at once),
// then draws them side by side: the loss curves against the step, a table of each variant's steps
// reached, parameters and final validation loss (GET /api/v1/checkpoints), and links to /compare
// their final checkpoints (two variants: one link; more: each against the first). Extras: per-block
// gradient norms (norm-warmup), samples at the final snapshot from /replay (causal-mask).
// A drawn experiment is named in the URL (?exp=causal-mask,gqa): opened again, the page redraws it
// from the finished runs of this data folder (GET /api/v1/training) without training anything, and
// an exported panel redraws it from the answers it carries.
import { apiGet, formatDetail } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, int } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { draw } from "../lib/plot.js";
import { pageQuery, setPageQuery } from "../lib/query.js";
import { gradTraces, referenceTraces } from "./progress.js";
import * as runs from "./runs.js";

const VARIANT_COLOURS = [OKABE.blue, OKABE.vermillion, OKABE.green, OKABE.purple, OKABE.orange, OKABE.sky];
let running = null; // name of the experiment in progress
const drawn = new Map(); // experiment name -> its variants' runs as drawn (GET /training/{id} each)

// An experiment's runs as its figures' download data: each variant's label and run status with its history.
function experimentData(exp) {
  const results = drawn.get(exp.name);
  return results && { experiment: exp.name, variants: results.map((run, i) => ({
    label: exp.variants[i].label, run: { ...run.body, history: run.history } })) };
}

function setStatus(card, i, text, kind = "") {
  const li = card.querySelectorAll(".variant")[i];
  const s = li.querySelector(".variant-status");
  s.textContent = text;
  s.className = `variant-status ${kind}`;
}

async function runVariant(card, exp, i) {
  const v = exp.variants[i];
  const label = `${exp.title}: ${v.label}`;
  setStatus(card, i, "starting…");
  const { status, body } = await runs.startRun(v.request);
  if (status === 200 && body.cached) {
    setStatus(card, i, `reused run ${body.id} (already trained)`, "ok");
    return runs.load(body.id, label);
  }
  if (status === 409) throw new Error(`${body.detail}. Panel 1 can cancel it.`);
  if (status !== 202) throw new Error(formatDetail(body.detail));
  const id = body.id;
  const budget = v.request.time_budget;
  const progress = (e) => {
    const r = e.detail;
    if (r.id !== id || !runs.isRunning(r)) return;
    setStatus(card, i, budget ? `training run ${id}: step ${r.body.step}, ${Math.round(r.body.elapsed_s)} of ${budget} s`
      : `training run ${id}: step ${r.body.step} / ${r.body.total_steps ?? "?"}`);
  };
  runs.bus.addEventListener("run-update", progress);
  runs.show(id, label); // panel 2 follows it
  const run = await runs.watch(id, label).finally(() => runs.bus.removeEventListener("run-update", progress));
  if (run.body.status !== "done") throw new Error(`run ${id} ${run.body.status}${run.body.error ? `: ${run.body.error}` : ""}`);
  setStatus(card, i, `trained: run ${id}`, "ok");
  return run;
}

function lossPlot(gd, exp, results) {
  const data = [];
  let top = 0;
  results.forEach((run, i) => {
    const c = VARIANT_COLOURS[i % VARIANT_COLOURS.length];
    const label = exp.variants[i].label;
    const h = run.history;
    data.push({
      type: "scatter", mode: "lines", name: `${label} · train`, legendgroup: label, x: h.map((r) => r.step), y: h.map((r) => r.loss),
      line: { color: c, width: 1.3 }, hovertemplate: `${label}<br>step %{x}<br>train loss %{y:.4f}<extra></extra>`,
    }, {
      type: "scatter", mode: "lines+markers", name: `${label} · validation`, legendgroup: label,
      x: run.body.evals.map((e) => e.step), y: run.body.evals.map((e) => e.val_loss),
      line: { color: c, width: 2, dash: "dot" }, marker: { size: 6, symbol: "diamond" },
      hovertemplate: `${label}<br>step %{x}<br>validation loss %{y:.4f}<extra></extra>`,
    });
    top = Math.max(top, ...h.map((r) => r.loss), run.body.uniform_loss || 0);
  });
  // the reference lines, where every variant reports the same ones (the same text and vocabulary)
  const range = [0, Math.max(...results.map((r) => r.body.total_steps || r.lastStep))];
  const same = (k) => results.every((r) => r.body[k] === results[0].body[k]);
  const first = results[0].body;
  data.push(...referenceTraces({ uniform_loss: first.uniform_loss, unigram_loss: same("unigram_loss") ? first.unigram_loss : null,
    bigram_loss: same("bigram_loss") ? first.bigram_loss : null }, range));
  draw(gd, data, {
    height: 380, xaxis: { title: { text: "step" } }, yaxis: { title: { text: "loss (nats per token)" }, range: [0, top * 1.05] },
    legend: { font: { size: 11 } }, margin: { l: 60, r: 10, t: 20, b: 45 },
  }, `${exp.name}-loss`);
  gd.dataset.traces = String(results.length);
}

function gradPanels(gd, exp, results) {
  const n = results.length;
  const cols = Math.min(2, n);
  const rows = Math.ceil(n / cols);
  const data = [];
  let lo = Infinity;
  let hi = 0;
  const annotations = [];
  results.forEach((run, i) => {
    const ax = i === 0 ? "" : String(i + 1);
    data.push(...gradTraces(run, { total: false, xaxis: `x${ax}`, yaxis: `y${ax}`, legend: i === 0 }));
    for (const h of run.history) for (const g of h.layer_grad_norms) if (g > 0) { lo = Math.min(lo, g); hi = Math.max(hi, g); }
    annotations.push({ text: `<b>${exp.variants[i].label}</b>`, xref: `x${ax} domain`, yref: `y${ax} domain`, x: 0, y: 1.02,
      xanchor: "left", yanchor: "bottom", showarrow: false, font: { size: 12 } });
  });
  const layout = {
    height: 260 * rows + 60, grid: { rows, columns: cols, pattern: "independent", ygap: 0.3, xgap: 0.12 },
    annotations, legend: { orientation: "h", y: -0.12 }, margin: { l: 60, r: 10, t: 30, b: 60 },
  };
  const range = [Math.log10(lo), Math.log10(hi)];
  results.forEach((_, i) => {
    const ax = i === 0 ? "" : String(i + 1);
    layout[`xaxis${ax}`] = { title: { text: "step" } };
    layout[`yaxis${ax}`] = { title: { text: "gradient norm" }, type: "log", range, exponentformat: "power" };
  });
  draw(gd, data, layout, `${exp.name}-block-grad-norms`);
}

async function samples(box, exp, results) {
  const frames = await Promise.all(results.map((run) => {
    const step = Math.max(...run.body.snapshots);
    return apiGet(`/training/${run.id}/replay?step=${step}`);
  }));
  const prompt = frames[0].forward.tokens.map((t) => t.text).join("");
  box.replaceChildren(
    el("p", { class: "muted small", text: "Each model continues the same prompt at its last snapshot (same seed):" }),
    el("div", { class: "sample-grid" }, frames.map((f, i) => el("figure", {},
      el("figcaption", { text: `${exp.variants[i].label} · step ${f.step} · validation loss ${decimal(f.val_loss, 3)}` }),
      el("pre", { class: "sample" }, el("span", { class: "prompt-part", text: prompt }), el("span", { class: "gen-part", text: f.sample }))))));
}

// Each variant's run, steps reached, parameters and final validation loss (its final checkpoint's).
async function summaryTable(box, exp, results) {
  const list = await apiGet("/checkpoints");
  const byName = new Map(list.map((c) => [c.name, c]));
  const timed = exp.variants.some((v) => v.request.time_budget);
  const note = timed ? el("p", { class: "muted small", text: `Every run had the same ${exp.variants[0].request.time_budget} s of ` +
    "training, so a cheaper block reaches more steps in it." }) : null;
  box.replaceChildren(...[el("table", { class: "ckpt-table exp-table" },
    el("thead", {}, el("tr", {}, el("th", { text: "variant" }), el("th", { text: "run" }),
      el("th", { class: "num", text: timed ? "steps reached" : "steps" }), el("th", { class: "num", text: "parameters" }),
      el("th", { class: "num", text: "final validation loss" }))),
    el("tbody", {}, results.map((run, i) => {
      const c = byName.get(run.body.checkpoint);
      const val = c ? c.val_loss : null;
      return el("tr", { dataset: { run: run.id, steps: run.body.step, valLoss: val ?? "" } },
        el("td", { text: exp.variants[i].label }), el("td", {}, el("code", { text: run.id })),
        el("td", { class: "num", text: int(run.body.step) }),
        el("td", { class: "num", text: c ? int(c.params) : "—" }),
        el("td", { class: "num", text: val !== null ? decimal(val, 4) : "—" }));
    }))), note].filter(Boolean));
}

// Links to /compare the variants' final checkpoints: the first variant is a, the other b.
function compareLinks(box, exp, results) {
  const first = results[0].body.checkpoint;
  const pairs = results.slice(1).map((run, j) => [j + 1, run.body.checkpoint]).filter(([, b]) => first && b);
  box.replaceChildren(...(pairs.length ? [
    el("span", { class: "muted small", text: results.length > 2 ? "Compare each with the first on one text: " : "Compare the two on one text: " }),
    ...pairs.map(([i, b]) => el("a", { class: "exp-compare-link", href: `/compare?${new URLSearchParams({ a: first, b })}`,
      dataset: { a: first, b }, text: `“${exp.variants[i].label}” vs “${exp.variants[0].label}” →` })),
  ] : []));
}

async function runExperiment(card, exp) {
  if (running) return;
  running = exp.name;
  const buttons = document.querySelectorAll(".exp-run");
  buttons.forEach((b) => { b.disabled = true; });
  const msg = card.querySelector(".exp-msg");
  msg.className = "exp-msg start-msg";
  msg.textContent = `Training ${exp.variants.length} runs one after another; panel 2 shows the one in progress.`;
  card.dataset.state = "running";
  try {
    const ids = [];
    for (let i = 0; i < exp.variants.length; i++) ids.push((await runVariant(card, exp, i)).id);
    msg.textContent = "";
    await showResults(card, exp, ids);
  } catch (err) {
    msg.className = "exp-msg start-msg bad";
    msg.textContent = `Stopped: ${err.message || err}`;
    card.dataset.state = "failed";
  } finally {
    running = null;
    buttons.forEach((b) => { b.disabled = false; });
  }
}

// The finished variants' runs drawn side by side, each run's whole record read once more (so that
// what the figures show is the final answer of GET /training/{id}, also in an exported panel).
async function showResults(card, exp, ids) {
  const results = await Promise.all(ids.map(async (id, i) => {
    const body = await apiGet(`/training/${encodeURIComponent(id)}?since=0`);
    return { id, body: { ...body, history: [] }, history: body.history, lastStep: body.step, label: `${exp.title}: ${exp.variants[i].label}` };
  }));
  card.querySelector(".exp-results").hidden = false;
  drawn.set(exp.name, results);
  lossPlot(card.querySelector(".exp-loss"), exp, results);
  await summaryTable(card.querySelector(".exp-summary"), exp, results);
  compareLinks(card.querySelector(".exp-compare"), exp, results);
  const extra = card.querySelector(".exp-extra");
  if (exp.name === "norm-warmup") {
    const gd = el("div", { class: "plot exp-grad", id: `exp-${exp.name}-grad` });
    extra.replaceChildren(el("p", { class: "muted small", text: "Gradient norm of each block at every step (log scale, same scale in every chart):" }), gd);
    addDownloads(gd, `${exp.name}-block-grad-norms`, () => experimentData(exp));
    gradPanels(gd, exp, results);
  } else if (exp.name === "causal-mask") {
    await samples(extra, exp, results);
  } else if (exp.name === "induction-heads") {
    extra.replaceChildren(el("p", { class: "exp-timelines" }, el("span", { class: "muted small", text: "Follow each run over its snapshots: " }),
      ...results.map((run, i) => el("a", { class: "exp-timeline-link", href: `/timeline?${new URLSearchParams({ run: run.id })}`,
        dataset: { run: run.id }, text: `“${exp.variants[i].label}” on /timeline → ` }))));
  }
  exp.variants.forEach((_, i) => { if (!card.querySelectorAll(".variant-status")[i].textContent) setStatus(card, i, `trained: run ${ids[i]}`, "ok"); });
  card.dataset.state = "done";
  card.querySelector(".exp-run").textContent = "Run again (the finished runs are reused)";
  const q = pageQuery();
  const names = new Set((q.get("exp") || "").split(",").filter(Boolean));
  names.add(exp.name);
  q.set("exp", [...names].join(","));
  setPageQuery(q);
}

// A request as a canonical text (keys sorted at every level): two requests are the same run when these match.
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

// The experiments the URL names whose every variant has a finished run here, drawn from those runs
// (the newest finished run of each request); the others wait for "Run", with a note.
async function reopen(cards, list) {
  const names = (pageQuery().get("exp") || "").split(",").filter(Boolean);
  if (!names.length) return;
  const done = new Map();
  for (const r of await apiGet("/training")) {
    if (r.status === "done") done.set(canonical(r.request), r.id);   // oldest first: the newest stays
  }
  for (const name of names) {
    const exp = list.find((e) => e.name === name);
    if (!exp) continue;
    const card = cards.get(name);
    const ids = exp.variants.map((v) => done.get(canonical(v.request)));
    if (ids.every(Boolean)) await showResults(card, exp, ids);
    else card.querySelector(".exp-msg").textContent = "Not trained in this data folder yet: Run trains it.";
  }
}

// "Run (2 short runs)" or, for a time budget, "Run (3 runs of 60 s each)".
function runText(exp) {
  const n = exp.variants.length;
  const budgets = [...new Set(exp.variants.map((v) => v.request.time_budget))];
  return budgets.length === 1 && budgets[0] ? `Run (${n} runs of ${budgets[0]} s each)` : `Run (${n} short runs)`;
}

function card(exp) {
  const c = el("article", { class: "exp-card", id: `exp-${exp.name}`, dataset: { name: exp.name, variants: exp.variants.length } },
    el("h3", { text: exp.title }),
    el("p", { class: "exp-question", text: exp.question }),
    el("ol", { class: "variants" }, exp.variants.map((v) => el("li", { class: "variant" },
      el("span", { text: v.label }), " ",
      el("span", { class: "muted small", text: `(${runs.describeRequest(v.request)})` }), " ",
      el("span", { class: "variant-status" })))),
    el("div", { class: "form-actions" }, el("button", { type: "button", class: "exp-run", text: runText(exp) }),
      el("span", { class: "exp-msg start-msg", role: "status" })),
    el("div", { class: "exp-results", hidden: true },
      el("div", { class: "plot exp-loss", id: `exp-${exp.name}-loss` }),
      el("div", { class: "exp-summary" }),
      el("p", { class: "exp-compare" }),
      el("div", { class: "exp-extra" }),
      el("p", { class: "caption look-for" }, el("b", { text: "What to look for: " }), exp.what_to_look_for)));
  c.querySelector(".exp-run").addEventListener("click", () => runExperiment(c, exp));
  addDownloads(c.querySelector(".exp-loss"), `${exp.name}-loss`, () => experimentData(exp));
  return c;
}

export async function init() {
  const list = await apiGet("/experiments");
  const cards = new Map(list.map((exp) => [exp.name, card(exp)]));
  $("experiments").replaceChildren(...cards.values());
  await reopen(cards, list);
}
