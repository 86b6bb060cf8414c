// The imported families' block switches (models with any: /health's info.switches): each switch in words
// with the model's numbers, and the prompt's numbers where it changes them: the embedding's scale, each
// layer's window and RoPE base, what each sublayer wrote before and after its output norm (and which
// stream the MLP read), the scores the attention softcap moved, the logits' softcap.
// Data: the `block_switches` part of POST /api/v1/forward.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, tokenLabels, visible } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";

let part = null;
let labels = [];

function initSwitches() {
  if (!$("switches-panel")) return;
  addDownloads($("sw-acap-plot"), "attention-softcap", () => part?.attn_softcap);
  addDownloads($("sw-cap-plot"), "logit-softcap", () => part?.softcap);
}

function table(id, heads, rows) {
  const head = el("tr", {}, ...heads.map((t, i) => el("th", { class: i ? "num" : "", text: t })));
  $(id).replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows.map((cells) =>
    el("tr", {}, el("th", { text: cells[0] }), ...cells.slice(1).map((v) => el("td", { class: "num", text: v }))))));
}

function renderSwitches(trace) {
  const b = trace.block_switches;
  if (!b || !$("switches-panel")) return;
  part = b;
  labels = tokenLabels(trace.tokens);
  $("sw-notes").replaceChildren(...b.switches.flatMap((s) => [
    el("dt", { "data-switch": s.name, text: s.title }), el("dd", { text: s.text })]));
  $("sw-embed-box").hidden = !b.embed_scale;
  $("sw-layers-box").hidden = !b.layers;
  $("sw-sub-box").hidden = !b.sublayers;
  $("sw-acap-box").hidden = !b.attn_softcap;
  $("sw-cap-box").hidden = !b.softcap;
  if (b.embed_scale) {
    table("sw-embed-table", ["position", "token", "|W_E row|", `|${decimal(b.embed_scale.scale, 4)} · row|`],
      labels.map((t, i) => [String(i), `“${visible(t)}”`, decimal(b.embed_scale.row_norm[i], 3), decimal(b.embed_scale.scaled_norm[i], 3)]));
  }
  if (b.layers) {
    table("sw-layers-table", ["layer", "kind", "window", "RoPE base"], b.layers.map((L) => [`block ${L.layer}`,
      L.window ? "local" : "global", L.window ? String(L.window) : "all",
      L.rope_base === null ? "–" : `${L.rope_base.toLocaleString("en")}${L.rope_scaled ? " (stretched)" : ""}`]));
  }
  if (b.sublayers) sublayerTable(b);
  if (b.attn_softcap) scoreCap(b);
  if (b.softcap) logitCap(b);
  $("switches-panel").dataset.ready = "1";
}

function sublayerTable(b) {
  const s = b.sublayers;
  const parallel = s[0].mlp_reads === "block input";
  $("sw-sub-caption").textContent = `At the selected position ${b.position} “${visible(labels[b.position] ?? "")}”: the length of ` +
    "what attention and the MLP computed (“raw”) and of what each added to the stream (after its output norm, where the " +
    "block has one: the two differ there), the stream entering and leaving the block, and which stream the MLP read" +
    (parallel ? ": here the block's input, the one attention read too." : ".");
  table("sw-sub-table", ["block", "|attention| raw", "added", "|MLP| raw", "added", "MLP reads", "|x| in", "|x| out"],
    s.map((r) => [`block ${r.layer}`, decimal(r.attn_raw, 3), decimal(r.attn_added, 3), r.mlp_raw === null ? "–" : decimal(r.mlp_raw, 3),
      decimal(r.mlp_added, 3), r.mlp_reads, decimal(r.resid_pre, 3), decimal(r.resid_post, 3)]));
}

function scoreCap(b) {
  const a = b.attn_softcap;
  $("sw-acap-stats").textContent = `c = ${a.cap}. Below, each layer's largest |score| before the cap over this prompt and the ` +
    "share of its scores the cap moved by more than 10%; the plot puts the selected head's scores at the selected position " +
    `(layer ${a.layer}, head ${a.head}, position ${b.position}) on the cap's curve.`;
  table("sw-acap-table", ["layer", "largest |s| before", "share moved > 10%"],
    a.layers.map((L) => [`block ${L.layer}`, decimal(L.largest_uncapped, 3), `${decimal(100 * L.changed_share, 1)}%`]));
  later("sw-acap", $("sw-acap-plot"), drawScoreCap);
}

function drawScoreCap() {
  const a = part.attn_softcap;
  chart($("sw-acap-plot"), [
    { type: "scatter", mode: "lines", x: a.curve_x, y: a.curve_y, name: `c·tanh(s / c), c = ${a.cap}`, line: { color: OKABE.grey } },
    { type: "scatter", mode: "lines", x: a.curve_x, y: a.curve_x, name: "no cap (s)", line: { color: OKABE.grey, dash: "dot" } },
    { type: "scatter", mode: "markers", x: a.uncapped, y: a.capped, name: "the selected query's scores", marker: { color: OKABE.blue, size: 8 },
      customdata: a.keys.map((k) => `${k} “${visible(labels[k] ?? "")}”`), hovertemplate: "key %{customdata}<br>s %{x} → %{y}<extra></extra>" },
  ], { height: 320, xaxis: { title: { text: "s = q·k × scale, before the cap" } },
    yaxis: { title: { text: "the score softmax reads" }, range: [-1.2 * a.cap, 1.2 * a.cap] } });
}

function logitCap(b) {
  const c = b.softcap;
  $("sw-cap-stats").textContent = `c = ${c.cap}: the largest |z| before the cap over this prompt is ${decimal(c.largest_uncapped, 3)}; ` +
    `at position ${b.position} the top logit ${decimal(c.top[0].uncapped, 3)} becomes ${decimal(c.top[0].capped, 3)}. ` +
    "The self-check splits z, the logit before the cap.";
  later("sw-cap", $("sw-cap-plot"), drawLogitCap);
}

function drawLogitCap() {
  const c = part.softcap;
  chart($("sw-cap-plot"), [
    { type: "scatter", mode: "lines", x: c.curve_x, y: c.curve_y, name: `c·tanh(z / c), c = ${c.cap}`, line: { color: OKABE.grey } },
    { type: "scatter", mode: "lines", x: c.curve_x, y: c.curve_x, name: "no cap (z)", line: { color: OKABE.grey, dash: "dot" } },
    { type: "scatter", mode: "markers", x: c.top.map((t) => t.uncapped), y: c.top.map((t) => t.capped), name: "the top 10 logits here",
      marker: { color: OKABE.vermillion, size: 9 }, customdata: c.top.map((t) => visible(t.text)),
      hovertemplate: "“%{customdata}”<br>z %{x} → %{y}<extra></extra>" },
  ], { height: 320, xaxis: { title: { text: "z, the logit before the cap" } },
    yaxis: { title: { text: "the model's logit" }, range: [-1.2 * c.cap, 1.2 * c.cap] } });
}

// The families' section (models with any switch on), right after the block.
export const panel = {
  stage: "switches",
  parts: ["block_switches"],
  init: () => initSwitches(),
  render: (trace, view) => { if (view.parts.includes("block_switches")) renderSwitches(trace); },
};
