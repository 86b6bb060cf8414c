// The circuit panel: the pair's circuit at the slider's step (its size, the share of the effect it
// keeps, its largest edges), and every followed edge's EAP-IG score at every snapshot (rows: edges,
// columns: snapshots), a square where the edge is in that snapshot's circuit and a star at the step
// from which it stays in it (the API's `appears`).
import { $, el } from "../lib/dom.js";
import { decimal, int, pct } from "../lib/format.js";
import { MONO, OKABE, SIGNED } from "../lib/palette.js";
import { draw, signedLimit } from "../lib/plot.js";
import { columnBox, snapshotAxis } from "./axes.js";

function circuitWords(t, s) {
  if (!t.pair) return "No circuit is followed: no pair was asked for, or none fits this run's tokenizer.";
  const c = s.circuit;
  if (!c) {
    const why = s.pair_effect === null ? "the metric is the same on both prompts"
      : `its effect (clean minus corrupted) is ${decimal(s.pair_effect, 3)} nats, under the ${decimal(t.min_effect, 1)} a circuit needs`;
    return `No circuit at step ${int(s.step)}: on the ${t.pair} pair ${why}.`;
  }
  return `At step ${int(s.step)} the ${t.pair} circuit keeps ${int(c.edges)} of ${int(c.total_edges)} edges and `
    + `recovers ${pct(c.recovered)} of the effect: ${decimal(c.effect, 3)} nats of the metric, clean minus corrupted `
    + `(the clean prompt's metric is ${decimal(c.metric, 3)}). Its largest edges:`;
}

function edgesMap(t, i) {
  const gd = $("edges-map");
  const steps = t.snapshots.map((s) => s.step);
  const names = t.edges.map((e) => e.name);
  const z = t.edges.map((e) => e.scores);
  const lim = signedLimit(z);
  const inside = { x: [], y: [] };
  t.edges.forEach((e, r) => {
    e.in_circuit.forEach((on, k) => { if (on) { inside.x.push(k); inside.y.push(r); } });
  });
  const grown = t.edges.map((e, r) => [e, r]).filter(([e]) => e.appears !== null);
  const rowPx = Math.max(12, Math.min(22, Math.floor(720 / Math.max(1, names.length))));
  draw(gd, [{
    type: "heatmap", name: "EAP-IG score", z, x: steps.map((_, k) => k), y: names.map((_, r) => r),
    colorscale: SIGNED, zmin: -lim, zmax: lim, zmid: 0, xgap: 1, ygap: 1, hoverongaps: false,
    colorbar: { title: { text: "EAP-IG score", side: "right" }, thickness: 12 },
    customdata: names.map((n) => steps.map((s) => [n, s])),
    hovertemplate: "%{customdata[0]} · step %{customdata[1]}<br>EAP-IG score %{z:.4f}<extra></extra>",
  }, {
    type: "scatter", mode: "markers", name: "in the circuit", x: inside.x, y: inside.y, hoverinfo: "skip",
    marker: { symbol: "square-open", size: Math.max(6, rowPx - 6), color: OKABE.black, line: { width: 1.5 } },
  }, {
    type: "scatter", mode: "markers", name: "stays in it from here", x: grown.map(([e]) => steps.indexOf(e.appears)),
    y: grown.map(([, r]) => r), customdata: grown.map(([e]) => [e.name, e.appears]),
    marker: { symbol: "star", size: 11, color: OKABE.vermillion, line: { color: "#fff", width: 1 } },
    hovertemplate: "%{customdata[0]}<br>in the circuit from step %{customdata[1]} on<extra></extra>",
  }], {
    height: names.length * rowPx + 160, margin: { l: 60, r: 20, t: 40, b: 60 },
    xaxis: snapshotAxis(steps, (gd.clientWidth || 900) - 320),
    yaxis: { tickmode: "array", tickvals: names.map((_, r) => r), ticktext: names, range: [names.length - 0.5, -0.5],
      tickfont: { family: MONO, size: 11 }, showgrid: false, zeroline: false, automargin: true },
    legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom", font: { size: 11 } },
    shapes: [columnBox(i)],
  }, `circuit-edges-${t.run}`);
}

export const circuitView = {
  figures: ["edges-map"],
  render(t, i) {
    const s = t.snapshots[i];
    $("circuit-now").textContent = circuitWords(t, s);
    $("circuit-now").dataset.step = String(s.step);
    $("circuit-top").replaceChildren(...(s.circuit ? s.circuit.top : []).map((e) => el("li", { text: e })));
    $("edges-figure").hidden = !t.edges.length;
    if (t.edges.length) edgesMap(t, i);
  },
};
