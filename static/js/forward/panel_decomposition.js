// Stage 10: the self-check. One logit split into what each part wrote into the residual stream
// (embeddings, every head, every MLP, biases); their sum next to the model's own logit.
// Data: the `decomposition` part of POST /api/v1/forward.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, visible } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { clearPlot, draw } from "../lib/plot.js";

let part = null;
let onTarget = null;

const KIND_COLOR = { embed: OKABE.black, smear: OKABE.purple, head: OKABE.blue, attn_bias: OKABE.grey, mlp: OKABE.orange, bias: OKABE.grey };
const KIND_NAME = { embed: "embeddings", smear: "the smear (previous token)", head: "attention head", attn_bias: "attention bias", mlp: "MLP", bias: "bias" };

export function initDecomposition({ onTargetChange } = {}) {
  onTarget = onTargetChange || null;
  $("dc-target").addEventListener("change", (e) => {
    if (onTarget) onTarget(e.target.value === "" ? null : +e.target.value);
  });
  addDownloads($("dc-plot"), "decomposition", () => part);
}

// candidates: the next_token list at the same position; target: the requested id or null
export function renderDecomposition(trace, candidates, target, labels) {
  if (!trace.decomposition) return;
  part = trace.decomposition;
  const d = part;
  const sel = $("dc-target");
  const opts = [new Option("the top prediction", "")];
  const seen = new Set();
  for (const c of candidates || []) {
    seen.add(c.id);
    opts.push(new Option(`“${visible(c.text)}” (id ${c.id})`, String(c.id)));
  }
  if (!seen.has(d.target_id)) opts.push(new Option(`“${visible(d.target_text)}” (id ${d.target_id})`, String(d.target_id)));
  sel.replaceChildren(...opts);
  sel.value = target === null || target === undefined ? "" : String(target);

  const where = `position ${d.position} “${labels[d.position] ?? ""}”`;
  const exact = d.exact && d.contributions.length > 0;
  $("decomposition-panel").dataset.exact = exact ? "1" : "0";   // else only the note shows (the CSS)
  if (!exact) {
    $("dc-stats").textContent = d.note;
    clearPlot($("dc-plot"));
    return;
  }
  $("dc-stats").replaceChildren(
    el("span", {}, `Logit of “${visible(d.target_text)}” (id ${d.target_id}) at ${where}: `),
    ...decompositionPills(d, "dc"), el("br"), el("span", { class: "muted", text: d.note }),
  );
  later("decomposition", $("dc-plot"), () => {
    drawDecomposition($("dc-plot"), d, `what each part adds to the logit of “${visible(d.target_text)}”`, "decomposition");
    $("decomposition-panel").dataset.target = String(d.target_id);
  });
}

// The sum of the parts, the model's own logit and their difference, as pills #<prefix>-total,
// #<prefix>-logit and #<prefix>-error (data-value: the API's number). Also the classifier panel's.
// A softcapped model (nanochat): the parts add up to the logit before the cap, and a fourth pill,
// #<prefix>-capped, shows the model's own logit after it.
export function decompositionPills(d, prefix) {
  const capped = d.softcap ? [el("span", { class: "pill", id: `${prefix}-capped`, "data-value": d.capped_logit },
    `after the softcap ${d.softcap}·tanh(z / ${d.softcap}) `, el("b", { text: decimal(d.capped_logit, 4) }))] : [];
  return [
    el("span", { class: "pill", id: `${prefix}-total`, "data-value": d.total }, `sum of the parts `, el("b", { text: decimal(d.total, 4) })),
    el("span", { class: "pill", id: `${prefix}-logit`, "data-value": d.logit }, d.softcap ? "logit before the cap, z " : "model's logit ",
      el("b", { text: decimal(d.logit, 4) })),
    el("span", { class: "pill", id: `${prefix}-error`, "data-value": d.residual_error }, `difference `, el("b", { text: decimal(d.residual_error, 6) })),
    ...capped,
  ];
}

// One label per bar while they fit (up to 60 parts: a 4-layer model has 30); for more (GPT-2 small
// has 170) one label per layer, at its first part, and a dotted line between layers (the colours
// still tell embeddings, heads, MLPs and biases apart); hover names every bar.
function partTicks(c) {
  const idx = c.map((_, i) => i);
  if (c.length <= 60) return { vals: idx, text: c.map((r) => r.name), layerStarts: [], byLayer: false };
  const starts = idx.filter((i) => c[i].layer !== null && c[i].layer !== undefined && (i === 0 || c[i - 1].layer !== c[i].layer));
  return { vals: starts, text: starts.map((i) => `L${c[i].layer}`), layerStarts: starts, byLayer: true };
}

// One bar per part (coloured by kind), then the sum of the parts and the model's logit. Also the
// classifier panel's (a label's logit).
export function drawDecomposition(gd, d, title, name) {
  const c = d.contributions;
  const x = c.map((_, i) => i);
  // the two totals after the parts, one bar's width apart; with many parts each bar is narrow, so
  // the totals get u units each (u = 1 for up to 40 parts), wide enough to see and to label
  const u = Math.max(1, c.length / 40);
  const xSum = c.length - 0.5 + u;
  const xLogit = xSum + u;
  const data = [{
    type: "bar", x, y: c.map((r) => r.value), name: "contribution",
    marker: { color: c.map((r) => KIND_COLOR[r.kind] || OKABE.grey) },
    customdata: c.map((r) => [r.name, KIND_NAME[r.kind] || r.kind]),
    hovertemplate: "%{customdata[0]} (%{customdata[1]})<br>adds %{y} to the logit<extra></extra>",
  }, {
    type: "bar", x: [xSum], y: [d.total], name: "sum of the parts", width: [0.8 * u],
    marker: { color: OKABE.green }, hovertemplate: "sum of the parts %{y}<extra></extra>",
  }, {
    type: "bar", x: [xLogit], y: [d.logit], name: "the model's logit", width: [0.8 * u],
    marker: { color: OKABE.purple }, hovertemplate: "the model's logit %{y}<extra></extra>",
  }];
  const ticks = partTicks(c);
  const sep = (at) => ({ type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1, line: { color: "#bbb", dash: "dot" } });
  return draw(gd, data, {
    height: 420, showlegend: false, bargap: c.length > 60 ? 0.1 : 0.2,
    title: { text: title, x: 0, xanchor: "left", font: { size: 13 } },
    xaxis: { tickmode: "array", tickvals: [...ticks.vals, xSum, xLogit], ticktext: [...ticks.text, "<b>sum</b>", "<b>logit</b>"],
      tickangle: -60, tickfont: { family: MONO, size: 11 }, automargin: !ticks.byLayer },
    yaxis: { title: { text: "contribution to the logit" }, zeroline: true, zerolinecolor: "#888" },
    shapes: [sep(c.length - 0.25), ...ticks.layerStarts.map((i) => sep(i - 0.5))],
    margin: { l: 60, r: 10, t: 40, b: ticks.byLayer ? 70 : 110 },
  }, name);
}

// Stage 10, for main.js's table.
export const panel = {
  stage: "decomposition",
  parts: ["decomposition"],
  init: (page) => initDecomposition({
    onTargetChange: (t) => { page.state.target = t; page.writeUrl(); page.refresh("target"); },
  }),
  render: (trace, view) => {
    if (view.parts.includes("decomposition")) renderDecomposition(trace, trace.next_token, view.state.target, view.labels);
  },
};
