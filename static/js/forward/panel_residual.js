// Stage 6: the residual stream's norm per position after each block, and the logit lens.
// Data: the `residual` and `logit_lens` parts of POST /api/v1/forward.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { pct, tokenLabels, visible } from "../lib/format.js";
import { MONO, SEQ } from "../lib/palette.js";
import { SLANTED_TICK_PX, draw, tokenAxis } from "../lib/plot.js";

let residual = null;
let lens = null;
let labels = [];
let position = 0;

export function initResidual() {
  addDownloads($("resid-norm-plot"), "residual-norms", () => residual);
  addDownloads($("lens-plot"), "logit-lens", () => lens);
}

export function renderResidual(trace, pos) {
  if (trace.tokens) labels = tokenLabels(trace.tokens);
  if (trace.residual) residual = trace.residual;
  if (trace.logit_lens) lens = trace.logit_lens;
  position = pos;
  if (residual) later("resid-norms", $("resid-norm-plot"), drawNorms);
  if (lens) { later("lens", $("lens-plot"), drawLens); drawLensTable(); }
}

export function setResidualPosition(pos) {
  position = pos;
  if (lens) drawLensTable();
  if (residual) later("resid-norms", $("resid-norm-plot"), drawNorms);
  if (lens) later("lens", $("lens-plot"), drawLens);
}

function positionAxis(px) {
  return { ...tokenAxis(labels, px, {}, SLANTED_TICK_PX), tickangle: -60, title: { text: "position (token)" } };
}

function colBox(n) {
  return { type: "rect", xref: "x", yref: "y", x0: position - 0.5, x1: position + 0.5, y0: -0.5, y1: n - 0.5,
    line: { color: "#D55E00", width: 2 } };
}

function drawNorms() {
  const r = residual;
  const gd = $("resid-norm-plot");
  const width = gd.clientWidth || 1000;
  draw(gd, [{
    type: "heatmap", z: r.norms, y: r.stages.map((_, i) => i), x: labels.map((_, i) => i), colorscale: SEQ,
    colorbar: { title: { text: "‖stream‖" }, thickness: 10 },
    customdata: r.stages.map((s) => labels.map((t) => [s, t])),
    hovertemplate: "after %{customdata[0]}<br>position %{x} “%{customdata[1]}”<br>norm %{z}<extra></extra>",
  }], {
    height: 120 + 36 * r.stages.length,
    xaxis: positionAxis(width - 200),
    yaxis: { tickmode: "array", tickvals: r.stages.map((_, i) => i), ticktext: r.stages.map((s) => `after ${s}`), autorange: "reversed", tickfont: { family: MONO }, automargin: true },
    shapes: [colBox(r.stages.length)],
    margin: { l: 10, r: 10, t: 10, b: 10 },
  }, "residual-norms");
}

function drawLens() {
  const L = lens;
  const gd = $("lens-plot");
  const width = gd.clientWidth || 1000;
  const n = labels.length;
  const showText = n <= 40;
  // each top guess written in its cell, cut to what fits there (10-px mono: 6 px a character);
  // hover and the table below give it whole
  const fits = Math.max(1, Math.floor((width - 200) / Math.max(1, n) / 6.2));
  const cut = (s) => ([...s].length <= fits ? s : `${[...s].slice(0, Math.max(1, fits - 1)).join("")}…`);
  draw(gd, [{
    type: "heatmap", z: L.actual_next_prob, y: L.stages.map((_, i) => i), x: L.positions,
    colorscale: SEQ, zmin: 0, zmax: 1, colorbar: { title: { text: "p(actual next)" }, thickness: 10 },
    text: L.top.map((row) => row.map((c) => cut(visible(c[0].text)))),
    texttemplate: showText ? "%{text}" : undefined, textfont: { family: MONO, size: 10 },
    customdata: L.top.map((row, s) => row.map((c, p) => [L.stages[s], labels[p], visible(c[0].text), c[0].prob,
      p + 1 < n ? labels[p + 1] : "(none: last position)"])),
    hoverongaps: true,
    hovertemplate: "after %{customdata[0]}, position %{x} “%{customdata[1]}”<br>top guess “%{customdata[2]}” %{customdata[3]:.2%}" +
      "<br>actual next “%{customdata[4]}”: %{z:.2%}<extra></extra>",
  }], {
    height: 140 + 40 * L.stages.length,
    xaxis: positionAxis(width - 200),
    yaxis: { tickmode: "array", tickvals: L.stages.map((_, i) => i), ticktext: L.stages.map((s) => `after ${s}`), autorange: "reversed", tickfont: { family: MONO }, automargin: true },
    shapes: [colBox(L.stages.length)],
    plot_bgcolor: "#e9e9e9",
    margin: { l: 10, r: 10, t: 10, b: 10 },
  }, "logit-lens");
}

function drawLensTable() {
  const L = lens;
  const p = Math.min(position, L.positions.length - 1);
  const nextLabel = p + 1 < labels.length ? `“${labels[p + 1]}”` : "(the prompt ends here)";
  const k = L.top[0][p].length;
  const head = el("tr", {}, el("th", { text: "stage" }),
    ...Array.from({ length: k }, (_, i) => el("th", { text: `guess ${i + 1}` })),
    el("th", { text: `p(actual next ${nextLabel})` }));
  const rows = L.stages.map((s, si) => el("tr", {}, el("th", { text: `after ${s}` }),
    ...L.top[si][p].map((c) => el("td", {}, el("span", { class: "mono", text: `“${visible(c.text)}”` }), ` ${pct(c.prob)}`)),
    el("td", { class: "num", text: L.actual_next_prob[si][p] === null ? "—" : pct(L.actual_next_prob[si][p], 2) })));
  $("lens-table").replaceChildren(
    el("caption", { text: `position ${p} “${labels[p] ?? ""}”` }), el("thead", {}, head), el("tbody", {}, ...rows));
}

// Stage 6, for main.js's table: drawn once per prompt, then only the position moves.
export const panel = {
  stage: "residual",
  parts: ["residual", "logit_lens"],
  init: () => initResidual(),
  render: (trace, view) => { if (view.promptChanged) renderResidual(trace, trace.position); },
  position: (sel) => setResidualPosition(sel.position),
};
