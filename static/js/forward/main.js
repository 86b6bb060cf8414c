// The forward-pass page: one POST /api/v1/forward per prompt or selection change (debounced; a
// newer request aborts the stale one), asking only for the parts that change; each stage panel
// draws its parts (the PANELS table below). The URL carries the prompt and every setting, so a
// view can be shared.
// Which parts there are comes from GET /api/v1/forward/parts: the ones the loaded model has (mlp or
// moe, rope only for a RoPE model, classifier only for a fine-tuned classifier) and, for each, the
// selection fields whose change makes it stale. Head roles (panel_heads, GET /api/v1/heads) load
// after each new prompt's trace.
import { apiGet, apiPost, isAbort, latest, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { tokenLabels } from "../lib/format.js";
import { pageQuery, real, setPageQuery, whole } from "../lib/query.js";
import { stageNavigation } from "../lib/stages.js";
import { findTextFact, textFactBlock } from "../lib/text_facts.js";
import { panel as overview } from "./panel_overview.js";
import { allStages, closeStage, initStageView, openSection, openThis } from "./stage_view.js";
import { panel as classifier } from "./panel_classifier.js";
import { panel as tokens } from "./panel_embeddings.js";
import { panel as embeddingSpace } from "./panel_embedding_space.js";
import { panel as block } from "./panel_block.js";
import { panel as rope } from "./panel_rope.js";
import { panel as attention, setAttentionSelection } from "./panel_attention_overview.js";
import { panel as heads } from "./panel_heads.js";
import { panel as mlp } from "./panel_mlp.js";
import { panel as moe } from "./panel_moe.js";
import { panel as streamExtras } from "./panel_stream_extras.js";
import { panel as switches } from "./panel_switches.js";
import { panel as residual } from "./panel_residual.js";
import { panel as sampling } from "./panel_sampling.js";
import { panel as generate } from "./panel_generate.js";
import { panel as intervene } from "./panel_intervene.js";
import { panel as decomposition } from "./panel_decomposition.js";
import { panel as sae } from "./panel_sae.js";
import { panel as inputs, readInputs, writeInputs } from "./panel_inputs.js";

// The page's panels, in its order (server/pages.py: STAGES). Each panel_*.js exports the same shape:
//   { stage, parts, init(page), render(trace, view), position(sel) }
//   stage:     the section it draws in (#<stage>-panel; a stage may have more than one panel)
//   parts:     the trace's parts it draws (server/explain/parts.py: PARTS; none: it fetches its own)
//   init:      once, with `page` below (the shared state and the page's actions); may be async
//   render:    after every answer; view = { parts (the ones the answer carries), promptChanged,
//              text (the prompt box's), prompt (the request's fields: promptFields), sel, labels, state }
//   position:  (optional) the selected position moved (sel): drawn at once from what is already here
//   layer:     (optional) the selected layer or head changed (drawn at once; the parts it makes stale follow)
const PANELS = [overview, classifier, tokens, embeddingSpace, block, rope, switches, attention, heads, mlp, moe, streamExtras, residual,
  sampling, generate, intervene, decomposition, inputs, sae];

// The loaded model's key/value heads, as /health's info says (the page shell writes it into #prompt-panel).
const N_KV_HEAD = +document.getElementById("prompt-panel").dataset.nKvHead || 0;
// The parts this model has, in the registry's order, and what a selection change makes stale
// (everything else stays as it is): both filled from GET /api/v1/forward/parts by init().
let ALL_PARTS = [];
let DEPENDS = { layer: [], head: [], position: [], target: [] };

async function loadParts() {
  const { parts } = await apiGet("/forward/parts");
  const mine = parts.filter((p) => p.applies);
  ALL_PARTS = mine.map((p) => p.name);
  DEPENDS = Object.fromEntries(Object.keys(DEPENDS).map((k) => [k, mine.filter((p) => p.stale_on.includes(k)).map((p) => p.name)]));
}

const state = {
  layer: 0, head: 0, position: null, target: null, feature: 0,
  temperature: 1, top_k: null, top_p: null, seed: 0, steps: 0,
  heads: [], mlps: [], edits: [],
  sae: null, steer: null,   // the features stage's SAE (null: the served model's first); stage 8's steering
  lens: null,               // stage 6's tuned lens on show, by name (null: the logit lens)
  inputs: null,             // the inputs stage's settings (panel_inputs.js reads and writes their URL)
  testHead: null,           // stage 4: { layer, head, role } open on the repeated-token test input
  stage: null,              // the stage open under the overview (stage_view.js); "all": every stage, stacked
  walk: null,               // the walk's step on show (1-based; walk.js), null: closed
};
let trace = null;        // the merged trace of the prompt on show
let shownText = null;    // the prompt that trace belongs to (its request fields, as JSON: promptFields)
let labels = [];

// --- URL ------------------------------------------------------------------------------------

function readUrl() {
  const q = pageQuery();
  if (q.has("text")) $("prompt").value = q.get("text");
  if ($("chat")) $("chat").checked = q.get("chat") === "1";
  if ($("bos")) $("bos").checked = q.get("bos") !== "0";
  const shape = $("prompt-panel").dataset;   // the loaded model's shape, as /api/v1/health reports it
  state.layer = Math.min(whole(q.get("layer"), 0), Math.max(0, (+shape.nLayer || 1) - 1));
  state.head = Math.min(whole(q.get("head"), 0), Math.max(0, (+shape.nHead || 1) - 1));
  state.position = whole(q.get("position"));
  state.target = whole(q.get("target"));
  state.feature = whole(q.get("feature"), 0);
  // within the sliders' ranges (the API accepts more; the page shows what its sliders can reach)
  const t = real(q.get("temperature"), 1);
  state.temperature = t >= 0.05 && t <= 3 ? t : 1;
  const k = whole(q.get("top_k"));
  state.top_k = k ? Math.min(k, 100) : null;
  const p = real(q.get("top_p"));
  state.top_p = p !== null && p > 0 && p < 1 ? p : null;
  state.seed = whole(q.get("seed"), 0);
  state.steps = Math.min(whole(q.get("steps"), 0), 64);
  state.sae = q.get("sae") || q.get("steer_sae") || null;
  state.lens = q.get("lens") || null;
  state.inputs = readInputs(q);
  const sf = whole(q.get("steer_feature"));
  state.steer = sf === null ? null : { feature: sf, scale: real(q.get("steer_scale"), 20) };
  for (const item of (q.get("ablate") || "").split(",").filter(Boolean)) {
    const m = /^L(\d+)H(\d+)$/.exec(item);
    const mm = /^MLP(\d+)$/.exec(item);
    if (m) state.heads.push([+m[1], +m[2]]);
    else if (mm) state.mlps.push(+mm[1]);
  }
  const th = /^(\d+)\.(\d+):([a-z-]+)$/.exec(q.get("test_head") || "");
  state.testHead = th ? { layer: +th[1], head: +th[2], role: th[3] } : null;
  for (const item of (q.get("edit") || "").split(",").filter(Boolean)) {
    const m = /^(\d+):(\d+)$/.exec(item);
    if (m) state.edits.push([+m[1], +m[2], null]);
  }
  const stage = q.get("stage");
  state.stage = stage === "all" || document.getElementById(`${stage}-panel`)?.classList.contains("stage") ? stage : null;
  state.walk = whole(q.get("walk")) || null;
}

// Only settings that differ from the defaults are written, so a plain view stays a short URL.
function writeUrl() {
  const q = new URLSearchParams({ text: $("prompt").value, layer: state.layer, head: state.head });
  if ($("chat")?.checked) q.set("chat", "1");
  if ($("bos") && !$("bos").checked) q.set("bos", "0");
  if (state.position !== null) q.set("position", state.position);
  if (state.target !== null) q.set("target", state.target);
  if (state.feature) q.set("feature", state.feature);
  if (state.temperature !== 1) q.set("temperature", state.temperature);
  if (state.top_k !== null) q.set("top_k", state.top_k);
  if (state.top_p !== null) q.set("top_p", state.top_p);
  if (state.seed) q.set("seed", state.seed);
  if (state.steps) q.set("steps", state.steps);
  if (state.sae) q.set("sae", state.sae);
  if (state.lens) q.set("lens", state.lens);
  writeInputs(q, state.inputs);
  if (state.steer) { q.set("steer_feature", state.steer.feature); q.set("steer_scale", state.steer.scale); }
  const ablate = [...state.heads.map(([l, h]) => `L${l}H${h}`), ...state.mlps.map((l) => `MLP${l}`)];
  if (ablate.length) q.set("ablate", ablate.join(","));
  if (state.edits.length) q.set("edit", state.edits.map(([p, id]) => `${p}:${id}`).join(","));
  if (state.testHead) q.set("test_head", `${state.testHead.layer}.${state.testHead.head}:${state.testHead.role}`);
  if (state.stage) q.set("stage", state.stage);
  if (state.walk) q.set("walk", state.walk);
  setPageQuery(q);
}

// --- the prompt ---------------------------------------------------------------------------------

// The prompt as the API takes it: the text, or (#chat ticked: a model with a chat template) its lines as
// messages, which the model's template renders; and the BOS switch (#bos unticked: no beginning-of-text
// token, where the model's tokenizer adds one).
function promptFields() {
  const text = $("prompt").value;
  const fields = $("chat")?.checked ? { messages: chatMessages(text) } : { text };
  if ($("bos") && !$("bos").checked) fields.bos = false;
  return fields;
}

// The BOS switch's note (a model whose tokenizer adds a start token): what that token stands for, in the
// texts' words, from GET /api/v1/genealogy/texts (its fact bos_empty_prefix), asked for once.
function showBosFact() {
  const box = $("bos-fact");
  if (!box) return;
  apiGet("/genealogy/texts").then((res) => {
    const fact = findTextFact(res.facts, "bos_empty_prefix");
    if (fact) box.replaceChildren(textFactBlock(fact, "bos-fact-block"));
  }, showError);
}

// "user: hi" starts a message of that role; a line without a role continues the message before it.
function chatMessages(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const m = /^(system|user|assistant):\s?(.*)$/i.exec(line);
    if (m) out.push({ role: m[1].toLowerCase(), content: m[2] });
    else if (out.length) out[out.length - 1].content += `\n${line}`;
    else if (line) out.push({ role: "user", content: line });
  }
  return out;
}

// --- the one /forward request ---------------------------------------------------------------

let pending = new Set();
let inflight = null;     // { parts } of the request in flight
const forwardSlot = latest();

function requestForward(parts, ms = 250) {
  for (const p of parts) pending.add(p);
  forwardSlot.soon(runForward, ms);
}

// `signal` is aborted by the next request: a stale answer never replaces a newer one.
async function runForward(signal) {
  if (inflight) for (const p of inflight.parts) pending.add(p);   // it was just aborted: keep what it was asked for
  inflight = null;
  if (!$("prompt").value) return;
  const prompt = promptFields();
  const text = JSON.stringify(prompt);   // the prompt's identity: a new one (or a switch flipped) is a new trace
  const parts = text !== shownText ? ALL_PARTS : ALL_PARTS.filter((p) => pending.has(p));
  pending = new Set();
  if (!parts.length) return;
  const mine = { parts };
  inflight = mine;
  const body = { ...prompt, include: parts, layer: state.layer, head: state.head, top_k: 10 };
  if (state.position !== null) body.position = state.position;
  if (state.target !== null) body.target = state.target;
  if (state.sae) body.sae = state.sae;
  if (state.lens) body.lens = state.lens;
  try {
    const res = await apiPost("/forward", body, signal);
    if (inflight === mine) inflight = null;
    showError(null);
    apply(res, parts, text, prompt);
  } catch (err) {
    if (isAbort(err)) return;
    if (inflight === mine) inflight = null;
    showError(err);
  }
}

function fillSelect(sel, options, value) {
  const same = sel.options.length === options.length && options.every(([v, t], i) => sel.options[i].value === v && sel.options[i].text === t);
  if (!same) sel.replaceChildren(...options.map(([v, t]) => new Option(t, v)));
  sel.value = String(value);
}

function selectedPosition() {
  return trace ? trace.position : 0;
}

function apply(res, parts, text, prompt) {
  const promptChanged = text !== shownText;
  if (promptChanged || !trace) trace = res;
  else {
    for (const p of parts) trace[p] = res[p];
    trace.position = res.position;
    trace.causal = res.causal;
  }
  shownText = text;
  labels = tokenLabels(trace.tokens);
  const T = trace.tokens.length;
  state.layer = Math.min(state.layer, trace.n_layer - 1);
  state.head = Math.min(state.head, trace.n_head - 1);
  const range = (n) => Array.from({ length: n }, (_, i) => [String(i), String(i)]);
  fillSelect($("layer"), range(trace.n_layer), state.layer);
  fillSelect($("head"), range(trace.n_head), state.head);
  fillSelect($("position"), labels.map((t, i) => [String(i), `${i}: ${t}${i === T - 1 ? " (last)" : ""}`]), trace.position);
  const sel = { layer: state.layer, head: state.head, position: trace.position };
  const view = { parts, promptChanged, text: $("prompt").value, prompt, sel, labels, state };
  showChatText(trace.chat_text);
  for (const p of PANELS) p.render?.(trace, view);
  markPosition();
  writeUrl();
  document.body.dataset.ready = "1";
  document.body.dataset.parts = parts.join(",");
}

// A chat's text as the model's template wrote it (its special tokens are the token strip's grey ones).
function showChatText(chat) {
  const box = $("chat-text");
  if (!box) return;
  box.hidden = !chat;
  box.textContent = chat || "";
}

// --- selection --------------------------------------------------------------------------------

function markPosition() {
  const p = selectedPosition();
  for (const s of document.querySelectorAll("#tokens .tok")) s.classList.toggle("sel", +s.dataset.index === p);
}

function selectHead(layer, head) {
  const layerChanged = layer !== state.layer;
  state.layer = layer;
  state.head = head;
  $("layer").value = String(layer);
  $("head").value = String(head);
  if (trace) setAttentionSelection({ layer, head, position: selectedPosition() });
  for (const p of PANELS) p.layer?.({ layer, head });
  writeUrl();
  requestForward(layerChanged ? [...DEPENDS.layer, ...DEPENDS.head] : DEPENDS.head, 120);
}

function selectPosition(p) {
  if (!trace) return;
  const T = trace.tokens.length;
  p = Math.max(0, Math.min(T - 1, p));
  state.position = p === T - 1 ? null : p;
  trace.position = p;               // drawn at once from what is already here; the rest follows
  $("position").value = String(p);
  markPosition();
  const sel = { layer: state.layer, head: state.head, position: p };
  for (const panel of PANELS) panel.position?.(sel);
  writeUrl();
  requestForward(DEPENDS.position, 120);
}

// --- wiring -----------------------------------------------------------------------------------

export async function init() {
  try {
    await loadParts();
  } catch (err) {
    showError(err);
    return;
  }
  readUrl();
  const page = {
    state, nKvHead: N_KV_HEAD, writeUrl, selectHead, selectPosition, requestForward,
    refresh: (field) => requestForward(DEPENDS[field], 0),   // what a change of that selection field makes stale
    prompt: promptFields,
    // a token added at the end of the prompt (the overview's "add a token"): a new trace, at its last position
    appendText: (text) => { $("prompt").value += text; state.position = null; state.target = null; requestForward(ALL_PARTS, 0); },
    // temperature / top-k / top-p, shared by the overview and the sampling stage: `from` says who moved them
    samplingListeners: [],
    setSampling: (s, from) => { Object.assign(state, s); writeUrl(); for (const f of page.samplingListeners) f(s, from); },
  };
  for (const p of PANELS) {
    try {
      await p.init?.(page);
    } catch (err) {
      showError(err);
    }
  }

  $("prompt-form").addEventListener("submit", (e) => { e.preventDefault(); requestForward(ALL_PARTS); });
  $("prompt").addEventListener("input", () => {
    state.position = null;   // a new prompt: follow its last token again
    state.target = null;
    requestForward(ALL_PARTS);
  });
  for (const id of ["chat", "bos"]) $(id)?.addEventListener("change", () => requestForward(ALL_PARTS, 0));
  showBosFact();
  $("layer").addEventListener("change", (e) => selectHead(+e.target.value, state.head));
  $("head").addEventListener("change", (e) => selectHead(state.layer, +e.target.value));
  $("position").addEventListener("change", (e) => selectPosition(+e.target.value));
  $("tokens").addEventListener("click", (e) => {
    const span = e.target.closest(".tok");
    if (span) selectPosition(+span.dataset.index);
  });
  initStageView(page);
  stageNavigation({ h: () => selectPosition(selectedPosition() - 1), l: () => selectPosition(selectedPosition() + 1),
    Escape: () => { if (document.body.dataset.openStage) closeStage(); } },
  { active: () => !allStages(), current: openSection, open: openThis });
  // (a classifier's default prompt, a test-half input framed by its special tokens, comes with the page)
  requestForward(ALL_PARTS, 0);
}
