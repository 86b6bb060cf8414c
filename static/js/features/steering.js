// The /features page's steering panel (issue #66): four ways to steer generation towards one label
// of a labelled task (a DiffMean vector, a probe's direction, an SAE feature, a prompt prefix), run
// as a job of POST /api/v1/steering/jobs with a progress bar and a cancel button; the answer drawn
// as concept score and fluency against strength, a table of every point and the generations side by
// side. Every number is the API's; the panel only reads the form and lays out the answer. The form's
// settings live in the page's URL (steer_*; steer=1 runs them on load).
import { ApiError, apiGet, apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, grouped, int, pct } from "../lib/format.js";
import { going, runJob } from "../lib/jobs.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { pageQuery } from "../lib/query.js";
import { pastedExamples } from "./probes.js";

const COLOURS = { diffmean: OKABE.blue, probe: OKABE.orange, sae: OKABE.green, prompt: OKABE.vermillion };
// the form's fields and their names in the URL (steer_NAME)
const FIELDS = [["task", "steer-task"], ["concept", "steer-concept"], ["layer", "steer-layer"],
  ["strengths", "steer-strengths"], ["prefix", "steer-prefix"], ["prompts", "steer-prompts"],
  ["tokens", "steer-tokens"], ["seed", "steer-seed"], ["judge", "steer-judge"]];

const slot = latest();
let shown = null;          // the answer drawn (SteeringResponse)
let job = null;            // the last job seen
let taskLabels = {};       // shipped task -> its labels (GET /api/v1/finetune/tasks)
let wantedConcept = null;  // the URL's concept, kept until its task's labels are known
let ran = false;           // the answer shown is the form's settings (steer=1 in the URL)
let urlChanged = () => {};

const vectorsOf = (a) => a.methods.filter((m) => m.method !== "prompt");
const promptOf = (a) => a.methods.find((m) => m.method === "prompt");

// "0.25, 0.5, 1" as numbers; a piece that is not a number goes as it is, for the API to name.
function listed(text) {
  return text.split(",").map((s) => s.trim()).filter((s) => s !== "")
    .map((s) => (Number.isFinite(Number(s)) ? Number(s) : s));
}

function requestBody() {
  const task = $("steer-task").value;
  const body = task === "paste" ? { examples: pastedExamples($("steer-paste").value) } : { task };
  if ($("steer-concept").value) body.concept = $("steer-concept").value;
  if ($("steer-layer").value !== "") body.layer = Number($("steer-layer").value);
  return { ...body, strengths: listed($("steer-strengths").value), prefix_examples: listed($("steer-prefix").value),
    n_prompts: Number($("steer-prompts").value), new_tokens: Number($("steer-tokens").value), seed: Number($("steer-seed").value),
    judge: $("steer-judge").value };
}

function pastedLabels() {
  try {
    return [...new Set(pastedExamples($("steer-paste").value).map((x) => x.label))].sort();
  } catch {
    return [];
  }
}

// The concept select: the task's labels, the one asked for (or the API's default, the second) chosen.
function fillConcepts() {
  const task = $("steer-task").value;
  const known = task === "paste" ? pastedLabels() : taskLabels[task];
  const names = known?.length ? known : wantedConcept ? [wantedConcept] : [];
  const sel = $("steer-concept");
  const keep = wantedConcept ?? sel.value;
  sel.replaceChildren(...(names.length ? names.map((n) => new Option(n, n)) : [new Option("the task's second label", "")]));
  sel.value = names.includes(keep) ? keep : (names[Math.min(1, names.length - 1)] ?? "");
  if (known?.length) wantedConcept = null;
}

// Adds the panel's settings to the page's query `q` (main.js writes the rest): those that differ
// from the form's defaults, the pasted lines, and steer=1 while the answer shown is theirs.
export function steeringQuery(q) {
  for (const [name, id] of FIELDS) {
    const node = $(id);
    const options = node.tagName === "SELECT" ? [...node.options] : null;
    const dflt = name === "concept" ? options[Math.min(1, options.length - 1)].value   // the API's default: the second label
      : options ? options.find((o) => o.defaultSelected)?.value : node.defaultValue;
    if (node.value !== dflt) q.set(`steer_${name}`, node.value);
  }
  if ($("steer-task").value === "paste" && $("steer-paste").value.trim()) q.set("steer_lines", $("steer-paste").value);
  if (ran) q.set("steer", "1");
}

function readUrl(q) {
  for (const [name, id] of FIELDS) {
    const v = q.get(`steer_${name}`);
    if (v === null) continue;
    const node = $(id);
    if (name === "concept") wantedConcept = v;
    else if (node.tagName !== "SELECT" || [...node.options].some((o) => o.value === v)) node.value = v;
  }
  if (q.has("steer_lines")) $("steer-paste").value = q.get("steer_lines");
  $("steer-paste").hidden = $("steer-task").value !== "paste";
}

function showJob(j) {
  job = j;
  const share = j.total ? j.done / j.total : 0;
  $("steer-bar").style.width = `${Math.round(100 * share)}%`;
  $("steer-progress").setAttribute("aria-valuenow", String(Math.round(100 * share)));
  const what = j.status === "queued" ? "queued: waiting for memory other work holds" : j.status;
  $("steer-job").textContent = `${what} · ${int(j.done)} / ${int(j.total)} decode steps · ${j.elapsed.toFixed(1)} s`;
  $("steer-cancel").disabled = !going(j);
}

// One measure (concept_score or fluency) against strength: the vectors on the bottom axis (x the
// stream's mean norm), the prompt's prefix sizes on the top one, the unsteered baseline dashed.
function measureChart(gd, a, key, yaxis) {
  const fmt = key === "concept_score" ? "%{y:.1%}" : "%{y:.3f} nats";
  const vectors = vectorsOf(a).filter((m) => m.available);
  const prompt = promptOf(a);
  const top = Math.max(...vectors.flatMap((m) => m.points.map((p) => p.strength)));
  const most = Math.max(...prompt.points.map((p) => p.strength));
  const traces = vectors.map((m) => ({
    type: "scatter", mode: "lines+markers", name: m.title, x: m.points.map((p) => p.strength), y: m.points.map((p) => p[key]),
    line: { color: COLOURS[m.method] }, hovertemplate: `${m.title}<br>× %{x} the norm: ${fmt}<extra></extra>`,
  }));
  traces.push({
    type: "scatter", mode: "lines+markers", name: `${prompt.title} (top axis)`, xaxis: "x2",
    x: prompt.points.map((p) => p.strength), y: prompt.points.map((p) => p[key]),
    line: { color: COLOURS.prompt, dash: "dot" }, marker: { symbol: "diamond", size: 9 },
    hovertemplate: `${prompt.title}<br>k = %{x} examples: ${fmt}<extra></extra>`,
  });
  traces.push({
    type: "scatter", mode: "lines", name: "unsteered", x: [0, top], y: [a.unsteered[key], a.unsteered[key]],
    line: { color: OKABE.black, dash: "dash" }, hovertemplate: `unsteered: ${fmt}<extra></extra>`,
  });
  return chart(gd, traces, {
    height: 380, margin: { l: 64, r: 16, t: 72, b: 48 }, yaxis,
    xaxis: { title: { text: "vector strength (× the stream's mean norm)" }, range: [0, top * 1.08] },
    xaxis2: { title: { text: "prompt prefix: examples k", font: { color: COLOURS.prompt } }, overlaying: "x", side: "top",
      range: [0, most * 1.08], dtick: 1, tickfont: { color: COLOURS.prompt }, automargin: true },
  });
}

function drawCharts(a) {
  return Promise.all([
    measureChart($("steer-score-plot"), a, "concept_score",
      { title: { text: `concept score: P(${a.concept})` }, range: [0, 1], tickformat: ".0%" }),
    measureChart($("steer-fluency-plot"), a, "fluency", { title: { text: "loss per token (nats): lower is more fluent" } }),
  ]);
}

const pair = (p) => (p ? [el("td", { class: "num", text: pct(p.concept_score) }), el("td", { class: "num", text: decimal(p.fluency, 3) })]
  : [el("td"), el("td")]);

function vectorRow(m, width) {
  const feature = m.method === "sae" && m.sae_feature !== null
    ? el("span", { class: "muted sub", text: `feature ${m.sae_feature} (Δ activation ${decimal(m.sae_feature_difference, 3)})` }) : null;
  const head = el("td", { title: m.description }, el("b", { text: m.title }), feature);
  if (!m.available) return el("tr", { dataset: { method: m.method } }, head, el("td", { class: "muted", colspan: 3 + 2 * width, text: `left out: ${m.reason}` }));
  return el("tr", { dataset: { method: m.method } }, head, el("td", { class: "num", text: decimal(m.cosine_with_diffmean, 3) }), ...pair(null),
    ...Array.from({ length: width }, (_, i) => pair(m.points[i])).flat());
}

// Rows: the methods; columns: each strength's concept score and fluency (the prompt's prefix sizes
// under a header of their own), beside the unsteered baseline.
function renderTable(a) {
  const vectors = vectorsOf(a);
  const prompt = promptOf(a);
  const strengths = vectors.find((m) => m.available).points.map((p) => p.strength);
  const width = Math.max(strengths.length, prompt.points.length);
  const groups = (labels) => labels.map((t) => el("th", { class: "num", colspan: 2, text: t }));
  const blank = Array.from({ length: width }, (_, i) => i);
  const sub = el("tr", {}, el("th"), el("th"), ...[null, ...blank].flatMap(() => [el("th", { class: "num", text: "concept" }), el("th", { class: "num", text: "loss" })]));
  const head = el("tr", {}, el("th", { text: "method" }), el("th", { class: "num", text: "cos with DiffMean" }),
    ...groups(["unsteered", ...blank.map((i) => (i < strengths.length ? `× ${strengths[i]} norm` : ""))]));
  const promptHead = el("tr", {}, el("th", { text: "examples before the prompt" }), el("th"), ...groups(["", ...blank.map((i) => {
    const p = prompt.points[i];
    return p ? `k = ${p.strength} (${grouped(prompt.prefix_tokens[i])} tokens)` : "";
  })]));
  const unsteered = el("tr", { dataset: { method: "unsteered" } }, el("td", { text: "unsteered" }), el("td"), ...pair(a.unsteered),
    ...blank.flatMap(() => pair(null)));
  const promptRow = el("tr", { dataset: { method: "prompt" } }, el("td", { title: prompt.description }, el("b", { text: prompt.title })),
    el("td"), ...pair(null), ...blank.flatMap((i) => pair(prompt.points[i])));
  $("steer-table").replaceChildren(el("thead", {}, head, sub),
    el("tbody", {}, unsteered, ...vectors.map((m) => vectorRow(m, width))), el("tbody", {}, promptHead, promptRow));
}

function csvOf(a) {
  const rows = [["method", "strength", "concept_score", "fluency"], ["unsteered", 0, a.unsteered.concept_score, a.unsteered.fluency]];
  for (const m of a.methods) for (const p of m.points) rows.push([m.method, p.strength, p.concept_score, p.fluency]);
  return rows.map((r) => r.join(",")).join("\n");
}

function genCell(p, i) {
  return el("td", {}, el("span", { class: "cont", text: p.generations[i].replace(/\n/g, "↵\n") }),
    el("span", { class: "score", text: `${pct(p.concept_scores[i])} · ${decimal(p.losses[i], 2)} nats` }));
}

// Each prompt continued by each method at the chosen strength and prefix size, beside the unsteered
// (a line break shown as ↵: for verse or prose it is the very thing the judge reads).
function renderGenerations() {
  const a = shown;
  const at = Number($("steer-at").value);
  const k = Number($("steer-k").value);
  const prompt = promptOf(a);
  const cols = [["unsteered", a.unsteered], ...vectorsOf(a).filter((m) => m.available).map((m) => [`${m.title} × ${m.points[at].strength}`, m.points[at]]),
    [`${prompt.title}, k = ${prompt.points[k].strength}`, prompt.points[k]]];
  const head = el("tr", {}, el("th", { text: "prompt" }), ...cols.map(([t]) => el("th", { text: t })));
  const rows = a.prompts.map((text, i) => el("tr", {}, el("td", { class: "muted", text }), ...cols.map(([, p]) => genCell(p, i))));
  $("steer-gens").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  Object.assign($("steer-gens").dataset, { at: String(at), k: String(k) });
}

// The judge in words: a probe's hook point, or the model's own likelihood after each label's examples.
function judgeWords(j) {
  if (j.kind === "likelihood") return `the model's likelihood after ${j.prefix_tokens.join(" and ")} tokens of each label's examples`;
  return `a probe at ${j.hook_name} (layer ${j.layer}, ${j.pool} over the tokens)`;
}

function renderSummary(a) {
  const left = a.methods.filter((m) => !m.available).map((m) => ` ${m.title} left out: ${m.reason}.`).join("");
  $("steer-summary").textContent = `${a.description} Steering towards “${a.concept}” (labels: ${a.labels.join(", ")}) ` +
    `after block ${a.layer} (${a.hook_name}), where the stream's mean norm, strength 1, is ${decimal(a.stream_norm, 3)}; ` +
    `${a.prompts.length} prompts; SAE: ${a.sae ?? "none"}.${left} The judge: ${judgeWords(a.judge)}, held-out accuracy ` +
    `${pct(a.judge.accuracy)}. ${grouped(a.n_train)} training and ${grouped(a.n_test)} held-out examples. ${a.seconds.toFixed(1)} s.`;
  $("steer-method").textContent = a.method;
}

async function render(a) {
  shown = a;
  $("steer-result").hidden = false;
  renderSummary(a);
  renderTable(a);
  const csv = el("a", { id: "steer-csv", href: `data:text/csv;charset=utf-8,${encodeURIComponent(csvOf(a))}`, download: "steering.csv",
    text: "the table as CSV" });
  $("steer-method").append(" ", csv);
  const strengths = vectorsOf(a).find((m) => m.available).points;
  $("steer-at").replaceChildren(...strengths.map((p, i) => new Option(`× ${p.strength} the norm`, String(i))));
  $("steer-k").replaceChildren(...promptOf(a).points.map((p, i) => new Option(`k = ${p.strength}`, String(i))));
  $("steer-at").value = String(strengths.length - 1);
  renderGenerations();
  await drawCharts(a);
  $("steering-panel").dataset.state = "ready";
}

function busy(on) {
  $("steer-run").disabled = on;
  $("steer-cancel").disabled = !on || !going(job);
}

async function run(e) {
  e?.preventDefault();
  setNote($("steer-note"), "");
  ran = false;
  urlChanged();
  let body;
  try {
    body = requestBody();
  } catch (err) {
    setNote($("steer-note"), `Not run: ${err.message}`, "error");
    return;
  }
  $("steering-panel").dataset.state = "running";
  job = null;
  busy(true);
  await slot.now(async (signal) => {
    try {
      const answer = await runJob("/steering/jobs", body, signal, showJob, "steering job");
      ran = true;
      await render(answer);
    } catch (err) {
      if (isAbort(err)) return;
      setNote($("steer-note"), `${err instanceof ApiError ? "Not run" : "Stopped"}: ${err.message}`, "error");
      $("steering-panel").dataset.state = job?.status === "cancelled" ? "cancelled" : "error";
    } finally {
      if (!signal.aborted) busy(false);
    }
  });
  urlChanged();
}

async function cancel() {
  if (!going(job)) return;
  try {
    showJob(await apiPost(`/steering/jobs/${job.id}/cancel`, {}));
  } catch (err) {
    setNote($("steer-note"), `Could not cancel: ${err.message}`, "error");
  }
}

async function loadLabels() {
  try {
    const { tasks } = await apiGet("/finetune/tasks");
    taskLabels = Object.fromEntries(tasks.filter((t) => t.source === "builtin").map((t) => [t.name, t.labels]));
  } catch (err) {
    setNote($("steer-note"), `The tasks' labels did not load (${err.message}): the concept is the API's default.`);
  }
  fillConcepts();
}

// Marks the layers that have an SAE (GET /api/v1/saes): steering there adds the SAE feature method.
export function markSteeringLayers(saes) {
  const layers = new Set(saes.filter((s) => s.hook_name.endsWith("hook_resid_post")).map((s) => s.layer));
  for (const o of $("steer-layer").options) if (o.value !== "" && layers.has(Number(o.value))) o.textContent = `${o.value} (SAE)`;
}

// `onUrl`: the page writes its query (main.js's writeUrl, which asks steeringQuery for this panel's part).
export function initSteering({ onUrl }) {
  urlChanged = onUrl;
  const q = pageQuery();
  readUrl(q);
  addDownloads($("steer-score-plot"), "steering", () => shown);
  addDownloads($("steer-fluency-plot"), "steering-fluency", () => shown);
  const changed = () => { ran = false; urlChanged(); };
  $("steer-task").addEventListener("change", () => { $("steer-paste").hidden = $("steer-task").value !== "paste"; fillConcepts(); changed(); });
  $("steer-paste").addEventListener("change", () => { fillConcepts(); changed(); });
  for (const [, id] of FIELDS.slice(1)) $(id).addEventListener("change", changed);
  for (const id of ["steer-at", "steer-k"]) $(id).addEventListener("change", () => shown && renderGenerations());
  $("steer-form").addEventListener("submit", run);
  $("steer-cancel").addEventListener("click", cancel);
  $("steering-panel").dataset.state = "idle";
  fillConcepts();
  loadLabels().then(() => { if (q.get("steer") === "1") run(); });
}
