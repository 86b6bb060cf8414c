// The /genealogy page's history before GPT and MoE's capacity: a perceptron's line epoch by epoch,
// an MLP's bent boundary, how far one layer of each family reaches, experts against compute. Each
// panel draws one GET /api/v1/genealogy/{perceptron,mlp,reach,moe} answer; lines are drawn from
// the ends the API gives.
import { apiGet } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { fixed, grouped, pct } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE, SERIES } from "../lib/palette.js";
import { chart } from "../lib/plot.js";

const CLASS_COLOUR = [OKABE.blue, OKABE.vermillion];
const SQUARE = { range: [-1.05, 1.05], zeroline: false, constrain: "domain" };

function pointTraces(pts) {
  return [0, 1].map((c) => {
    const idx = pts.label.map((y, i) => (y === c ? i : -1)).filter((i) => i >= 0);
    return {
      type: "scatter", mode: "markers", name: `class ${c}`, x: idx.map((i) => pts.x1[i]), y: idx.map((i) => pts.x2[i]),
      marker: { size: 7, color: CLASS_COLOUR[c], symbol: c ? "circle" : "x", line: { width: 1, color: "#fff" } },
      hovertemplate: `class ${c}: (%{x:.2f}, %{y:.2f})<extra></extra>`,
    };
  });
}

function squareLayout(title) {
  return {
    height: 400, title: { text: title, font: { size: 12 } },
    xaxis: { ...SQUARE, title: { text: "x1" } }, yaxis: { ...SQUARE, title: { text: "x2" }, scaleanchor: "x" },
  };
}

// A panel drawn from GET /api/v1/genealogy/NAME at the values of its form #NAME-form (again at
// each change): `draw(answer)` draws it, and each of its figures, [id, file name], has a download
// bar with that answer. In embed mode only the panel shown is asked for.
export function bindGenealogyPanel(name, figures, draw) {
  let shown = null;
  for (const [id, file] of figures) addDownloads($(id), file, () => shown);
  if (!panelShown(name)) return;
  bindForms($(`${name}-panel`), $(`${name}-form`), async (signal) => {
    const r = await apiGet(`/genealogy/${name}?${formQuery($(`${name}-form`))}`, signal);
    if (signal.aborted) return;
    shown = r;
    await draw(r);
  });
}

// --- the perceptron ------------------------------------------------------------------------

function drawPerceptronEpoch(res, k) {
  const e = res.epochs[k];
  $("p-epoch-out").textContent = String(e.epoch);
  $("perceptron-summary").textContent =
    `epoch ${e.epoch}: w = (${fixed(e.w1)}, ${fixed(e.w2)}), b = ${fixed(e.b)}; ${e.mistakes} mistakes; accuracy ${pct(e.accuracy)}`;
  const line = { type: "scatter", mode: "lines", name: "the perceptron's line", x: e.line_x1, y: e.line_x2,
    line: { color: OKABE.black, width: 2 }, hoverinfo: "skip" };
  const verdict = res.converged ? `converged after ${res.epochs.length} epochs` : `not converged in ${res.epochs.length} epochs`;
  return chart($("perceptron-plot"), [...pointTraces(res.points), line], squareLayout(`${res.data}: ${verdict}`));
}

function drawMistakes(res, k) {
  return chart($("mistakes-plot"), [{
    type: "bar", name: "mistakes (updates) in the epoch", x: res.epochs.map((e) => e.epoch), y: res.epochs.map((e) => e.mistakes),
    marker: { color: res.epochs.map((_, i) => (i === k ? OKABE.vermillion : OKABE.sky)) },
    hovertemplate: "epoch %{x}: %{y} mistakes<extra></extra>",
  }, {
    type: "scatter", mode: "lines+markers", name: "accuracy after the epoch", yaxis: "y2",
    x: res.epochs.map((e) => e.epoch), y: res.epochs.map((e) => e.accuracy), marker: { color: OKABE.green },
    hovertemplate: "epoch %{x}: %{y:.0%}<extra></extra>",
  }], {
    height: 400, xaxis: { title: { text: "epoch" }, dtick: res.epochs.length > 20 ? 5 : 1 },
    yaxis: { title: { text: "mistakes" }, rangemode: "tozero" },
    yaxis2: { overlaying: "y", side: "right", range: [0, 1.05], tickformat: ".0%", automargin: true, title: { text: "accuracy", standoff: 8 } },
  });
}

function bindPerceptron() {
  const slider = $("p-epoch");
  let res = null;
  const show = () => res && Promise.all([drawPerceptronEpoch(res, +slider.value - 1), drawMistakes(res, +slider.value - 1)]);
  slider.addEventListener("input", show);
  bindGenealogyPanel("perceptron", [["perceptron-plot", "perceptron-line"], ["mistakes-plot", "perceptron-mistakes"]], (r) => {
    res = r;
    slider.max = String(r.epochs.length);
    slider.value = String(r.epochs.length);
    return show();
  });
}

// --- the MLP -------------------------------------------------------------------------------

function drawMlp(r) {
  const shade = { type: "heatmap", name: "P(class 1)", x: r.grid_axis, y: r.grid_axis, z: r.grid, zmin: 0, zmax: 1,
    colorscale: [[0, "#d6e6f4"], [0.5, "#ffffff"], [1, "#f8d3c4"]], showscale: false,
    hovertemplate: "P(class 1) at (%{x:.2f}, %{y:.2f}): %{z:.3f}<extra></extra>" };
  const lines = r.lines.filter((l) => l.line_x1.length).map((l, i) => ({
    type: "scatter", mode: "lines", name: i ? undefined : "hidden units' lines", showlegend: i === 0, legendgroup: "hidden",
    x: l.line_x1, y: l.line_x2, line: { color: "#777", width: 1, dash: "dash" }, hoverinfo: "skip",
  }));
  const title = `${r.data}, ${r.hidden} hidden: accuracy ${pct(r.accuracy)} (a perceptron: ${pct(r.perceptron_accuracy)})`;
  return chart($("mlp-plot"), [shade, ...lines, ...pointTraces(r.points)], squareLayout(title));
}

function drawMlpLoss(r) {
  return chart($("mlp-loss-plot"), [{
    type: "scatter", mode: "lines", name: "cross-entropy", x: r.steps, y: r.loss, line: { color: OKABE.orange },
    hovertemplate: "step %{x}: %{y:.4f} nats<extra></extra>",
  }], { height: 400, xaxis: { title: { text: "training step" } }, yaxis: { type: "log", dtick: 1, title: { text: "loss (nats, log scale)" } } });
}

function bindMlp() {
  bindGenealogyPanel("mlp", [["mlp-plot", "mlp-boundary"], ["mlp-loss-plot", "mlp-loss"]], (r) => Promise.all([drawMlp(r), drawMlpLoss(r)]));
}

// --- reach ---------------------------------------------------------------------------------

const ARCH_NAMES = { mlp: "MLP (per position)", cnn: "causal convolutions", rnn: "RNN", attention: "attention" };

function drawReach(r) {
  const xs = r.curves[0].relative.map((_, i) => i + 1);
  return chart($("reach-plot"), r.curves.map((c, i) => ({
    type: "scatter", mode: "lines+markers", name: ARCH_NAMES[c.arch], x: xs, y: c.relative, marker: { color: SERIES[i] },
    customdata: c.sensitivity.map((s, t) => [s, c.path[t] === null ? "cannot reach" : `${c.path[t]} steps`]),
    hovertemplate: `${ARCH_NAMES[c.arch]}, input %{x}: %{customdata[0]:.4g} (%{customdata[1]})<extra></extra>`,
  })), {
    height: 360, xaxis: { title: { text: `input position (the output is read at position ${r.positions})` }, dtick: r.positions > 32 ? 4 : 1 },
    yaxis: { title: { text: "effect on the last output (of its peak)" }, range: [0, 1.05], tickformat: ".0%" },
  });
}

function bindReach() {
  bindGenealogyPanel("reach", [["reach-plot", "reach-by-architecture"]], drawReach);
}

// --- MoE -----------------------------------------------------------------------------------

function drawMoe(r) {
  const xs = r.rows.map((x) => x.experts);
  const hover = (what) => `%{x} experts: %{y:.3~f}x GPT-2 XL's ${what}<extra></extra>`;
  return chart($("moe-plot"), [
    { type: "scatter", mode: "lines+markers", name: "stored weights", x: xs, y: r.rows.map((x) => x.capacity_ratio),
      marker: { color: OKABE.blue }, hovertemplate: hover("weights") },
    { type: "scatter", mode: "lines+markers", name: "compute per token", x: xs, y: r.rows.map((x) => x.compute_ratio),
      marker: { color: OKABE.vermillion }, hovertemplate: hover("FLOPs per token") },
  ], {
    xaxis: { type: "log", dtick: 1, title: { text: "experts per layer (log scale)" } },
    yaxis: { type: "log", dtick: 1, title: { text: `times ${r.base} (log scale)` } },
  });
}

function renderMoeTable(r) {
  $("moe-table").replaceChildren(el("table", { id: "moe-rows" },
    el("caption", { text: `${r.base} with experts, ${r.rows[r.rows.length - 1].top_k} per token` }),
    el("tr", {}, ["experts", "stored weights", "used per token", "capacity", "compute"].map((h) => el("th", { text: h }))),
    r.rows.map((x) => el("tr", {}, el("th", { text: String(x.experts) }), el("td", { text: grouped(x.total) }),
      el("td", { text: grouped(x.active) }), el("td", { text: `${fixed(x.capacity_ratio, 1)}x` }),
      el("td", { text: `${fixed(x.compute_ratio, 3)}x` })))));
}

function bindMoe() {
  bindGenealogyPanel("moe", [["moe-plot", "moe-capacity-compute"]], (r) => {
    renderMoeTable(r);
    return drawMoe(r);
  });
}

export function initHistory() {
  bindPerceptron();
  bindMlp();
  bindReach();
  bindMoe();
}
