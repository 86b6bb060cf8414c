// Optimisers panel: SGD, momentum, Adam, AdamW and Muon stepping on a narrow ravine; the contour
// grid and every path come from GET /api/v1/curves/optimizers (a path this page has no colour for
// still gets Plotly's own).
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("optimizers-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("optimizers-form");
const COLORS = { sgd: OKABE.vermillion, momentum: OKABE.orange, adam: OKABE.blue, adamw: OKABE.green, muon: OKABE.purple };
const SYMBOLS = { sgd: "circle", momentum: "square", adam: "diamond", adamw: "triangle-up", muon: "star" };

function hyper(p) {
  return Object.entries(p.hyper).map(([k, v]) => `${k} ${v}`).join(", ");
}

async function load(signal) {
  const b = keep(await apiGet(`/curves/optimizers?${formQuery(form)}`, signal));
  const data = [{
    x: b.grid.x, y: b.grid.y, z: b.grid.z_sqrt, text: b.grid.z.map((row) => row.map((v) => v.toPrecision(4))),
    type: "contour", colorscale: [[0, "#c8cbd6"], [1, "#c8cbd6"]], showscale: false,
    contours: { coloring: "lines" }, ncontours: 24, line: { width: 1 }, name: "loss",
    hovertemplate: "x %{x:.3f}, y %{y:.3f}<br>loss %{text}<extra>surface</extra>",
  }];
  for (const p of b.paths) {
    data.push({
      x: p.x, y: p.y, type: "scatter", mode: "lines+markers", name: `${p.label}${p.diverged ? " (diverged)" : ""}`,
      line: { color: COLORS[p.name], width: 2 }, marker: { color: COLORS[p.name], size: 5, symbol: SYMBOLS[p.name] },
      customdata: p.loss.map((l, i) => [i, l]),
      hovertemplate: `${p.label}<br>step %{customdata[0]}<br>x %{x:.4f}, y %{y:.4f}<br>loss %{customdata[1]:.5f}<extra></extra>`,
    });
  }
  data.push({ x: [b.minimum.x], y: [b.minimum.y], type: "scatter", mode: "markers", name: "bottom of the ravine",
    marker: { color: OKABE.black, size: 14, symbol: "x" }, hovertemplate: "minimum (%{x}, %{y})<extra></extra>" });
  data.push({ x: [b.start.x], y: [b.start.y], type: "scatter", mode: "markers", name: "start",
    marker: { color: OKABE.black, size: 11, symbol: "circle-open", line: { width: 2 } }, hovertemplate: "start (%{x}, %{y})<extra></extra>" });
  await chart($("optimizers-plot"), data, {
    xaxis: { title: { text: "x (shallow direction)" }, range: [b.grid.x[0], b.grid.x[b.grid.x.length - 1]] },
    yaxis: { title: { text: "y (steep direction)" }, range: [b.grid.y[0], b.grid.y[b.grid.y.length - 1]] },
    height: 460, legend: { orientation: "h", y: -0.18, x: 0 }, title: { text: b.formula, font: { size: 12 } },
  });
  await chart($("optimizers-loss-plot"), b.paths.map((p) => ({
    x: p.loss.map((_, i) => i), y: p.loss, type: "scatter", mode: "lines", name: p.label, line: { color: COLORS[p.name], width: 2 },
    hovertemplate: `${p.label}<br>step %{x}<br>loss %{y:.6f}<extra></extra>`,
  })), { xaxis: { title: { text: "step" } }, yaxis: { title: { text: "loss (log scale)" }, type: "log", exponentformat: "power", range: lossRange(b.paths) },
    height: 460, legend: { orientation: "h", y: -0.18, x: 0 }, title: { text: "Loss at every step", font: { size: 12 } } });
  const parts = b.paths.map((p) => p.diverged
    ? `${p.label} (${hyper(p)}) blew up after ${int(p.loss.length - 1)} steps`
    : `${p.label} (${hyper(p)}) ends at (${fixed(p.x[p.x.length - 1], 2)}, ${fixed(p.y[p.y.length - 1], 2)}) with loss ${sci(p.final_loss, 2)}`);
  $("optimizers-summary").textContent = `After ${b.steps} steps from (${b.start.x}, ${b.start.y}), aiming for the bottom at ` +
    `(${b.minimum.x}, ${b.minimum.y}):\n• ${parts.join("\n• ")}\nPlain SGD is only stable here while its learning rate stays ` +
    `below 2/b = ${fixed(b.sgd_stability_limit, 3)}; try a little more and watch it blow up.`;
}

// The loss axis spans from the highest loss down to at most eight decades under the start: Muon's
// fixed-length steps can land exactly on the bottom (a loss of 1e-30, or 0), and an axis reaching
// down to those would squash every other path into its top few millimetres. Hover keeps the exact value.
function lossRange(paths) {
  const all = paths.flatMap((p) => p.loss).filter((v) => v > 0 && Number.isFinite(v));
  if (!all.length) return undefined;
  const top = Math.max(...all);
  const low = Math.max(Math.min(...all), paths[0].loss[0] * 1e-8);
  return [Math.log10(low) - 0.2, Math.log10(top) + 0.2];
}

export function init() {
  keep = figureBars([
    ["optimizers-plot", "optimizer-paths"],
    ["optimizers-loss-plot", "optimizer-losses"],
  ]);
  bindForms(panel, form, load);
}
