// Stage 6: the residual stream's norm per position after each block, and the lenses that read it
// early: the logit lens, or a tuned lens (one learned map per stage) picked here, with both lenses'
// figures per stage (held-out text, and this prompt).
// Data: the `residual`, `logit_lens` and `tuned_lens` parts of POST /api/v1/forward; the lenses
// come from GET /api/v1/lenses.
import { apiGet } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct, tokenLabels, visible } from "../lib/format.js";
import { MONO, OKABE, SEQ } from "../lib/palette.js";
import { SLANTED_TICK_PX, chart, clearPlot, draw, tokenAxis } from "../lib/plot.js";

let residual = null;
let logit = null;     // the trace's logit_lens part
let tuned = null;     // its tuned_lens part (null: the model has no tuned lens)
let labels = [];
let position = 0;
let page = null;
const LOG_TICKS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100];

// The lens on show: the tuned one when the URL's `lens` names it (page.state.lens), else the logit lens.
const showsTuned = () => !!(page?.state.lens && tuned);
const shown = () => (showsTuned() ? tuned : logit);
const lensName = () => (showsTuned() ? `tuned lens ${tuned.lens}` : "logit lens");

export async function initResidual(p) {
  page = p;
  addDownloads($("resid-norm-plot"), "residual-norms", () => residual);
  addDownloads($("lens-plot"), "lens", () => shown());
  addDownloads($("lens-kl-plot"), "lens-figures", () => ({ logit_lens: logit && figuresOf(logit), tuned_lens: tuned && { ...figuresOf(tuned), lens: tuned.lens, held_out: tuned.held_out } }));
  const { lenses } = await apiGet("/lenses");
  if (!lenses.some((l) => l.name === page.state.lens)) page.state.lens = null;
  const pick = $("lens-pick");
  pick.replaceChildren(new Option("logit lens", ""), ...lenses.map((l) => new Option(`tuned lens: ${l.name}`, l.name)));
  pick.value = page.state.lens || "";
  if (!lenses.length) {
    setNote($("lens-note"), "The served model has no tuned lens: train one (gptscope lens, or POST /api/v1/lenses), " +
      "then it can be picked here with its figures beside the logit lens's.");
  }
  pick.addEventListener("change", () => {
    page.state.lens = pick.value || null;
    page.writeUrl();
    if (pick.value && tuned?.lens !== pick.value) page.requestForward(["tuned_lens"], 0);
    else drawLenses();
  });
}

const figuresOf = (L) => ({ stages: L.stages, kl_to_final: L.kl_to_final, top1_agreement: L.top1_agreement });

export function renderResidual(trace, pos) {
  if (trace.tokens) labels = tokenLabels(trace.tokens);
  if (trace.residual) residual = trace.residual;
  if (trace.logit_lens) logit = trace.logit_lens;
  tuned = trace.tuned_lens || null;
  position = pos;
  if (residual) later("resid-norms", $("resid-norm-plot"), drawNorms);
  drawLenses();
}

function drawLenses() {
  if (!logit) return;
  $("lens-which").textContent = lensName();
  $("lens-plot").dataset.lens = showsTuned() ? tuned.lens : "logit";
  later("lens", $("lens-plot"), drawLens);
  $("lens-kl").hidden = !tuned;
  later("lens-kl", $("lens-kl-plot"), drawFigures);
  drawLensTable();
  drawFiguresTable();
}

export function setResidualPosition(pos) {
  position = pos;
  if (logit) drawLensTable();
  if (residual) later("resid-norms", $("resid-norm-plot"), drawNorms);
  if (logit) later("lens", $("lens-plot"), drawLens);
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
  const L = shown();
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
    hovertemplate: `${lensName()}, after %{customdata[0]}, position %{x} “%{customdata[1]}”<br>top guess “%{customdata[2]}” %{customdata[3]:.2%}` +
      "<br>actual next “%{customdata[4]}”: %{z:.2%}<extra></extra>",
  }], {
    height: 140 + 40 * L.stages.length,
    xaxis: positionAxis(width - 200),
    yaxis: { tickmode: "array", tickvals: L.stages.map((_, i) => i), ticktext: L.stages.map((s) => `after ${s}`), autorange: "reversed", tickfont: { family: MONO }, automargin: true },
    shapes: [colBox(L.stages.length)],
    plot_bgcolor: "#e9e9e9",
    margin: { l: 10, r: 10, t: 10, b: 10 },
  }, "lens");
}

function drawLensTable() {
  const L = shown();
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
    el("caption", { text: `${lensName()} at position ${p} “${labels[p] ?? ""}”` }), el("thead", {}, head), el("tbody", {}, ...rows));
}

// Held-out KL to the final distribution per stage, both lenses (log scale: the embeddings' is tens of
// nats, the last block's 0, which a log axis leaves out and the table gives).
function drawFigures() {
  const gd = $("lens-kl-plot");
  if (!tuned) { clearPlot(gd); return; }
  const h = tuned.held_out.stages;
  const x = h.map((s) => `after ${s.stage}`);
  const line = (name, kl, top1, color) => ({
    type: "scatter", mode: "lines+markers", name, x, y: h.map((s) => (s[kl] > 0 ? s[kl] : null)), line: { color },
    customdata: h.map((s) => [s[kl], s[top1]]),
    hovertemplate: `${name}, %{x}<br>KL %{customdata[0]:.4f} nats<br>top-1 agreement %{customdata[1]:.1%}<extra></extra>`,
  });
  chart(gd, [line("logit lens", "logit_kl", "logit_top1", OKABE.blue), line(`tuned lens ${tuned.lens}`, "tuned_kl", "tuned_top1", OKABE.vermillion)], {
    height: 300, xaxis: { tickfont: { family: MONO } },
    yaxis: { type: "log", title: { text: "KL(final ‖ lens), nats" }, tickvals: LOG_TICKS, ticktext: LOG_TICKS.map(String) },
  });
}

function drawFiguresTable() {
  const h = tuned ? tuned.held_out.stages : null;
  const cols = [...(h ? ["held-out KL, logit", "held-out KL, tuned", "held-out top-1, logit", "held-out top-1, tuned"] : []),
    "this prompt: KL, logit", "top-1, logit", ...(tuned ? ["this prompt: KL, tuned", "top-1, tuned"] : [])];
  const rows = logit.stages.map((s, i) => el("tr", {}, el("th", { text: `after ${s}` }),
    ...(h ? [decimal(h[i].logit_kl, 3), decimal(h[i].tuned_kl, 3), pct(h[i].logit_top1), pct(h[i].tuned_top1)] : []).map((t) => el("td", { class: "num", text: t })),
    el("td", { class: "num", text: decimal(logit.kl_to_final[i], 3) }), el("td", { class: "num", text: pct(logit.top1_agreement[i]) }),
    ...(tuned ? [decimal(tuned.kl_to_final[i], 3), pct(tuned.top1_agreement[i])] : []).map((t) => el("td", { class: "num", text: t }))));
  const what = h ? `held out: ${h.length ? tuned.held_out.tokens.toLocaleString("en-US") : 0} tokens of the corpus's last 10%` : "no tuned lens: this prompt only";
  $("lens-figures").replaceChildren(el("caption", { text: `KL from the final distribution (nats) and top-1 agreement per stage (${what})` }),
    el("thead", {}, el("tr", {}, el("th", { text: "stage" }), ...cols.map((c) => el("th", { text: c })))), el("tbody", {}, ...rows));
}

// Stage 6, for main.js's table: drawn once per prompt (and when another tuned lens comes), then only the position moves.
export const panel = {
  stage: "residual",
  parts: ["residual", "logit_lens", "tuned_lens"],
  init: (p) => initResidual(p),
  render: (trace, view) => {
    if (view.promptChanged || view.parts.includes("tuned_lens")) renderResidual(trace, trace.position);
  },
  position: (sel) => setResidualPosition(sel.position),
};
