// Stage 8: the generation stepper. Each "next token" is one POST /api/v1/generate/step with the ids
// so far, the step counter and the seed; the page keeps the responses so "step back" can pop one.
import { apiPost } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { pct, visible } from "../lib/format.js";
import { SEQ } from "../lib/palette.js";
import { SLANTED_TICK_PX, clearPlot, draw, tokenAxis } from "../lib/plot.js";
import { samplingSettings } from "./panel_sampling.js";

let prompt = [];        // the prompt's tokens [{id, text}]
let steps = [];         // GenerateStepResponse of each step so far
let seed = 0;
let getSettings = () => ({ temperature: 1, top_k: null, top_p: null });
let onSeed = null;
let onSteps = null;
let replay = 0;         // steps to redo once the prompt arrives (a shared URL with steps=N)
let steerSae = () => null;  // the SAE whose feature steers (stage 11's pick; null: the served model's first)
let onSteerChange = null;
let busy = false;
let replaying = false;  // redoing a shared URL's steps: the URL is written once, at the end

export function initGenerate({ seed: s = 0, steps: n = 0, settings, onSeedChange, onStepsChange, steer = {} } = {}) {
  seed = s;
  if (steer.sae) steerSae = steer.sae;
  onSteerChange = steer.onChange || null;
  if (steer.feature !== null && steer.feature !== undefined) $("steer-feature").value = String(steer.feature);
  if (steer.scale !== null && steer.scale !== undefined) $("steer-scale").value = String(steer.scale);
  for (const id of ["steer-feature", "steer-scale"]) {
    $(id).addEventListener("change", () => { if (onSteerChange) onSteerChange(steering()); });
  }
  replay = n;
  onSteps = onStepsChange || null;
  if (settings) getSettings = settings;
  onSeed = onSeedChange || null;
  $("seed").value = String(seed);
  $("seed").addEventListener("change", () => {
    const v = Math.max(0, Math.min(2147483647, Math.round(+$("seed").value || 0)));
    $("seed").value = String(v);
    seed = v;
    if (onSeed) onSeed(seed);
  });
  $("gen-next").addEventListener("click", step);
  $("gen-back").addEventListener("click", back);
  $("gen-reset").addEventListener("click", reset);
  addDownloads($("gen-attn-plot"), "generation-step", () => (steps.length ? steps[steps.length - 1] : null));
  render();
}

// The steering the next step sends: {sae, feature, scale}, or null when no feature is given.
function steering() {
  const raw = $("steer-feature").value.trim();
  if (raw === "") return null;
  const body = { feature: Math.max(0, Math.round(+raw)), scale: +$("steer-scale").value || 0 };
  const sae = steerSae();
  if (sae) body.sae = sae;
  return body;
}

export function setSteerFeature(f) {
  $("steer-feature").value = String(f);
  if (onSteerChange) onSteerChange(steering());
}

export async function setGeneratePrompt(tokens) {
  prompt = tokens.map((t) => ({ id: t.id, text: t.text }));
  steps = [];
  render();
  const n = replay;
  replay = 0;
  // same seed + settings: the same tokens again; the URL keeps its steps=N until the replay ends
  // (it would read 1, 2, ... meanwhile), and then says how many were redone
  replaying = n > 0;
  try {
    for (let i = 0; i < n && steps.length === i; i++) await step();
  } finally {
    replaying = false;
  }
  changedSteps();
}

function changedSteps() {
  if (onSteps && !replaying) onSteps(steps.length);
}

function ids() {
  return steps.length ? steps[steps.length - 1].ids : prompt.map((t) => t.id);
}

async function step() {
  if (busy || !prompt.length) return;
  busy = true;
  const panel = $("generate-panel");
  panel.dataset.state = "loading";
  $("gen-next").disabled = true;
  try {
    const steer = steering();
    const body = { ids: ids(), step: steps.length, seed, ...getSettings(), top: 10 };
    if (steer) body.steer = steer;
    const res = await apiPost("/generate/step", body);
    steps.push({ ...res, steered: steer });
    changedSteps();
    setNote($("gen-note"), "");
    panel.dataset.state = "ready";
  } catch (err) {
    setNote($("gen-note"), `Could not generate: ${err.message}`, "error");
    panel.dataset.state = "error";
  } finally {
    busy = false;
    render();
  }
}

function back() {
  if (busy || !steps.length) return;
  steps.pop();
  changedSteps();
  render();
}

function reset() {
  if (busy) return;
  steps = [];
  changedSteps();
  render();
}

function render() {
  const panel = $("generate-panel");
  $("gen-step").textContent = String(steps.length);
  $("gen-back").disabled = !steps.length;
  $("gen-reset").disabled = !steps.length;
  const nCtx = +($("prompt-panel").dataset.nCtx || Infinity);
  const full = ids().length > nCtx;      // the position table has no row for another token
  $("gen-next").disabled = busy || !prompt.length || full;
  if (full) setNote($("gen-note"), `The context window is full: this model has no position beyond n_ctx = ${nCtx}.`);
  $("gen-ids").textContent = `[${ids().join(", ")}]`;
  panel.dataset.steps = String(steps.length);
  panel.dataset.ids = JSON.stringify(ids());

  const text = $("gen-text");
  const spans = prompt.map((t) => el("span", { class: "tok prompt-tok", text: visible(t.text), title: `prompt · id ${t.id}` }));
  const gen = steps.map((s, i) => el("span", { class: `tok gen-tok${s.steered ? " steered" : ""}`, "data-id": s.token.id, text: visible(s.token.text),
    title: `step ${i} · id ${s.token.id} · probability ${pct(s.prob, 2)}${s.steered ? ` · steered: feature ${s.steered.feature} × ${s.steered.scale}` : ""}` }));
  text.replaceChildren(...spans, ...gen);

  const last = steps[steps.length - 1];
  $("gen-cache").innerHTML = last
    ? `KV cache after step ${last.step}: ${last.cache.layers} layers × 2 (K and V) × ${last.cache.positions} positions × ` +
      `${last.cache.kv_heads} key/value heads × ${last.cache.d_head} numbers per head → ` +
      `<b>${last.cache.numbers.toLocaleString()}</b> numbers ` +
      (last.cache.kv_heads < last.cache.n_head
        ? `(grouped-query attention: its ${last.cache.n_head} query heads share ${last.cache.kv_heads} key/value heads; ` +
          `${last.cache.bytes_float32.toLocaleString()} bytes as float32). `
        : `(${last.cache.bytes_float32.toLocaleString()} bytes as float32). `) +
      `This step computed 1 new position; ` +
      `the other ${last.prefill_tokens} came from the cache.`
    : "Press “Next token” to sample the first token after the prompt.";

  const head = el("tr", {}, ...["step", "token", "id", "probability", "top alternatives (after filtering)"].map((h) => el("th", { text: h })));
  $("gen-steps").replaceChildren(el("thead", {}, head), el("tbody", {}, ...steps.map((s) => el("tr", {},
    el("td", { class: "num", text: String(s.step) }),
    el("td", { class: "mono", text: `“${visible(s.token.text)}”` }),
    el("td", { class: "num", text: String(s.token.id) }),
    el("td", { class: "num", text: pct(s.prob, 2) }),
    el("td", { class: "mono small", text: s.candidates.slice(0, 5).map((c) => `“${visible(c.text)}” ${pct(c.prob)}`).join("  ") })))));
  $("gen-steps").hidden = !steps.length;
  drawAttention(last);
}

function drawAttention(last) {
  const gd = $("gen-attn-plot");
  if (!last) { clearPlot(gd); $("gen-attn-box").hidden = true; return; }
  $("gen-attn-box").hidden = false;
  const keyIds = last.ids.slice(0, -1);   // the query is the newest input id; it reads all of them
  const allTexts = [...prompt.map((t) => t.text), ...steps.map((s) => s.token.text)];
  const keys = keyIds.map((_, i) => visible(allTexts[i] ?? "?"));
  const rows = [];
  const names = [];
  last.attention.forEach((layer, l) => { layer.forEach((w, h) => { rows.push(w); names.push(`L${l} H${h}`); }); });
  const width = gd.clientWidth || 1000;
  // one row per head: 18 px each for a few dozen heads; for more (GPT-2 small has 144) 7 px each,
  // labelled once per layer with a line between layers; the hover names every row
  const nH = last.attention.length ? last.attention[0].length : 1;
  const many = rows.length > 48;
  const rowPx = many ? 7 : 18;
  const firsts = names.map((_, i) => i).filter((i) => !many || i % nH === 0);
  draw(gd, [{
    type: "heatmap", z: rows, x: keys.map((_, i) => i), y: names.map((_, i) => i), colorscale: SEQ, zmin: 0, zmax: 1,
    colorbar: { title: { text: "weight" }, thickness: 10 },
    customdata: names.map((n) => keys.map((k) => [n, k])),
    hovertemplate: "%{customdata[0]}<br>reads position %{x} “%{customdata[1]}”<br>weight %{z}<extra></extra>",
  }], {
    height: (many ? 160 : 120) + rowPx * rows.length,
    title: { text: `step ${last.step}: the query is “${keys[keys.length - 1] ?? ""}” (position ${keyIds.length - 1}); cache holds ${last.cache.positions} positions`,
      x: 0, xanchor: "left", font: { size: 12 } },
    xaxis: { ...tokenAxis(keys, width - 200, {}, SLANTED_TICK_PX), tickangle: -60, title: { text: "cached position" } },
    yaxis: { tickmode: "array", tickvals: firsts, ticktext: firsts.map((i) => (many ? names[i].split(" ")[0] : names[i])),
      autorange: "reversed", tickfont: { size: 10 }, automargin: true, title: { text: many ? "layer (one row per head)" : "" } },
    shapes: many ? firsts.slice(1).map((i) => ({ type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: i - 0.5, y1: i - 0.5,
      line: { color: "#fff", width: 1 } })) : [],
    margin: { l: 10, r: 10, t: 40, b: 10 },
  }, "generation-step");
}

// Stage 8, for main.js's table: its own POST /api/v1/generate answers (steered with stage 11's SAE).
export const panel = {
  stage: "generate",
  parts: [],
  init: ({ state, writeUrl }) => initGenerate({ seed: state.seed, steps: state.steps, settings: samplingSettings,
    onSeedChange: (s) => { state.seed = s; writeUrl(); },
    onStepsChange: (n) => { state.steps = n; writeUrl(); },
    steer: { ...(state.steer || {}), sae: () => state.sae, onChange: (s) => { state.steer = s && { feature: s.feature, scale: s.scale }; writeUrl(); } } }),
  render: (trace, view) => { if (view.promptChanged) setGeneratePrompt(trace.tokens); },
};
