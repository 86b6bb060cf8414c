// The circuit as a graph: the model's components laid out by layer (the input, each block's heads
// stacked in a column, then its MLP, the logits last), and the circuit's edges (the answer's
// circuit.edges) drawn as curves from writer to reader. An edge into a head ends at one of three
// ports on its left, query above, key in the middle, value below, each with its dash; width is the
// ranking score's size, colour its sign; a square at each edge's middle gives its name and scores.
// The positions are drawing only: every number shown is one of POST /api/v1/circuits's answer.
import { $ } from "../lib/dom.js";
import { decimal } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { METHOD_LABELS, edgeScores } from "./scores.js";

export const MAX_DRAWN = 200;  // the circuit's first edges drawn; a circuit of every edge would be a tangle
const PORT = 0.16;             // how far left of a node its input ports sit, right its output (x units)
const PORT_DY = { q: 0.22, k: 0, v: -0.22 };
const DASH = { q: "solid", k: "dash", v: "dot" };
const BOW = 0.12;              // a curve's bend, as a share of its length (at most MAX_BOW y units)
const MAX_BOW = 0.9;
const PALE = "#c9ceda";

// A node's column: the input 0, block l's heads 2l + 1 and its MLP 2l + 2, the logits last.
const column = (n, L) => (n.kind === "input" ? 0 : n.kind === "logits" ? 2 * L + 1 : n.kind === "mlp" ? 2 * n.layer + 2 : 2 * n.layer + 1);

// The heads (query heads) a reader or writer node stands for: a key/value head is shared by a group.
function headsOf(n, res) {
  if (n.kind === "head" || n.kind === "q") return [n.head];
  if (n.kind !== "k" && n.kind !== "v") return [];
  const r = res.n_head / res.n_kv_head;
  return Array.from({ length: r }, (_, i) => n.head * r + i);
}

// Head h's height: head 0 at the top; the input, the MLPs and the logits on the row y = 0 below.
const headY = (h, res) => res.n_head - h;
const nodeY = (n, res) => {
  const hs = headsOf(n, res);
  return hs.length ? hs.reduce((a, h) => a + headY(h, res), 0) / hs.length : 0;
};

// Where an edge starts (right of its writer) and ends (at its reader's port).
function ends(res, e) {
  const w = res.writers[res.edge_writer[e]];
  const r = res.readers[res.edge_reader[e]];
  const L = res.n_layer;
  const x0 = column(w, L) + PORT;
  const y0 = nodeY(w, res);
  const x1 = column(r, L) - PORT;
  const y1 = nodeY(r, res) + (PORT_DY[r.kind] ?? 0);
  return { w, r, x0, y0, x1, y1 };
}

// A quadratic curve from (x0, y0) to (x1, y1), bent off its chord (down between two nodes of the
// bottom row, up otherwise) so that it passes beside the nodes between them; and its middle.
function curve({ x0, y0, x1, y1 }) {
  const dx = x1 - x0;
  const dy = y1 - y0;
  const len = Math.hypot(dx, dy) || 1;
  const bow = Math.min(MAX_BOW, BOW * len) * (y0 === 0 && y1 === 0 ? -1 : 1);
  const cx = (x0 + x1) / 2 - (dy / len) * bow;
  const cy = (y0 + y1) / 2 + (dx / len) * bow;
  return { path: `M ${x0},${y0} Q ${cx},${cy} ${x1},${y1}`, mx: (x0 + 2 * cx + x1) / 4, my: (y0 + 2 * cy + y1) / 4 };
}

const htmlText = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const WHERE = { q: "query", k: "key", v: "value", mlp: "input", logits: "input" };

function edgeText(res, scores, e, rank) {
  const { r } = ends(res, e);
  const lines = Object.entries(scores).map(([m, v]) => `${METHOD_LABELS[m]} ${v[e] === null ? "—" : decimal(v[e], 4)}`);
  return `<b>${htmlText(res.edges[e])}</b> (into its ${WHERE[r.kind] ?? r.kind})<br>edge ${rank + 1} of the ranking<br>${lines.join("<br>")}`;
}

// The circuit's edges: one curve (a layout shape) each, and one trace of their middles to hover.
function edgeMarks(res, scores, drawn) {
  const rank = scores[res.circuit.ranked_by];
  let top = 0;
  for (const e of drawn) top = Math.max(top, Math.abs(rank[e] ?? 0));
  const colour = (e) => ((rank[e] ?? 0) < 0 ? OKABE.blue : OKABE.vermillion);
  const shapes = [];
  const mid = { x: [], y: [], text: [], color: [] };
  drawn.forEach((e, i) => {
    const end = ends(res, e);
    const c = curve(end);
    shapes.push({ type: "path", path: c.path, xref: "x", yref: "y", layer: "below",
      line: { color: colour(e), width: 1.2 + (6 * Math.abs(rank[e] ?? 0)) / (top || 1), dash: DASH[end.r.kind] ?? "solid" } });
    mid.x.push(c.mx); mid.y.push(c.my); mid.color.push(colour(e));
    mid.text.push(edgeText(res, scores, e, i));
  });
  const trace = { type: "scatter", mode: "markers", name: "edges", showlegend: false, x: mid.x, y: mid.y, text: mid.text,
    marker: { symbol: "square", size: 7, color: mid.color, line: { color: "#fff", width: 1 } },
    hovertemplate: "%{text}<extra></extra>" };
  return { shapes, trace };
}

// Every component as a dot: dark and labelled in bold if it takes part in the circuit.
function nodeTrace(res, drawn) {
  const L = res.n_layer;
  const inCircuit = new Set();
  for (const e of drawn) {
    const { w, r } = ends(res, e);
    inCircuit.add(w.name);
    for (const h of headsOf(r, res)) inCircuit.add(`a${r.layer}.h${h}`);
    if (!headsOf(r, res).length) inCircuit.add(r.name);
  }
  const nodes = [...res.writers, res.readers.find((n) => n.kind === "logits")];
  const on = nodes.map((n) => inCircuit.has(n.name));
  return { type: "scatter", mode: "markers+text", name: "components", showlegend: false,
    x: nodes.map((n) => column(n, L)), y: nodes.map((n) => nodeY(n, res)), text: nodes.map((n) => n.name),
    textposition: "top center", textfont: { family: MONO, size: 10, color: on.map((o) => (o ? OKABE.black : "#9aa0ad")) },
    marker: { size: on.map((o) => (o ? 15 : 10)), color: on.map((o) => (o ? OKABE.black : PALE)), line: { color: "#fff", width: 1 } },
    customdata: on.map((o) => (o ? "in the circuit" : "not in the circuit")),
    hovertemplate: "%{text} · %{customdata}<extra></extra>" };
}

// Legend entries only (no data): the three ports' dashes and the two signs' colours.
function legendTraces() {
  const entry = (name, line) => ({ type: "scatter", mode: "lines", x: [null], y: [null], name, line, hoverinfo: "skip" });
  return [
    entry("into a query (solid)", { color: OKABE.line, width: 2, dash: "solid" }),
    entry("into a key (dashed)", { color: OKABE.line, width: 2, dash: "dash" }),
    entry("into a value (dotted)", { color: OKABE.line, width: 2, dash: "dot" }),
    entry("cutting it lowers the metric", { color: OKABE.blue, width: 3 }),
    entry("cutting it raises the metric", { color: OKABE.vermillion, width: 3 }),
  ];
}

function columnAxis(L) {
  const text = ["input"];
  for (let l = 0; l < L; l++) text.push(`heads ${l}`, `MLP ${l}`);
  text.push("logits");
  return { tickmode: "array", tickvals: text.map((_, i) => i), ticktext: text, range: [-0.6, 2 * L + 1.6],
    showgrid: false, zeroline: false, tickfont: { size: 11 } };
}

// Draw the circuit (its first MAX_DRAWN edges); resolves once drawn.
export function renderGraph(res) {
  const scores = edgeScores(res);
  const drawn = res.circuit.edges.slice(0, MAX_DRAWN);
  const { shapes, trace } = edgeMarks(res, scores, drawn);
  const gd = $("graph-plot");
  gd.dataset.edges = String(drawn.length);
  return chart(gd, [trace, nodeTrace(res, drawn), ...legendTraces()], {
    height: Math.min(760, 200 + 70 * (res.n_head + 1)), shapes, hovermode: "closest", showlegend: true,
    margin: { l: 20, r: 20, t: 20, b: 48 }, xaxis: columnAxis(res.n_layer),
    yaxis: { range: [-1.3, res.n_head + 0.7], showgrid: false, zeroline: false, showticklabels: false, fixedrange: true },
  });
}
