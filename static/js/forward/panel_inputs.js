// The inputs stage (token attribution): which input tokens a prediction came from. Integrated gradients on the
// input embeddings, with gradient × input, occlusion and attention rollout beside it, the prompt's
// tokens coloured by the method picked (hover: every method's number), IG's completeness check, and
// at every position a matrix (one row per prediction).
// Data: POST /api/v1/token-attribution/jobs (the same answer as POST /api/v1/token-attribution, as a
// job with its progress); the target and contrast choices are the trace's next_token candidates, or a
// typed token (POST /api/v1/tokenize).
import { apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, int, pct, visible } from "../lib/format.js";
import { runJob, showProgress } from "../lib/jobs.js";
import { whole } from "../lib/query.js";
import { snapshotSvg } from "../lib/snapshot_svg.js";
import { DIVERGING, MONO, divColour, inkOn } from "../lib/palette.js";
import { clearPlot, draw, rowBox, signedLimit, tokenAxis } from "../lib/plot.js";

// On a model up to this size the attribution runs as soon as the stage comes near; on a larger one
// (every point of the path is a forward and backward pass of the prompt: minutes of work) it waits for
// the reader's "run it".
const AUTO_RUN_PARAMS = 20e6;
const METHODS = { integrated_gradients: "integrated gradients", gradient_x_input: "gradient × input", occlusion: "occlusion", rollout: "attention rollout" };
// baseline null: the model's own (zero with a learned position embedding, else mean; the answer says why)
const DEFAULTS = { target: null, contrast: null, steps: 32, baseline: null, method: "integrated_gradients", every: false };
const BASELINES = ["zero", "mean"];

let page = null;
let cfg = { ...DEFAULTS };
let text = "";
let tokens = [];
let position = 0;
let result = null;       // the last answer
let asked = "";          // the request it answers, as JSON (a new one is needed when it differs)
let auto = true;         // whether it runs without the reader's "run it" (a small model)
let candidates = [];     // the next-token candidates at the selected position (the trace's next_token)
const known = new Map(); // token id -> text, of targets and contrasts typed or answered
const slot = latest();

// The settings in the page's URL (ig_*), only those that differ from the defaults.
export function readInputs(q) {
  const steps = whole(q.get("ig_steps"), 32);
  return {
    target: whole(q.get("ig_target")), contrast: whole(q.get("ig_contrast")),
    steps: steps >= 1 && steps <= 1024 ? steps : 32,
    baseline: BASELINES.includes(q.get("ig_baseline")) ? q.get("ig_baseline") : null,
    method: q.get("ig_method") in METHODS ? q.get("ig_method") : "integrated_gradients",
    every: q.get("ig_every") === "1",
  };
}

export function writeInputs(q, a) {
  if (!a) return;
  if (a.target !== null) q.set("ig_target", a.target);
  if (a.contrast !== null) q.set("ig_contrast", a.contrast);
  if (a.steps !== 32) q.set("ig_steps", a.steps);
  if (a.baseline !== null) q.set("ig_baseline", a.baseline);
  if (a.method !== "integrated_gradients") q.set("ig_method", a.method);
  if (a.every) q.set("ig_every", "1");
}

function initInputs(p) {
  page = p;
  cfg = { ...DEFAULTS, ...(p.state.inputs || {}) };
  p.state.inputs = cfg;
  $("ta-method").value = cfg.method;
  if (!$("ta-baseline").querySelector('option[value=""]')) $("ta-baseline").prepend(el("option", { value: "" }, "the model's default"));
  $("ta-baseline").value = cfg.baseline ?? "";
  $("ta-steps").value = String(cfg.steps);
  $("ta-every").checked = cfg.every;
  const changed = (key, value) => { cfg[key] = value; page.writeUrl(); refresh(); };
  $("ta-target").addEventListener("change", (e) => changed("target", e.target.value === "" ? null : +e.target.value));
  $("ta-contrast").addEventListener("change", (e) => changed("contrast", e.target.value === "" ? null : +e.target.value));
  $("ta-baseline").addEventListener("change", (e) => changed("baseline", e.target.value || null));
  $("ta-every").addEventListener("change", (e) => changed("every", e.target.checked));
  $("ta-steps").addEventListener("change", (e) => {
    const n = whole(e.target.value);
    if (n !== null && n >= 1 && n <= 1024) changed("steps", n);
    else e.target.value = String(cfg.steps);
  });
  $("ta-method").addEventListener("change", (e) => { cfg.method = e.target.value; page.writeUrl(); drawAll(); });
  const typed = (key) => async () => {
    const t = await oneToken($("ta-word").value);
    if (t) { known.set(t.id, t.text); changed(key, t.id); fillChoices(candidates); }
  };
  $("ta-word-target").addEventListener("click", typed("target"));
  $("ta-word-contrast").addEventListener("click", typed("contrast"));
  auto = +$("inputs-panel").dataset.params <= AUTO_RUN_PARAMS;
  $("ta-run").hidden = auto;
  $("ta-run").addEventListener("click", () => { asked = ""; refresh(true); });
  addDownloads($("ta-tokens"), "token-attribution", () => result, { svgEl: () => snapshotSvg($("ta-tokens")) });
  addDownloads($("ta-matrix-plot"), "token-attribution-matrix", () => result);
}

// A typed word as one token of the model (POST /api/v1/tokenize; most words are stored with their
// leading space, so " word" is tried too), or null with a note saying why not.
async function oneToken(word) {
  if (!word) return null;
  try {
    let res = await apiPost("/tokenize", { text: word, encoding: "model" });
    if (res.tokens.length !== 1 && !word.startsWith(" ")) {
      const spaced = await apiPost("/tokenize", { text: ` ${word}`, encoding: "model" });
      if (spaced.tokens.length === 1) res = spaced;
    }
    if (res.tokens.length === 1) { setNote($("ta-note"), ""); return res.tokens[0]; }
    setNote($("ta-note"), `“${word}” is ${res.tokens.length} tokens of this model; a target or a contrast is one token.`);
  } catch (err) {
    setNote($("ta-note"), err.message, "error");
  }
  return null;
}

// The target and contrast choices: the top prediction (or nothing) and the next-token candidates at
// the selected position, plus a chosen id that is not among them (named when it was typed or answered).
function fillChoices(list) {
  candidates = list || [];
  const fill = (sel, first, value) => {
    const opts = [new Option(first, "")];
    for (const c of candidates) opts.push(new Option(`“${visible(c.text)}” (id ${c.id})`, String(c.id)));
    if (value !== null && !candidates.some((c) => c.id === value)) {
      opts.push(new Option(known.has(value) ? `“${visible(known.get(value))}” (id ${value})` : `id ${value}`, String(value)));
    }
    sel.replaceChildren(...opts);
    sel.value = value === null ? "" : String(value);
  };
  fill($("ta-target"), "the top prediction", cfg.target);
  fill($("ta-contrast"), "nothing (the logit alone)", cfg.contrast);
}

// The trace's own token ids (its BOS, a chat's template tokens): the positions are the forward page's.
function body() {
  const b = { ids: tokens.map((t) => t.id), steps: cfg.steps };
  if (cfg.baseline !== null) b.baseline = cfg.baseline;
  if (cfg.every) b.every_position = true;
  else b.position = position;
  if (cfg.target !== null) b.target = cfg.target;
  if (cfg.contrast !== null) b.contrast = cfg.contrast;
  return b;
}

// Ask again only when the request differs from the one answered; the fetch waits until the stage
// comes near the viewport (the drawing queue), so typing a prompt does not run it at every change.
function refresh(now = false) {
  if (!text || $("ta-refused")) return;   // a model whose input is more than W_E's rows (the template says why)
  const b = body();
  if (JSON.stringify(b) === asked && result) { drawAll(); return; }
  if (!auto && !now) {
    slot.cancel();
    result = null;
    for (const id of ["ta-tokens", "ta-stats", "ta-tag"]) $(id).replaceChildren();
    $("ta-matrix").hidden = true;
    setNote($("ta-note"), `This model has ${int(+$("inputs-panel").dataset.params)} parameters: the attribution ` +
      "is many forward and backward passes of the prompt, so it waits for “run it”.");
    return;
  }
  later("inputs-fetch", $("ta-tokens"), () => slot.soon((signal) => fetchAnswer(b, signal), 0));
}

async function fetchAnswer(b, signal) {
  const panel = $("inputs-panel");
  panel.dataset.state = "loading";
  try {
    // always the job form: on a large model even one position is minutes of work, which a job does a
    // batched pass at a time (other requests run between them) and a newer request cancels
    result = await runJob("/token-attribution/jobs", b, signal, (job) => showProgress(job, "runs"), "token attribution job");
    asked = JSON.stringify(b);
    for (const r of result.rows) for (const t of [r.target, r.contrast]) if (t) known.set(t.id, t.text);
    fillChoices(candidates);
    setNote($("ta-note"), "");
    drawAll();
    panel.dataset.state = "ready";
    panel.dataset.request = asked;
  } catch (err) {
    if (isAbort(err)) return;
    result = null;
    setNote($("ta-note"), `Could not attribute: ${err.message}`, "error");
    panel.dataset.state = "error";
  }
}

// The row on show: the selected position's (a matrix has one per position).
const shownRow = () => (result ? result.rows.find((r) => r.position === position) || result.rows[result.rows.length - 1] : null);

function drawAll() {
  const r = shownRow();
  if (!r) return;
  const f = r.contrast ? `logit(“${visible(r.target.text)}”) − logit(“${visible(r.contrast.text)}”)` : `the logit of “${visible(r.target.text)}”`;
  $("ta-tag").textContent = `${f} at position ${r.position}`;
  drawStats(r);
  drawTokens(r);
  $("ta-baseline-text").textContent = `Baseline: ${result.baseline_description} (${result.baseline_reason}). Integration: ${result.rule} (${result.steps} steps).`;
  $("ta-matrix").hidden = result.rows.length < 2;
  if (result.rows.length > 1) later("inputs", $("ta-matrix-plot"), drawMatrix);
  else clearPlot($("ta-matrix-plot"));
}

function drawStats(r) {
  const c = r.completeness;
  const rel = c.relative_error === null ? "—" : pct(c.relative_error, 3);
  const worst = result.rows.length > 1 ? [el("span", { class: "pill", id: "ta-worst", "data-value": result.worst_relative_error },
    `worst of ${result.rows.length} rows `, el("b", { text: pct(result.worst_relative_error, 3) }))] : [];
  $("ta-stats").replaceChildren(
    el("span", {}, `f(prompt) = ${decimal(r.f_input, 4)}, f(baseline) = ${decimal(r.f_baseline, 4)}. Completeness: `),
    el("span", { class: "pill", id: "ta-sum", "data-value": c.attribution_sum }, "integrated gradients add up to ", el("b", { text: decimal(c.attribution_sum, 4) })),
    el("span", { class: "pill", id: "ta-diff", "data-value": c.difference }, "f(prompt) − f(baseline) ", el("b", { text: decimal(c.difference, 4) })),
    el("span", { class: "pill", id: "ta-error", "data-value": c.error }, "error ", el("b", { text: decimal(c.error, 5) }), ` (${rel} of it)`),
    ...worst,
  );
}

function drawTokens(r) {
  const values = r[cfg.method];
  const lim = Math.max(1e-9, ...values.filter((v) => v !== null).map(Math.abs));
  const spans = tokens.map((t, i) => {
    const v = values[i];
    const tip = v === null ? `“${visible(t.text)}” (position ${i}): after position ${r.position}, which cannot read it`
      : `“${visible(t.text)}” (position ${i})\n${Object.entries(METHODS).map(([k, name]) => `${name}: ${decimal(r[k][i], 4)}`).join("\n")}`;
    const bg = v === null ? "#fff" : divColour(v, lim);
    return el("span", { class: `ta-tok${v === null ? " unread" : ""}${i === r.position ? " at" : ""}`, title: tip,
      "data-index": i, "data-value": v === null ? "" : v, style: `background:${bg};color:${inkOn(bg)}`, text: visible(t.text) });
  });
  $("ta-tokens").replaceChildren(...spans);
  $("ta-tokens").dataset.method = cfg.method;
  $("ta-tokens").dataset.position = String(r.position);
}

function drawMatrix() {
  const gd = $("ta-matrix-plot");
  const rows = result.rows;
  const z = rows.map((r) => r[cfg.method]);
  const lim = signedLimit(z);
  const labels = tokens.map((t) => visible(t.text));
  const width = gd.clientWidth || 900;
  draw(gd, [{
    type: "heatmap", z, x: labels.map((_, i) => i), y: rows.map((r) => r.position), colorscale: DIVERGING, zmin: -lim, zmax: lim,
    colorbar: { title: { text: METHODS[cfg.method] }, thickness: 10 }, hoverongaps: false,
    customdata: rows.map((r) => labels.map((t) => [t, visible(r.target.text), labels[r.position]])),
    hovertemplate: "prediction at position %{y} “%{customdata[2]}” (target “%{customdata[1]}”)<br>" +
      "input token %{x} “%{customdata[0]}”: %{z:.4f}<extra></extra>",
  }], {
    height: Math.min(900, 160 + 14 * rows.length),
    xaxis: { ...tokenAxis(labels, width - 200), tickangle: -60, title: { text: "input token" } },
    yaxis: { ...tokenAxis(rows.map((r) => labels[r.position]), Math.min(900, 14 * rows.length)), autorange: "reversed",
      title: { text: "the prediction at position" }, tickfont: { family: MONO } },
    shapes: [rowBox(rows.findIndex((r) => r.position === position), labels.length)],
    margin: { l: 10, r: 10, t: 10, b: 10 },
  }, "token-attribution");
}

export const panel = {
  stage: "inputs",
  parts: [],
  init: (p) => initInputs(p),
  render: (trace, view) => {
    if (view.promptChanged) { text = view.text; tokens = trace.tokens; result = null; asked = ""; }
    if (view.promptChanged || view.parts.includes("next_token")) fillChoices(trace.next_token);
    position = trace.position;
    refresh();
  },
  position: (sel) => { position = sel.position; if (cfg.every && result) drawAll(); else refresh(); },
};
