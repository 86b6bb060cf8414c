// Stage 9: interventions. Zero heads or MLPs, or swap prompt tokens, and compare the next-token
// distribution and the loss with the unaltered run: POST /api/v1/intervene (one request per change).
import { apiGet, apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct, visible } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { PROB_TICKS, draw } from "../lib/plot.js";

let shape = { n_layer: 0, n_head: 0 };
let prompt = null;   // the prompt as the API takes it: { text } or { messages }, and bos (main.js: promptFields)
let tokens = [];
let cfg = { heads: [], mlps: [], edits: [] };   // heads: [[l,h]], mlps: [l], edits: [[pos,id,text]]
let result = null;
let onChange = null;
const runSlot = latest();   // POST /intervene
const tokSlot = latest();   // naming the replacement token the reader types
let pendingId = null;

export function initIntervene(initial, { onConfigChange } = {}) {
  cfg = { heads: initial.heads || [], mlps: initial.mlps || [], edits: initial.edits || [] };
  onChange = onConfigChange || null;
  $("iv-text").addEventListener("input", () => { $("iv-id").value = ""; tokSlot.soon(tokenizeReplacement, 200); });
  $("iv-id").addEventListener("input", () => { $("iv-text").value = ""; tokSlot.soon(lookUpId, 200); });
  $("iv-pos").addEventListener("change", () => suggest());
  $("iv-add").addEventListener("click", () => {
    if (pendingId) addEdit(+$("iv-pos").value, pendingId.id, pendingId.text);
  });
  $("iv-clear").addEventListener("click", () => { cfg = { heads: [], mlps: [], edits: [] }; buildControls(); changed(); });
  addDownloads($("iv-plot"), "intervention", () => result);
}

function interveneConfig() {
  return { heads: cfg.heads.map((x) => [...x]), mlps: [...cfg.mlps], edits: cfg.edits.map((x) => [...x]) };
}

// A new trace: model shape and prompt tokens. Edits are dropped when the prompt itself changed.
export function setInterveneTrace(trace, newPrompt) {
  shape = { n_layer: trace.n_layer, n_head: trace.n_head };
  if (prompt && JSON.stringify(newPrompt) !== JSON.stringify(prompt)) cfg.edits = [];
  prompt = newPrompt;
  tokens = trace.tokens;
  cfg.heads = cfg.heads.filter(([l, h]) => l < shape.n_layer && h < shape.n_head);
  cfg.mlps = cfg.mlps.filter((l) => l < shape.n_layer);
  cfg.edits = cfg.edits.filter(([p]) => p < tokens.length);
  buildControls();
  requestSoon(0);
}

function buildControls() {
  const grid = $("iv-heads");
  const isOn = (l, h) => cfg.heads.some(([a, b]) => a === l && b === h);
  grid.style.gridTemplateColumns = `auto repeat(${shape.n_head}, auto)`;
  const cells = [el("span", {})];
  for (let h = 0; h < shape.n_head; h++) cells.push(el("span", { class: "iv-col", text: `H${h}` }));
  for (let l = 0; l < shape.n_layer; l++) {
    cells.push(el("span", { class: "iv-row", text: `L${l}` }));
    for (let h = 0; h < shape.n_head; h++) {
      cells.push(el("label", { class: "iv-cell", title: `zero layer ${l}, head ${h}` },
        el("input", { type: "checkbox", "data-layer": l, "data-head": h, checked: isOn(l, h),
          "aria-label": `zero layer ${l} head ${h}`,
          onchange: (e) => {
            cfg.heads = cfg.heads.filter(([a, b]) => !(a === l && b === h));
            if (e.target.checked) cfg.heads.push([l, h]);
            changed();
          } })));
    }
  }
  grid.replaceChildren(...cells);
  $("iv-mlps").replaceChildren(...Array.from({ length: shape.n_layer }, (_, l) => el("label", { class: "iv-cell" },
    el("input", { type: "checkbox", "data-mlp": l, checked: cfg.mlps.includes(l), "aria-label": `zero the MLP of layer ${l}`,
      onchange: (e) => { cfg.mlps = cfg.mlps.filter((x) => x !== l); if (e.target.checked) cfg.mlps.push(l); changed(); } }),
    ` MLP ${l}`)));
  const sel = $("iv-pos");
  const keep = sel.value;
  sel.replaceChildren(...tokens.map((t) => new Option(`${t.index}: ${visible(t.text)}`, String(t.index))));
  if (keep && +keep < tokens.length) sel.value = keep;
  drawEdits();
  suggest();
}

function drawEdits() {
  $("iv-edits").replaceChildren(...cfg.edits.map(([p, id, t], i) => el("li", {},
    el("span", { class: "chip on" },
      el("span", { class: "mono", text: `${p}: “${visible(tokens[p] ? tokens[p].text : "?")}” → “${visible(t || String(id))}”` }),
      el("button", { type: "button", class: "x", title: "remove this swap", "aria-label": "remove this swap",
        onclick: () => { cfg.edits.splice(i, 1); drawEdits(); changed(); }, text: "×" })))));
}

function addEdit(pos, id, t) {
  cfg.edits = cfg.edits.filter(([p]) => p !== pos);
  cfg.edits.push([pos, id, t]);
  cfg.edits.sort((a, b) => a[0] - b[0]);
  drawEdits();
  changed();
}

// A replacement given by id: GET /api/v1/tokens/model/{id} names it (and refuses ids outside the vocabulary).
async function lookUpId(signal) {
  const raw = $("iv-id").value;
  const status = $("iv-tok-status");
  pendingId = null;
  $("iv-add").disabled = true;
  const id = Number(raw);
  const max = Number($("iv-id").max);
  if (raw === "") { status.textContent = ""; return; }
  if (!Number.isInteger(id) || id < 0 || id > max) { status.textContent = `a token id is a whole number from 0 to ${max}`; return; }
  try {
    const t = await apiGet(`/tokens/model/${id}`, signal);
    pendingId = { id: t.id, text: t.text };
    status.textContent = `id ${t.id} is “${visible(t.text)}”`;
    $("iv-add").disabled = false;
  } catch (err) {
    if (!isAbort(err)) status.textContent = err.message;
  }
}

async function tokenizeReplacement(signal) {
  const value = $("iv-text").value;
  const status = $("iv-tok-status");
  pendingId = null;
  $("iv-add").disabled = true;
  if (!value) { status.textContent = ""; return; }
  try {
    let res = await apiPost("/tokenize", { text: value, encoding: "model" }, signal);
    if (res.tokens.length !== 1 && !value.startsWith(" ")) {   // most words are stored with their leading space
      const spaced = await apiPost("/tokenize", { text: ` ${value}`, encoding: "model" }, signal);
      if (spaced.tokens.length === 1) res = spaced;
    }
    if (res.tokens.length === 1) {
      const t = res.tokens[0];
      pendingId = { id: t.id, text: t.text };
      status.textContent = `one token: id ${t.id} “${visible(t.text)}”`;
      $("iv-add").disabled = false;
    } else {
      status.textContent = `that is ${res.tokens.length} tokens (${res.tokens.map((t) => `“${visible(t.text)}”`).join(" ")}); a swap needs exactly one. ` +
        "Try a shorter piece.";
    }
  } catch (err) {
    if (!isAbort(err)) status.textContent = err.message;
  }
}

async function suggest() {
  const box = $("iv-suggest");
  const p = +$("iv-pos").value;
  const t = tokens[p];
  if (!t) { box.replaceChildren(); return; }
  try {
    const res = await apiGet(`/embeddings/neighbours?id=${t.id}`);
    if (+$("iv-pos").value !== p) return;     // the reader picked another position meanwhile
    box.dataset.position = String(p);
    box.replaceChildren(el("span", { class: "muted", text: "or pick a neighbour: " }),
      ...res.neighbours.slice(0, 8).map((n) => el("button", { type: "button", class: "chip", "data-id": n.id,
        title: `id ${n.id}, cosine ${decimal(n.cosine, 3)}`, onclick: () => addEdit(p, n.id, n.text) },
      el("span", { class: "mono", text: `“${visible(n.text)}”` }))));
  } catch {
    box.replaceChildren();
  }
}

function changed() {
  if (onChange) onChange(interveneConfig());
  requestSoon();
}

// Debounced; a newer request aborts the one still in flight.
function requestSoon(ms = 150) {
  runSlot.soon(run, ms);
}

async function run(signal) {
  const panel = $("intervene-panel");
  if (!prompt) return;
  const body = {
    ...prompt, top_k: 10,
    ablate_heads: cfg.heads.map(([layer, head]) => ({ layer, head })),
    ablate_mlps: [...cfg.mlps],
    edits: cfg.edits.map(([position, id]) => ({ position, id })),
  };
  panel.dataset.state = "loading";
  try {
    result = await apiPost("/intervene", body, signal);
    setNote($("iv-note"), "");
    later("intervene", $("iv-plot"), () => {
      draw_();
      panel.dataset.state = "ready";
      panel.dataset.request = JSON.stringify(body);
    });
  } catch (err) {
    if (isAbort(err)) return;
    setNote($("iv-note"), `Could not run the intervention: ${err.message}`, "error");
    panel.dataset.state = "error";
  }
}

function draw_() {
  const r = result;
  const none = !cfg.heads.length && !cfg.mlps.length && !cfg.edits.length;
  const lossTxt = (x) => (x === null || x === undefined ? "—" : `${decimal(x, 3)} nats`);
  $("iv-stats").dataset.kl = String(r.kl_divergence);
  $("iv-stats").innerHTML = (none ? "Nothing switched off yet: both runs are the same. " : "") +
    `Prompt loss: clean <b>${lossTxt(r.clean.loss)}</b> · altered <b>${lossTxt(r.altered.loss)}</b> · ` +
    `KL(clean ‖ altered) of the next-token distributions: <b>${decimal(r.kl_divergence, 4)}</b> nats. ` +
    `Clean top guess “${visible(r.clean.top[0].text)}” ${pct(r.clean.top[0].prob)}, altered “${visible(r.altered.top[0].text)}” ${pct(r.altered.top[0].prob)}.`;
  const c = [...r.compared].reverse();
  const y = c.map((_, i) => i);
  const labels = c.map((t) => `“${visible(t.text)}”`);
  draw($("iv-plot"), [
    { type: "bar", orientation: "h", name: "with the interventions", x: c.map((t) => t.altered), y, marker: { color: OKABE.vermillion },
      customdata: labels, hovertemplate: "%{customdata}<br>altered %{x} (%{x:.2%})<extra></extra>" },
    { type: "bar", orientation: "h", name: "clean run", x: c.map((t) => t.clean), y, marker: { color: OKABE.grey },
      customdata: labels, hovertemplate: "%{customdata}<br>clean %{x} (%{x:.2%})<extra></extra>" },
  ], {
    barmode: "group", height: 90 + 30 * c.length, legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom", traceorder: "reversed" },
    xaxis: { title: { text: "probability of the next token" }, tickformat: PROB_TICKS, rangemode: "tozero" },
    yaxis: { tickmode: "array", tickvals: y, ticktext: labels, tickfont: { family: MONO }, automargin: true },
    margin: { l: 10, r: 20, t: 40, b: 40 },
  }, "intervention");
}

// Stage 9, for main.js's table: its own POST /api/v1/intervene answers.
export const panel = {
  stage: "intervene",
  parts: [],
  init: ({ state, writeUrl }) => initIntervene({ heads: state.heads, mlps: state.mlps, edits: state.edits }, {
    onConfigChange: (c) => { state.heads = c.heads; state.mlps = c.mlps; state.edits = c.edits; writeUrl(); },
  }),
  render: (trace, view) => { if (view.promptChanged) setInterveneTrace(trace, view.prompt); },
};
