// nanochat's stream (models with nanochat's pieces only: /health's info.extras): the smear's gate per
// position, the lambdas that mix x0 back in before each block, the value embeddings' gates, the backout
// and the softcap, each with the prompt's numbers. Data: the `stream_extras` part of POST /api/v1/forward.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, tokenLabels, visible } from "../lib/format.js";
import { MONO, OKABE, SEQ } from "../lib/palette.js";
import { SLANTED_TICK_PX, chart, draw, tokenAxis } from "../lib/plot.js";

let part = null;
let labels = [];

function initExtras() {
  if (!$("stream-extras-panel")) return;
  addDownloads($("sx-smear-plot"), "smear", () => part?.smear);
  addDownloads($("sx-ve-plot"), "value-embeddings", () => part?.value_embeds);
  addDownloads($("sx-backout-plot"), "backout", () => part?.backout);
  addDownloads($("sx-cap-plot"), "softcap", () => part?.softcap);
}

function positionAxis() {
  return { ...tokenAxis(labels, 700, {}, SLANTED_TICK_PX), tickangle: -60, title: { text: "position (token)" } };
}

function renderExtras(trace) {
  const b = trace.stream_extras;
  if (!b || !$("stream-extras-panel")) return;
  part = b;
  labels = tokenLabels(trace.tokens);
  $("sx-smear-box").hidden = !b.smear;
  $("sx-mix-box").hidden = !b.mixing;
  $("sx-ve-box").hidden = !b.value_embeds;
  $("sx-backout-box").hidden = !b.backout;
  $("sx-cap-box").hidden = !b.softcap;
  if (b.smear) {
    $("sx-smear-c").textContent = String(b.smear.channels);
    $("sx-smear-stats").textContent = `λ = ${decimal(b.smear.lam, 4)}; the gate at the selected position ` +
      `${b.position} “${visible(labels[b.position] ?? "")}”: ${decimal(b.smear.gate[b.position], 4)} (position 0 has no token before it).`;
    later("sx-smear", $("sx-smear-plot"), drawSmear);
  }
  if (b.mixing) mixTable(b);
  if (b.value_embeds) later("sx-ve", $("sx-ve-plot"), drawValueEmbeds);
  if (b.backout) {
    $("sx-backout-stats").textContent = `λ_b = ${decimal(b.backout.lam, 4)} of the stream after block ${b.backout.layer} ` +
      "is taken away before the final norm (the logit lens shows the stream after it as its last row, “after backout”).";
    later("sx-backout", $("sx-backout-plot"), drawBackout);
  }
  if (b.softcap) capStats(b);
  $("stream-extras-panel").dataset.ready = "1";
}

function drawSmear() {
  const s = part.smear;
  const x = labels.map((_, i) => i);
  chart($("sx-smear-plot"), [
    { type: "bar", x, y: s.gate, name: "gate λ·σ(x·W): share of the previous embedding", marker: { color: OKABE.blue },
      hovertemplate: "position %{x}<br>gate %{y}<extra></extra>" },
    { type: "scatter", mode: "lines+markers", x, y: s.added_norm, yaxis: "y2", name: "|added|", line: { color: OKABE.orange } },
    { type: "scatter", mode: "lines", x, y: s.own_norm, yaxis: "y2", name: "|own embedding|", line: { color: OKABE.grey, dash: "dot" } },
  ], {
    height: 340, xaxis: positionAxis(), yaxis: { title: { text: "gate" } },
    yaxis2: { title: { text: "L2 norm" }, overlaying: "y", side: "right", automargin: true },
  });
}

function mixTable(b) {
  const head = el("tr", {}, ...["block", "r (stream)", "a (x₀)", "|x| before", "|x₀|", "|r·x + a·x₀|", "reaches the final norm"]
    .map((t, i) => el("th", { class: i ? "num" : "", text: t })));
  const rows = b.mixing.map((m) => el("tr", {}, el("th", { text: `block ${m.layer}` }),
    ...[m.resid_lambda, m.x0_lambda, m.stream_norm, m.x0_norm, m.mixed_norm, m.reaches_final].map((v) => el("td", { class: "num", text: decimal(v, 4) }))));
  const foot = el("tr", {}, el("th", { text: "x₀ itself" }), el("td", { colspan: "5", class: "muted", text: "all of these mixes together" }),
    el("td", { class: "num", text: decimal(b.x0_reaches_final, 4) }));
  $("sx-mix-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows, foot));
}

function drawValueEmbeds() {
  const ves = part.value_embeds;
  const cols = [];
  for (const L of ves) for (let h = 0; h < L.gate[0].length; h++) cols.push([L, h]);
  const z = labels.map((_, t) => cols.map(([L, h]) => L.gate[t][h]));
  const height = Math.max(240, Math.min(900, 110 + labels.length * 16));
  draw($("sx-ve-plot"), [{
    type: "heatmap", z, x: cols.map(([L, h]) => `L${L.layer} kv${h}`), y: labels.map((_, t) => t), zmin: 0, zmax: 3, colorscale: SEQ,
    colorbar: { title: { text: "gate" }, thickness: 10 },
    customdata: labels.map((t, i) => cols.map(([L, h]) => [visible(t), decimal(L.ve_norm[i][h], 3), decimal(L.v_norm[i][h], 3)])),
    hovertemplate: "token %{y} “%{customdata[0]}” · %{x}<br>gate %{z}<br>|VE row| %{customdata[1]} · |v| after %{customdata[2]}<extra></extra>",
  }], {
    height, margin: { l: 20, r: 10, t: 30, b: 20 },
    xaxis: { side: "top", type: "category", tickfont: { family: MONO } },
    yaxis: { ...tokenAxis(labels, height - 60), autorange: "reversed" },
  });
}

function drawBackout() {
  const o = part.backout;
  const x = labels.map((_, i) => i);
  chart($("sx-backout-plot"), [
    { type: "scatter", mode: "lines+markers", x, y: o.before, name: "|x| after the last block", line: { color: OKABE.grey } },
    { type: "scatter", mode: "lines+markers", x, y: o.taken, name: `|λ_b · x after block ${o.layer}|`, line: { color: OKABE.vermillion } },
    { type: "scatter", mode: "lines+markers", x, y: o.after, name: "|x − λ_b · x_mid|: what the final norm reads", line: { color: OKABE.blue } },
  ], { height: 340, xaxis: positionAxis(), yaxis: { title: { text: "L2 norm" } } });
}

function capStats(b) {
  const c = b.softcap;
  $("sx-cap-stats").textContent = `c = ${c.cap}: the largest |z| before the cap over this prompt is ${decimal(c.largest_uncapped, 3)}; ` +
    `at position ${b.position} the top logit ${decimal(c.top[0].uncapped, 3)} becomes ${decimal(c.top[0].capped, 3)}.`;
  later("sx-cap", $("sx-cap-plot"), drawCap);
}

function drawCap() {
  const c = part.softcap;
  chart($("sx-cap-plot"), [
    { type: "scatter", mode: "lines", x: c.curve_x, y: c.curve_y, name: `c·tanh(z / c), c = ${c.cap}`, line: { color: OKABE.grey } },
    { type: "scatter", mode: "lines", x: c.curve_x, y: c.curve_x, name: "no cap (z)", line: { color: OKABE.grey, dash: "dot" } },
    { type: "scatter", mode: "markers", x: c.top.map((t) => t.uncapped), y: c.top.map((t) => t.capped), name: "the top 10 logits here",
      marker: { color: OKABE.vermillion, size: 9 }, customdata: c.top.map((t) => visible(t.text)),
      hovertemplate: "“%{customdata}”<br>z %{x} → %{y}<extra></extra>" },
  ], { height: 340, xaxis: { title: { text: "z, the logit before the cap" } },
    yaxis: { title: { text: "the model's logit" }, range: [-1.2 * c.cap, 1.2 * c.cap] } });
}

// nanochat's section (models with its pieces only), between the MLP and the residual stream.
export const panel = {
  stage: "stream-extras",
  parts: ["stream_extras"],
  init: () => initExtras(),
  render: (trace, view) => { if (view.parts.includes("stream_extras")) renderExtras(trace); },
};
