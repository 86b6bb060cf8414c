// The forward-pass page: fetch /api/v1/forward for the prompt, hand each panel its part.
import { apiPost, debounced, showError } from "./api.js";
import { renderTokens } from "./tokens_panel.js";
import { renderAttention } from "./attention_panel.js";
import { renderNextToken } from "./next_token_panel.js";

const $ = (id) => document.getElementById(id);
const state = { trace: null, layer: 0, head: 0 };

function readUrl() {
  const q = new URLSearchParams(location.search);
  if (q.has("text")) $("prompt").value = q.get("text");
  state.layer = parseInt(q.get("layer") || "0", 10) || 0;
  state.head = parseInt(q.get("head") || "0", 10) || 0;
}

function writeUrl() {
  const q = new URLSearchParams({ text: $("prompt").value, layer: state.layer, head: state.head });
  history.replaceState(null, "", `?${q}`);
}

function fillSelect(sel, n, value) {
  if (sel.options.length !== n) {
    sel.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(String(i), String(i))));
  }
  sel.value = String(Math.min(value, n - 1));
}

function drawAttention() {
  if (!state.trace) return;
  renderAttention($("attention-plot"), state.trace, state.layer, state.head);
}

async function run(signal) {
  const text = $("prompt").value;
  if (!text) return;
  try {
    const trace = await apiPost("/forward", { text, include: ["attention", "next_token"], top_k: 10 }, signal);
    showError(null);
    state.trace = trace;
    const nLayers = trace.attention.layers.length;
    const nHeads = trace.attention.heads.length;
    state.layer = Math.min(state.layer, nLayers - 1);
    state.head = Math.min(state.head, nHeads - 1);
    fillSelect($("layer"), nLayers, state.layer);
    fillSelect($("head"), nHeads, state.head);
    renderTokens($("tokens"), $("token-count"), trace.tokens);
    drawAttention();
    renderNextToken($("next-plot"), trace.next_token);
    writeUrl();
    document.body.dataset.ready = "1";
  } catch (err) {
    if (err.name !== "AbortError") showError(err);
  }
}

const runSoon = debounced(run, 250);

readUrl();
$("prompt-form").addEventListener("submit", (e) => { e.preventDefault(); runSoon(); });
$("prompt").addEventListener("input", () => runSoon());
$("layer").addEventListener("change", (e) => { state.layer = +e.target.value; drawAttention(); writeUrl(); });
$("head").addEventListener("change", (e) => { state.head = +e.target.value; drawAttention(); writeUrl(); });
runSoon();
