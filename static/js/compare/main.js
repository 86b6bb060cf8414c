// The /compare page: two checkpoints on one text, side by side and, where they are comparable, as
// differences. One POST /api/v1/compare per change (debounced; a newer request aborts the older
// one, so a stale answer never lands). The URL carries a, b, text, char, layer and head.
import { apiGet, apiPost, isAbort, latest, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { int, visible } from "../lib/format.js";
import { setPageQuery, whole } from "../lib/query.js";
import { stageNavigation } from "../lib/stages.js";
import { initStrips, markChar, renderStrips } from "./strips.js";
import { initViews, renderViews } from "./views.js";

// The server rendered the shell from the URL (its query, or the defaults).
const given = $("cmp-form-panel").dataset;
const state = { a: given.a, b: given.b, char: whole(given.char, null), layer: whole(given.layer, 0), head: whole(given.head, 0) };
let shown = null;      // the response on show
let resetOnce = false; // a layer or head the new models lack falls back to 0, once
const slot = latest();

function writeUrl() {
  const q = new URLSearchParams({ a: state.a, b: state.b, text: $("text").value, layer: state.layer, head: state.head });
  if (state.char !== null) q.set("char", state.char);
  setPageQuery(q);
}

function request(ms = 250) {
  writeUrl();
  slot.soon(run, ms);
}

const fieldOf = (err) => (Array.isArray(err.detail) && err.detail[0]?.loc ? err.detail[0].loc.at(-1) : null);

async function run(signal) {
  const text = $("text").value;
  if (!text) return;
  if (state.char !== null && state.char >= [...text].length) state.char = null;
  const body = { a: state.a, b: state.b, text, layer: state.layer, head: state.head };
  if (state.char !== null) body.char = state.char;
  document.body.dataset.busy = "1";
  try {
    const res = await apiPost("/compare", body, signal);
    resetOnce = false;
    showError(null);
    apply(res);
  } catch (err) {
    if (isAbort(err)) return;
    if (["layer", "head"].includes(fieldOf(err)) && !resetOnce && (state.layer || state.head)) {
      resetOnce = true;
      state.layer = 0;
      state.head = 0;
      request(0);
      return;
    }
    showError(err);
  } finally {
    if (!signal.aborted) delete document.body.dataset.busy;
  }
}

function fillSelect(sel, n, value) {
  if (sel.options.length !== n) sel.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(String(i), String(i))));
  sel.value = String(value);
}

function showChar(i, text) {
  const chars = [...text];
  $("char").max = String(chars.length - 1);
  $("char").value = String(i);
  $("char-label").textContent = chars[i] === undefined ? "" : `“${visible(chars[i])}”`;
}

function apply(res) {
  shown = res;
  const nLayer = Math.min(res.a.n_layer, res.b.n_layer);
  const nHead = Math.min(res.a.n_head, res.b.n_head);
  fillSelect($("layer"), nLayer, res.layer);
  fillSelect($("head"), nHead, res.head);
  $("layer").title = `the attention layer shown: a has ${res.a.n_layer}, b has ${res.b.n_layer}`;
  $("head").title = `the attention head shown: a has ${res.a.n_head} per layer, b has ${res.b.n_head}`;
  showChar(res.char, res.text);
  renderStrips(res);
  renderViews(res);
  writeUrl();
  document.body.dataset.ready = "1";
  document.body.dataset.shown = new URLSearchParams({ a: res.a.checkpoint, b: res.b.checkpoint, char: res.char,
    layer: res.layer, head: res.head }).toString();
}

// --- the checkpoint pickers ------------------------------------------------------------------------

function label(c) {
  const step = c.step === null || c.step === undefined ? "" : ` · step ${int(c.step)}`;
  return `${c.name}${c.loaded ? " (served)" : ""} · ${c.source || "trained"}${step} · ${int(c.params)} params`;
}

async function loadCheckpoints() {
  const list = await apiGet("/checkpoints");
  for (const [sel, value] of [[$("ckpt-a"), state.a], [$("ckpt-b"), state.b]]) {
    const options = list.map((c) => new Option(label(c), c.name));
    if (!list.some((c) => c.name === value)) options.unshift(new Option(`${value} (not in the list)`, value));
    sel.replaceChildren(...options);
    sel.value = value;
  }
  $("cmp-form").dataset.checkpoints = String(list.length);
}

// --- selection ---------------------------------------------------------------------------------------

function selectChar(i) {
  if (!shown) return;
  const n = [...shown.text].length;
  if (shown.text !== $("text").value) return;   // the strips show an older text: wait for the new one
  i = Math.max(0, Math.min(n - 1, i));
  state.char = i;
  showChar(i, shown.text);
  markChar(i);
  request(150);
}

function selectHead(layer, head) {
  state.layer = layer;
  state.head = head;
  resetOnce = false;
  request(100);
}

// --- wiring ---------------------------------------------------------------------------------------------

export function init() {
  initStrips({ onPickChar: selectChar });
  initViews();
  $("ckpt-a").addEventListener("change", (e) => { state.a = e.target.value; resetOnce = false; request(0); });
  $("ckpt-b").addEventListener("change", (e) => { state.b = e.target.value; resetOnce = false; request(0); });
  $("swap").addEventListener("click", () => {
    [state.a, state.b] = [state.b, state.a];
    $("ckpt-a").value = state.a;
    $("ckpt-b").value = state.b;
    request(0);
  });
  $("cmp-form").addEventListener("submit", (e) => { e.preventDefault(); request(0); });
  $("text").addEventListener("input", () => { state.char = null; request(400); });
  $("layer").addEventListener("change", (e) => selectHead(+e.target.value, state.head));
  $("head").addEventListener("change", (e) => selectHead(state.layer, +e.target.value));
  $("char").addEventListener("change", (e) => selectChar(whole(e.target.value, 0)));
  const char = (d) => () => selectChar((shown ? shown.char : 0) + d);
  stageNavigation({ h: char(-1), ArrowLeft: char(-1), l: char(1), ArrowRight: char(1) });
  loadCheckpoints().catch(showError);
  request(0);
}
