// Stage 7: logits -> probabilities. The top-10 at the selected position (#next-plot, from the
// forward trace), temperature / top-k / top-p filtering of the last position's distribution
// (POST /api/v1/next-token), and the prompt's per-position loss and perplexity (prompt_loss part).
import { apiPost, isAbort, latest } from "../lib/api.js";
import { $, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct, tokenLabels, visible } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { PROB_TICKS, SLANTED_TICK_PX, clearPlot, draw, tokenAxis } from "../lib/plot.js";

let settings = { temperature: 1, top_k: null, top_p: null };
let prompt = null;   // the prompt as the API takes it: { text } or { messages }, and bos (main.js: promptFields)
let result = null;
let loss = null;
let nextTokens = null;
let onSettings = null;
const slot = latest();

export function initSampling(initial, { onChange } = {}) {
  settings = { ...settings, ...initial };
  onSettings = onChange || null;
  const t = $("temperature");
  const k = $("top-k");
  const p = $("top-p");
  t.value = String(settings.temperature);
  k.value = String(settings.top_k ?? 0);
  p.value = String(settings.top_p ?? 1);
  showValues();
  const changed = () => {
    settings = {
      temperature: +t.value,
      top_k: +k.value > 0 ? +k.value : null,
      top_p: +p.value < 1 ? +p.value : null,
    };
    showValues();
    if (onSettings) onSettings({ ...settings });
    requestSoon();
  };
  for (const s of [t, k, p]) s.addEventListener("input", changed);
  addDownloads($("next-plot"), "next-token-top10", () => nextTokens);
  addDownloads($("sampling-plot"), "sampling", () => result);
  addDownloads($("loss-plot"), "prompt-loss", () => loss);
}

export function samplingSettings() {
  return { ...settings };
}

function showValues() {
  $("temperature-out").textContent = settings.temperature.toFixed(2);
  $("top-k-out").textContent = settings.top_k === null ? "off" : String(settings.top_k);
  $("top-p-out").textContent = settings.top_p === null ? "off" : settings.top_p.toFixed(2);
}

export function renderNext(trace) {
  if (trace.next_token) {
    nextTokens = trace.next_token;
    drawNextToken(trace.next_token);
  }
  if (trace.prompt_loss) {
    loss = trace.prompt_loss;
    const labels = tokenLabels(trace.tokens);
    later("loss", $("loss-plot"), () => drawLoss(labels));
  }
}

// A new prompt: fetch its filtered distribution.
export function setSamplingPrompt(p) {
  prompt = p;
  requestSoon(0);
}

// Debounced; a newer request aborts the one still in flight, so dragging never piles requests up.
function requestSoon(ms = 120) {
  slot.soon(fetchDistribution, ms);
}

async function fetchDistribution(signal) {
  const panel = $("sampling-plot");
  if (!prompt) return;
  const sent = { ...settings };
  panel.dataset.state = "loading";
  try {
    result = await apiPost("/next-token", { ...prompt, ...sent, show: 20 }, signal);
    setNote($("sampling-note"), "");
    later("sampling", panel, () => {
      drawSampling();
      panel.dataset.state = "ready";
      panel.dataset.settings = JSON.stringify(sent);
    });
  } catch (err) {
    if (isAbort(err)) return;
    setNote($("sampling-note"), `Could not filter the distribution: ${err.message}`, "error");
    panel.dataset.state = "error";
  }
}

// The top candidates after the selected position as probability bars, the most likely at the top.
function drawNextToken(candidates) {
  const rev = [...candidates].reverse();
  const labels = rev.map((c) => `“${visible(c.text)}”  id ${c.id}`);
  draw($("next-plot"), [{
    type: "bar",
    orientation: "h",
    x: rev.map((c) => c.prob),
    y: labels,
    text: rev.map((c) => pct(c.prob)),
    textposition: "outside",
    cliponaxis: false,   // a probability near 1 ends at the axis's end: its label goes into the margin
    marker: { color: "#3b528b" },
    customdata: rev.map((c) => c.logit),
    hovertemplate: "%{y}<br>probability %{x:.2%}<br>logit (score before softmax) %{customdata:.3f}<extra></extra>",
  }], {
    xaxis: { title: { text: "probability" }, tickformat: PROB_TICKS, range: [0, Math.min(1, Math.max(...candidates.map((c) => c.prob)) * 1.25)] },
    yaxis: { automargin: true, tickfont: { family: MONO } },
    margin: { l: 10, r: 56, t: 10, b: 40 },
    height: 60 + 28 * candidates.length,
  }, "next-token-top10");
}

function drawSampling() {
  const c = result.candidates;
  const x = c.map((_, i) => i);
  const why = (t) => (t.kept ? "" : t.in_top_k ? "✗p " : "✗k ");   // which filter removed it
  const labels = c.map((t) => `${why(t)}${visible(t.text)}`);
  const common = { type: "bar", x, customdata: c.map((t) => [visible(t.text), t.id, t.logit,
    t.kept ? "kept" : t.in_top_k ? "removed by top-p" : "removed by top-k"]) };
  const hover = (what) => `“%{customdata[0]}” id %{customdata[1]} (logit %{customdata[2]}, %{customdata[3]})<br>${what} %{y} (%{y:.2%})<extra></extra>`;
  const s = result.settings;
  draw($("sampling-plot"), [
    { ...common, name: "softmax(logits), temperature 1", y: c.map((t) => t.p_raw), marker: { color: OKABE.grey }, hovertemplate: hover("before anything") },
    { ...common, name: `after temperature ${decimal(s.temperature, 2)}`, y: c.map((t) => t.p_temperature),
      marker: { color: OKABE.blue, opacity: c.map((t) => (t.kept ? 1 : 0.45)), pattern: { shape: c.map((t) => (t.kept ? "" : t.in_top_k ? "x" : "/")), fgcolor: "#fff" } },
      hovertemplate: hover("after temperature") },
    { ...common, name: "after top-k / top-p, renormalised", y: c.map((t) => t.p_final), marker: { color: OKABE.orange }, hovertemplate: hover("final") },
  ], {
    barmode: "group", height: 380, bargap: 0.25,
    legend: { orientation: "h", y: 1.14 },
    xaxis: { tickmode: "array", tickvals: x, ticktext: labels, tickangle: -45, tickfont: { family: MONO, size: 11 }, title: { text: "the 20 most likely tokens at temperature 1 (✗k: removed by top-k, ✗p: removed by top-p)" } },
    yaxis: { title: { text: "probability" }, tickformat: PROB_TICKS, rangemode: "tozero" },
    margin: { l: 60, r: 10, t: 40, b: 110 },
  }, "sampling");
  $("sampling-stats").innerHTML =
    `Kept <b>${result.n_kept.toLocaleString()}</b> of ${result.vocab_size.toLocaleString()} tokens, holding ` +
    `<b>${pct(result.kept_mass, 2)}</b> of the probability after temperature; they are rescaled to add up to 100%. ` +
    `Entropy (nats): <b>${decimal(result.entropy_raw, 3)}</b> at temperature 1 → <b>${decimal(result.entropy_temperature, 3)}</b> after temperature → ` +
    `<b>${decimal(result.entropy_final, 3)}</b> after filtering.`;
}

function drawLoss(labels) {
  const L = loss;
  if (!L.positions.length) {
    $("loss-stats").textContent = "A one-token prompt has nothing to grade: there is no next token inside it.";
    clearPlot($("loss-plot"));
    return;
  }
  $("loss-stats").innerHTML = `Mean loss <b>${decimal(L.mean_loss, 3)}</b> nats · perplexity <b>${decimal(L.perplexity, 2)}</b> ` +
    `(as unsure as a uniform pick among about that many tokens) · a uniform guess over the whole vocabulary would lose ` +
    `<b>${decimal(L.uniform_loss, 3)}</b> nats per token.`;
  const x = L.positions.map((p) => p.position);
  const xl = L.positions.map((p) => `${labels[p.position]}→${visible(p.next_text)}`);
  const gd = $("loss-plot");
  draw(gd, [
    { type: "bar", name: "p(actual next token)", x, y: L.positions.map((p) => p.prob), marker: { color: OKABE.blue },
      customdata: L.positions.map((p) => [labels[p.position], visible(p.next_text), p.next_id, p.loss]),
      hovertemplate: "position %{x} “%{customdata[0]}” → next “%{customdata[1]}” (id %{customdata[2]})<br>probability %{y} (%{y:.2%})<br>loss %{customdata[3]} nats<extra></extra>" },
    { type: "scatter", mode: "lines+markers", name: "loss −ln p (nats)", x, y: L.positions.map((p) => p.loss), yaxis: "y2",
      line: { color: OKABE.vermillion, width: 1.5 }, marker: { size: 5 }, hovertemplate: "position %{x}: loss %{y:.3f} nats<extra></extra>" },
  ], {
    height: 380, legend: { orientation: "h", y: 1.14 },
    xaxis: { ...tokenAxis(xl, (gd.clientWidth || 1000) - 140, {}, SLANTED_TICK_PX), tickangle: -60, title: { text: "context token → the token that really came next" } },
    yaxis: { title: { text: "probability" }, range: [0, 1], tickformat: ".0%" },
    yaxis2: { title: { text: "loss (nats)" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false, tickformat: ".1f" },
    margin: { l: 60, r: 60, t: 40, b: 40 },
  }, "prompt-loss");
}

// The overview moved the settings: the same sliders here, and the distribution again.
function setSettings(s) {
  settings = { temperature: s.temperature, top_k: s.top_k, top_p: s.top_p };
  $("temperature").value = String(settings.temperature);
  $("top-k").value = String(settings.top_k ?? 0);
  $("top-p").value = String(settings.top_p ?? 1);
  showValues();
  requestSoon();
}

// Stage 7, for main.js's table.
export const panel = {
  stage: "next",
  parts: ["next_token", "prompt_loss"],
  init: (page) => {
    page.samplingListeners.push((s, from) => { if (from !== "sampling") setSettings(s); });
    initSampling({ temperature: page.state.temperature, top_k: page.state.top_k, top_p: page.state.top_p }, {
      onChange: (s) => page.setSampling(s, "sampling"),
    });
  },
  render: (trace, view) => {
    if (view.parts.includes("next_token") || view.parts.includes("prompt_loss")) renderNext(trace);
    if (view.promptChanged) setSamplingPrompt(view.prompt);
  },
};
