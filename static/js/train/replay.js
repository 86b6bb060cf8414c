// Panel 3 · Watch it learn: a slider over the shown run's snapshots; each frame is
// GET /api/v1/training/{id}/replay?step=S&text=... (attention, next-token candidates, a sample,
// the embedding projection). Frames are kept by (run, prompt, step), so sliding back is instant.
import { apiGet, debounced } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { decimal, pct, tokenLabels, visible } from "../lib/format.js";
import { squareHeatmap } from "../lib/heatmaps.js";
import { MONO, OKABE } from "../lib/palette.js";
import { draw } from "../lib/plot.js";
import * as runs from "./runs.js";

const frames = new Map(); // "run|text|step" -> Promise<frame>
const state = { run: null, steps: [], index: 0, text: "", frame: null, layer: 0, head: 0, playing: null, gen: 0 };
const PLAY_MS = 900;

const key = (run, text, step) => `${run}|${text}|${step}`;

function getFrame(run, text, step) {
  const k = key(run, text, step);
  if (!frames.has(k)) {
    const q = new URLSearchParams({ step: String(step), text });
    const p = apiGet(`/training/${run}/replay?${q}`);
    p.catch(() => frames.delete(k)); // a failed frame may be asked again
    frames.set(k, p);
  }
  return frames.get(k);
}

function stepLabel(i) {
  const s = state.steps[i];
  const run = runs.getRun(state.run);
  // a finished run took exactly body.step steps (a time budget's plan may have said one more)
  const total = run && (run.body.status === "done" ? run.body.step : run.body.total_steps);
  return total ? `step ${s} of ${total}` : `step ${s}`;
}

// "compare this snapshot with the final model": /compare with a = the snapshot on the slider and
// b = the run's final checkpoint; only once the run is done (a running or cancelled run has none).
function snapshotName(run, step) {
  return `${run}/step-${String(step).padStart(6, "0")}`;
}

function updateCompareLink() {
  const link = $("replay-compare");
  const run = runs.getRun(state.run);
  const final = run && run.body.status === "done" ? run.body.checkpoint : null;
  const step = state.steps[state.index];
  if (!final || step === undefined) { link.hidden = true; link.removeAttribute("href"); return; }
  const a = snapshotName(state.run, step);
  link.href = `/compare?${new URLSearchParams({ a, b: final })}`;
  link.dataset.a = a;
  link.dataset.b = final;
  link.title = step === run.body.step ? `the snapshot at step ${step} holds the final weights: the two sides will match`
    : `${a} (step ${step}) against ${final} (step ${run.body.step}) on one text, side by side`;
  link.hidden = false;
}

function drawTicks() {
  const ticks = $("replay-ticks");
  const n = state.steps.length;
  ticks.replaceChildren(...state.steps.map((s, i) => el("span", {
    class: "tick", style: `left: calc(${n > 1 ? (100 * i) / (n - 1) : 0}% )`, text: String(s),
  })));
}

function setSteps(steps) {
  const atEnd = state.index >= state.steps.length - 1 && state.steps.length > 0;
  const current = state.steps[state.index];
  state.steps = steps;
  const slider = $("replay-step");
  slider.max = String(Math.max(0, steps.length - 1));
  // stay on the same snapshot; one who was watching the newest follows the newest
  let i = steps.indexOf(current);
  if (i < 0 || (atEnd && state.playing === null)) i = current === undefined ? 0 : steps.length - 1;
  state.index = Math.max(0, i);
  slider.value = String(state.index);
  $("replay-step-label").textContent = steps.length ? stepLabel(state.index) : "";
  drawTicks();
  updateCompareLink();
}

function fillSelect(sel, n, value, word) {
  if (sel.options.length !== n) {
    sel.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", { value: i, text: `${word} ${i}` })));
  }
  sel.value = String(Math.min(value, n - 1));
  return +sel.value;
}

function drawAttention(f) {
  const a = f.forward.attention;
  state.layer = fillSelect($("replay-layer"), a.pattern.length, state.layer, "layer");
  state.head = fillSelect($("replay-head"), a.pattern[state.layer].length, state.head, "head");
  const labels = tokenLabels(f.forward.tokens);
  // a run trained without the mask (the causal-mask experiment) reads later tokens too: its frame says so
  const mask = f.forward.causal === false ? " · no causal mask" : "";
  squareHeatmap($("replay-attn"), a.pattern[state.layer][state.head], labels, {
    title: `layer ${a.layers[state.layer]}, head ${a.heads[state.head]} · step ${f.step}${mask}`,
    hoverName: "attention weight", colorTitle: "weight", xTitle: "looks at (key)", yTitle: "token (query)",
    maxSide: 380, cell: 22, name: `attention-step-${f.step}`, causalMask: f.forward.causal !== false,
  });
}

function drawNext(f) {
  const cands = f.forward.next_token.slice(0, 10).reverse();
  const last = f.forward.tokens[f.forward.tokens.length - 1];
  draw($("replay-next"), [{
    type: "bar", orientation: "h", x: cands.map((c) => c.prob), y: cands.map((_c, i) => i),
    marker: { color: OKABE.blue }, text: cands.map((c) => pct(c.prob)), textposition: "outside", cliponaxis: false,
    customdata: cands.map((c) => [visible(c.text), c.id, c.logit]),
    hovertemplate: "“%{customdata[0]}” (id %{customdata[1]})<br>probability %{x:.4f}<br>logit %{customdata[2]:.3f}<extra></extra>",
  }], {
    height: 380, title: { text: `next token after “${visible(last.text)}” · step ${f.step}`, x: 0, xanchor: "left", font: { size: 13 } },
    xaxis: { title: { text: "probability" }, range: [0, 1.1], tickformat: ".0%" },
    yaxis: { tickmode: "array", tickvals: cands.map((_c, i) => i), ticktext: cands.map((c) => `“${visible(c.text)}”`),
      tickfont: { family: MONO }, automargin: true },
    margin: { l: 20, r: 30, t: 40, b: 45 }, showlegend: false,
  }, `next-token-step-${f.step}`);
}

function drawSample(f) {
  const pre = $("replay-sample");
  pre.replaceChildren(el("span", { class: "prompt-part", text: state.text }), el("span", { class: "gen-part", text: f.sample }));
  pre.dataset.step = String(f.step);
}

function drawProjection(f) {
  const pts = f.projection.tokens;
  const inPrompt = new Set(f.forward.tokens.map((t) => t.id));
  const mine = pts.filter((p) => inPrompt.has(p.id));
  const rest = pts.filter((p) => !inPrompt.has(p.id));
  const ev = f.projection.explained_variance_ratio;
  const trace = (list, name, colour, size, text) => ({
    type: "scatter", mode: text ? "markers+text" : "markers", name, x: list.map((p) => p.x), y: list.map((p) => p.y),
    text: list.map((p) => visible(p.text)), textposition: "top center", textfont: { size: 11, color: OKABE.vermillion },
    marker: { color: colour, size, opacity: text ? 1 : 0.6 }, customdata: list.map((p) => p.id),
    hovertemplate: "“%{text}” (id %{customdata})<br>x %{x:.4f}<br>y %{y:.4f}<extra></extra>",
  });
  draw($("replay-proj"), [trace(rest, "other tokens", OKABE.blue, 5, false), trace(mine, "in the prompt", OKABE.orange, 9, true)], {
    height: 380, title: { text: `first ${pts.length} token ids · step ${f.step}`, x: 0, xanchor: "left", font: { size: 13 } },
    xaxis: { title: { text: `PC 1 (${pct(ev[0])} of the variance)` }, zeroline: false },
    yaxis: { title: { text: `PC 2 (${pct(ev[1])})` }, zeroline: false },
    legend: { orientation: "h", y: -0.2 }, margin: { l: 55, r: 10, t: 40, b: 60 },
  }, `embeddings-step-${f.step}`);
}

function drawFrame(f) {
  state.frame = f;
  const run = runs.getRun(f.run);
  const u = run ? run.body.uniform_loss : null;
  const loss = f.val_loss === null ? "no validation loss measured yet at this step"
    : `validation loss ${decimal(f.val_loss, 3)}${u !== null ? ` (uniform guess ${decimal(u, 3)})` : ""}`;
  $("replay-info").textContent = `Run ${f.run}, snapshot at step ${f.step}: ${loss}.`;
  drawAttention(f);
  drawNext(f);
  drawSample(f);
  drawProjection(f);
  $("replay-panel").dataset.step = String(f.step);
  $("replay-panel").dataset.run = f.run;
}

async function showIndex(i) {
  if (!state.steps.length) return;
  state.index = Math.max(0, Math.min(i, state.steps.length - 1));
  $("replay-step").value = String(state.index);
  $("replay-step-label").textContent = stepLabel(state.index);
  updateCompareLink();
  const run = state.run;
  const text = state.text;
  const step = state.steps[state.index];
  $("replay-info").textContent = frames.has(key(run, text, step)) ? $("replay-info").textContent : `Loading step ${step}…`;
  try {
    const f = await getFrame(run, text, step);
    if (run === state.run && text === state.text && step === state.steps[state.index]) drawFrame(f);
  } catch (err) {
    if (run === state.run && step === state.steps[state.index]) $("replay-info").textContent = `Could not replay step ${step}: ${err.message}`;
  }
  prefetch();
}

// After the frame in view, fetch the other snapshots one at a time so sliding is instant.
async function prefetch() {
  const gen = ++state.gen;
  const { run, text } = state;
  for (const step of state.steps.slice()) {
    if (gen !== state.gen) return; // the run, the prompt or the snapshots changed: a newer loop took over
    if (frames.has(key(run, text, step))) continue;
    try { await getFrame(run, text, step); } catch { return; }
  }
}

function stop() {
  if (state.playing !== null) clearTimeout(state.playing);
  state.playing = null;
  $("replay-play").textContent = "▶ Play";
}

function play() {
  if (state.playing !== null) { stop(); return; }
  $("replay-play").textContent = "❚❚ Pause";
  let i = state.index >= state.steps.length - 1 ? 0 : state.index;
  const tick = async () => {
    await showIndex(i);
    if (state.playing === null) return;
    i += 1;
    if (i >= state.steps.length) { stop(); return; }
    state.playing = setTimeout(tick, PLAY_MS);
  };
  state.playing = 0;
  tick();
}

function onRun(run) {
  if (!run || run !== runs.shownRun() || !panelShown("replay")) return;
  const steps = run.body.snapshots;
  const changedRun = state.run !== run.id;
  if (changedRun) { stop(); state.gen++; state.run = run.id; state.steps = []; state.index = 0; }
  $("replay-empty").hidden = steps.length > 0;
  $("replay-body").hidden = steps.length === 0;
  if (!steps.length) return;
  updateCompareLink();   // the run may just have finished
  if (!changedRun && steps.join() === state.steps.join()) return;
  const before = state.steps[state.index];
  setSteps(steps);
  if (changedRun || state.steps[state.index] !== before) showIndex(state.index);
  else prefetch();
}

export function init() {
  state.text = $("replay-text").value;
  // each figure with the part of its frame (GET /training/{id}/replay at that snapshot) it draws
  const part = (pick) => () => state.frame && { run: state.frame.run, step: state.frame.step, ...pick(state.frame) };
  addDownloads($("replay-attn"), "attention-at-snapshot", part((f) => ({ tokens: f.forward.tokens, attention: f.forward.attention })));
  addDownloads($("replay-next"), "next-token-at-snapshot", part((f) => ({ tokens: f.forward.tokens, next_token: f.forward.next_token })));
  addDownloads($("replay-proj"), "embeddings-at-snapshot", part((f) => ({ tokens: f.forward.tokens, projection: f.projection })));
  runs.on("run-update", onRun);
  runs.on("run-shown", ({ id }) => {
    if (id !== state.run) { $("replay-body").hidden = true; $("replay-empty").hidden = false; $("replay-compare").hidden = true; }
  });
  $("replay-step").addEventListener("input", (e) => { stop(); showIndex(+e.target.value); });
  $("replay-layer").addEventListener("change", (e) => { state.layer = +e.target.value; state.head = 0; if (state.frame) drawAttention(state.frame); });
  $("replay-head").addEventListener("change", (e) => { state.head = +e.target.value; if (state.frame) drawAttention(state.frame); });
  $("replay-play").addEventListener("click", play);
  const retype = debounced(() => {
    const t = $("replay-text").value;
    if (!t.trim() || t === state.text) return;
    state.text = t;
    showIndex(state.index);
  }, 400);
  $("replay-text").addEventListener("input", () => retype());
}
