// The /patch page's drawings: the two prompts' tokens with the differing ones outlined, the answer
// choices, the effect maps (layer × position, layer × head, head set × position) on a diverging
// scale with 0 and 1 marked, and one cell's patched distribution beside the clean and corrupted.
// Everything drawn is a number of POST /api/v1/patch's answer.
import { addDownloads } from "../lib/downloads.js";
import { $ } from "../lib/dom.js";
import { decimal, pct, visible } from "../lib/format.js";
import { metricWords, renderPair } from "../lib/pair.js";
import { DIVERGING, MONO, OKABE } from "../lib/palette.js";
import { PROB_TICKS, SLANTED_TICK_PX, chart, clearPlot, draw, tokenAxis } from "../lib/plot.js";

export const PLOTS = { resid_pre: "resid-plot", attn_out: "attn-plot", mlp_out: "mlp-plot", head: "head-plot", head_position: "hp-plot" };
let shown = null;       // the answer the maps show
let onPick = () => {};  // (cell) => void

export function initPatchViews(handlers) {
  onPick = handlers.onPick;
  for (const [kind, id] of Object.entries(PLOTS)) {
    addDownloads($(id), `patch-${kind}`, () => (shown ? { ...shown, sweeps: shown.sweeps.filter((s) => s.kind === kind) } : null));
  }
  addDownloads($("cell-plot"), "patch-cell", () => shown?.detail ?? null);
}

export function renderPrompts(res, handlers) {
  renderPair(res, handlers);
  $("metric-stats").textContent = `metric ${metricWords(res.metric)} at position ${res.metric.position}: clean ${decimal(res.clean_metric, 3)}, ` +
    `corrupted ${decimal(res.corrupted_metric, 3)} nats · ${res.runs} patched runs computed in ${decimal(res.seconds, 2)} s` +
    `${res.runs === 0 ? " (all from the cache)" : ""}`;
}

// One sweep as a heatmap: rows (layers, or the head set) by columns (positions or heads).
function sweepMap(gd, sweep, res, cell) {
  const labels = res[res.base === "corrupted" ? "corrupted_tokens" : "clean_tokens"].map((t) => visible(t.text));
  const byPos = sweep.columns === "position";
  const cols = byPos ? labels : Array.from({ length: res.n_head }, (_, h) => `head ${h}`);
  const rows = sweep.row_heads ? sweep.row_layers.map((l, r) => `L${l} H${sweep.row_heads[r]}`)
    : sweep.row_layers.map((l) => (l === res.n_layer ? "final" : `layer ${l}`));
  let lim = 1;
  for (const r of sweep.effect) for (const v of r) lim = Math.max(lim, Math.abs(v));
  const custom = sweep.effect.map((r, i) => r.map((_, j) => [rows[i], cols[j], sweep.patched[i][j]]));
  const data = [{
    type: "heatmap", z: sweep.effect, x: cols.map((_, j) => j), y: rows.map((_, i) => i), colorscale: DIVERGING,
    zmin: -lim, zmax: lim, zmid: 0, xgap: 1, ygap: 1, customdata: custom,
    colorbar: { title: { text: "effect", side: "right" }, thickness: 12, tickmode: "array",
      tickvals: [-1, 0, 1], ticktext: ["−1", "0 = corrupted", "1 = clean"] },
    hovertemplate: `%{customdata[0]} · ${byPos ? "position %{x} “%{customdata[1]}”" : "%{customdata[1]}"}` +
      "<br>effect %{z}<br>patched metric %{customdata[2]}<extra></extra>",
  }];
  const shapes = [];
  if (byPos) for (const p of res.differs) shapes.push({ type: "rect", xref: "x", yref: "paper", x0: p - 0.5, x1: p + 0.5, y0: 0, y1: 1,
    line: { color: OKABE.black, width: 1, dash: "dot" }, fillcolor: "rgba(0,0,0,0)" });
  const at = cellAt(sweep, cell);
  if (at) shapes.push({ type: "rect", xref: "x", yref: "y", x0: at[1] - 0.5, x1: at[1] + 0.5, y0: at[0] - 0.5, y1: at[0] + 0.5,
    line: { color: OKABE.black, width: 3 }, fillcolor: "rgba(0,0,0,0)" });
  const height = Math.max(200, 110 + rows.length * 26);
  const xaxis = byPos ? { ...tokenAxis(labels, Math.max(300, (gd.clientWidth || 900) - 200), {}, SLANTED_TICK_PX), tickangle: -60 }
    : { tickmode: "array", tickvals: cols.map((_, j) => j), ticktext: cols, showgrid: false, zeroline: false, automargin: true };
  const done = draw(gd, data, { height, shapes, margin: { l: 20, r: 10, t: 10, b: 10 }, xaxis,
    yaxis: { tickmode: "array", tickvals: rows.map((_, i) => i), ticktext: rows, autorange: "reversed",
      tickfont: { family: MONO, size: 11 }, showgrid: false, zeroline: false, automargin: true } }, `patch-${sweep.kind}`);
  if (!gd.dataset.clickBound) {
    gd.dataset.clickBound = "1";
    gd.on("plotly_click", (ev) => { const p = ev.points?.[0]; if (p && gd._sweep) onPick(cellOf(gd._sweep, p.y, p.x)); });
  }
  gd._sweep = sweep;
  return done;
}

// A cell of a sweep from its (row, column), and back.
export function cellOf(sweep, r, c) {
  const layer = sweep.row_layers[r];
  if (sweep.kind === "head") return { kind: "head", layer, head: c };
  if (sweep.kind === "head_position") return { kind: "head_position", layer, head: sweep.row_heads[r], position: c };
  return { kind: sweep.kind, layer, position: c };
}

export function cellAt(sweep, cell) {
  if (!cell || cell.kind !== sweep.kind) return null;
  const r = sweep.row_layers.findIndex((l, i) => l === cell.layer && (!sweep.row_heads || sweep.row_heads[i] === cell.head));
  if (r < 0) return null;
  return [r, sweep.kind === "head" ? cell.head : cell.position];
}

export function renderSweeps(res, cell) {
  shown = res;
  // the head set's map (and its download bar) only once the set has a head: until then, a note
  const heads = res.sweeps.some((s) => s.kind === "head_position");
  $("hp-box").hidden = !heads;
  $("hp-empty").hidden = heads;
  for (const [kind, id] of Object.entries(PLOTS)) {
    const sweep = res.sweeps.find((s) => s.kind === kind);
    if (sweep) sweepMap($(id), sweep, res, cell);
    else if (kind === "head_position") clearPlot($(id));
  }
  document.body.dataset.sweeps = res.sweeps.map((s) => s.kind).join(",");
}

export const cellName = (c) => (c.kind === "head" ? `head ${c.layer}.${c.head} at every position`
  : c.kind === "head_position" ? `head ${c.layer}.${c.head} at position ${c.position}`
    : `${c.kind} of layer ${c.layer} at position ${c.position}`);

export function renderCell(res) {
  const d = res.detail;
  if (!d) return;
  if (shown) shown = { ...shown, detail: d };
  $("cell-box").hidden = false;   // (until a cell is picked, a note says how)
  $("cell-empty").hidden = true;
  $("cell-tag").textContent = cellName(d.cell);
  $("cell-stats").textContent = `patched metric ${decimal(d.patched_metric, 3)} (clean ${decimal(res.clean_metric, 3)}, ` +
    `corrupted ${decimal(res.corrupted_metric, 3)}) · effect ${decimal(d.effect, 3)} · the patched run's top token “${visible(d.top[0].text)}” ${pct(d.top[0].prob)}`;
  const x = d.compared.map((t) => visible(t.text));
  const bar = (key, name, color) => ({ type: "bar", name, x, y: d.compared.map((t) => t[key]), marker: { color },
    hovertemplate: `${name} · “%{x}” %{y:.2%}<extra></extra>` });
  chart($("cell-plot"), [bar("clean", "clean", OKABE.vermillion), bar("corrupted", "corrupted", OKABE.blue), bar("patched", "patched", OKABE.black)],
    // the tokens slanted at an angle of our own: the legend below makes room for that angle (at one
    // Plotly picked itself, the slanted names ran down into the legend)
    { barmode: "group", yaxis: { title: { text: "probability" }, tickformat: PROB_TICKS }, xaxis: { tickfont: { family: MONO }, tickangle: -45 } });
  $("cell-plot").dataset.cell = JSON.stringify(d.cell);
}
