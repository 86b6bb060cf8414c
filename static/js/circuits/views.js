// The /circuits page's panels other than the graph: the two prompts and the metric, the
// faithfulness curve (share recovered against edges kept, on a log axis), the estimates against the
// exact scores (with each method's largest errors), and the table of the circuit's edges. Each
// figure has its download bar. Every number drawn is one of POST /api/v1/circuits's answer.
import { addDownloads } from "../lib/downloads.js";
import { $, el } from "../lib/dom.js";
import { decimal, int, pct } from "../lib/format.js";
import { metricWords, renderPair } from "../lib/pair.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { MAX_DRAWN } from "./graph.js";
import { METHOD_LABELS, edgeScores } from "./scores.js";

const ZERO_AT = 0.5;   // where "no edge kept" sits on the log axis (labelled 0)
const MAX_ROWS = 60;   // the table's rows at most
const COLOURS = { atp: OKABE.orange, eap_ig: OKABE.blue };
let shown = null;      // the answer the panels show

export function initCircuitViews() {
  const part = (keys) => () => (shown ? Object.fromEntries(keys.map((k) => [k, shown[k]])) : null);
  addDownloads($("graph-plot"), "circuit-graph",
    part(["n_layer", "n_head", "n_kv_head", "writers", "readers", "edges", "edge_writer", "edge_reader", "scores", "circuit"]));
  addDownloads($("curve-plot"), "circuit-faithfulness", part(["clean_metric", "corrupted_metric", "circuit"]));
  addDownloads($("scatter-plot"), "circuit-estimates", part(["edges", "scores", "comparisons"]));
  addDownloads($("edges-table"), "circuit-edges", part(["edges", "scores", "circuit"]));
}

export function renderPairPanel(res, handlers) {
  shown = res;
  renderPair(res, handlers);
  $("metric-stats").textContent = `metric ${metricWords(res.metric)} at position ${res.metric.position}: ` +
    `clean ${decimal(res.clean_metric, 3)}, corrupted ${decimal(res.corrupted_metric, 3)} nats · ` +
    `${int(res.edges.length)} edges scored with ${int(res.runs)} graph runs in ${decimal(res.seconds, 2)} s` +
    `${res.runs === 0 ? " (all from the cache)" : ""}`;
}

// The circuit in words, over the graph and in the bar.
export function renderCircuitStats(res) {
  const c = res.circuit;
  const n = c.edges.length;
  const drawn = n > MAX_DRAWN ? ` (the first ${MAX_DRAWN} drawn)` : "";
  const miss = c.reached ? "" : ": no circuit reaches the target, so it keeps every edge";
  $("circuit-stats").textContent = `${int(n)} of ${int(res.edges.length)} edges${drawn}, ranked by ${METHOD_LABELS[c.ranked_by]}, ` +
    `recover ${pct(c.recovered)} of the metric (target ${pct(c.target)})${miss} · the circuit's metric ` +
    `${decimal(c.metric, 3)} nats (clean ${decimal(res.clean_metric, 3)}, corrupted ${decimal(res.corrupted_metric, 3)})`;
  $("bar-stats").textContent = `circuit: ${int(n)} edges · ${pct(c.recovered)} recovered (target ${pct(c.target)})`;
}

// A log axis of edge counts: 1, 10, 100, ... and the "none kept" point at ZERO_AT labelled 0.
function edgesAxis(nEdges, by) {
  const vals = [ZERO_AT];
  for (let v = 1; v <= nEdges * 1.5; v *= 10) vals.push(v);
  return { type: "log", tickmode: "array", tickvals: vals, ticktext: vals.map((v) => (v === ZERO_AT ? "0" : int(v))),
    range: [Math.log10(ZERO_AT * 0.8), Math.log10(nEdges * 1.25)],
    title: { text: `edges kept (the first of the ranking by ${by}; the others cut)` } };
}

export function renderCurve(res) {
  const c = res.circuit;
  const at = (k) => (k === 0 ? ZERO_AT : k);
  const n = res.edges.length;
  const size = c.edges.length;
  const line = { type: "scatter", mode: "lines+markers", name: "share recovered", x: c.curve.map((p) => at(p.edges)),
    y: c.curve.map((p) => p.recovered), customdata: c.curve.map((p) => [p.edges, p.metric]),
    line: { color: OKABE.blue, width: 2 }, marker: { size: 6 },
    hovertemplate: "%{customdata[0]} edges kept<br>share recovered %{y}<br>metric %{customdata[1]} nats<extra></extra>" };
  const target = { type: "scatter", mode: "lines", name: `target ${pct(c.target)}`, x: [ZERO_AT, n], y: [c.target, c.target],
    line: { color: OKABE.line, dash: "dash", width: 1.5 }, hoverinfo: "skip" };
  const circuit = { type: "scatter", mode: "markers", name: `the circuit: ${int(size)} edges, ${pct(c.recovered)}`,
    x: [at(size)], y: [c.recovered], customdata: [[size, c.metric]],
    marker: { symbol: "diamond", size: 13, color: OKABE.vermillion, line: { color: OKABE.black, width: 1 } },
    hovertemplate: "the circuit: %{customdata[0]} edges<br>share recovered %{y}<br>metric %{customdata[1]} nats<extra></extra>" };
  return chart($("curve-plot"), [line, target, circuit], {
    xaxis: edgesAxis(n, METHOD_LABELS[c.ranked_by]),
    yaxis: { title: { text: "share of the metric recovered" }, zeroline: true, zerolinecolor: "#bbb" },
  });
}

// Each estimate against the exact scores, over the edges with both; the diagonal y = x.
export function renderScatter(res) {
  const scores = edgeScores(res);
  const exact = res.scores.find((s) => s.method === "exact");
  const idx = exact.edges ?? res.edges.map((_, i) => i);
  const traces = res.comparisons.map((c) => ({
    type: "scatter", mode: "markers", name: `${METHOD_LABELS[c.method]} (Pearson r = ${decimal(c.pearson, 3)})`,
    x: exact.values, y: idx.map((e) => scores[c.method][e]), text: idx.map((e) => res.edges[e]),
    marker: { size: 6, opacity: 0.75, color: COLOURS[c.method] },
    hovertemplate: `%{text}<br>exact %{x}<br>${METHOD_LABELS[c.method]} %{y}<extra></extra>`,
  }));
  const all = traces.flatMap((t) => [...t.x, ...t.y]);
  const lo = Math.min(...all);
  const hi = Math.max(...all);
  traces.push({ type: "scatter", mode: "lines", name: "y = x (estimate = exact)", x: [lo, hi], y: [lo, hi],
    line: { color: OKABE.line, dash: "dash", width: 1 }, hoverinfo: "skip" });
  renderErrors(res);
  return chart($("scatter-plot"), traces, { height: 420,
    xaxis: { title: { text: "exact score (nats)" }, zeroline: true, zerolinecolor: "#ddd" },
    yaxis: { title: { text: "estimate (nats)" }, zeroline: true, zerolinecolor: "#ddd" } });
}

function renderErrors(res) {
  $("errors").replaceChildren(...res.comparisons.map((c) => {
    const cap = `${METHOD_LABELS[c.method]}'s largest errors · Pearson r ${decimal(c.pearson, 3)}, ` +
      `Spearman ρ ${decimal(c.spearman, 3)} over ${int(c.edges)} edges`;
    const head = el("tr", {}, ...["edge", "estimate", "exact", "estimate − exact"].map((t) => el("th", { text: t })));
    const rows = c.largest_errors.map((e) => el("tr", {}, el("td", { class: "mono", text: e.name }),
      ...[e.estimate, e.exact, e.error].map((v) => el("td", { class: "num", text: decimal(v, 3) }))));
    return el("table", { class: "lens-table" }, el("caption", { text: cap }), el("thead", {}, head), el("tbody", {}, ...rows));
  }));
}

// The circuit's edges in the order of the ranking, each method's score beside.
export function renderEdgeTable(res) {
  const scores = edgeScores(res);
  const by = res.circuit.ranked_by;
  const methods = Object.keys(scores);
  const edges = res.circuit.edges.slice(0, MAX_ROWS);
  const head = el("tr", {}, el("th", { text: "#" }), el("th", { text: "edge (writer->reader)" }),
    ...methods.map((m) => el("th", { class: m === by ? "num ranked" : "num", text: METHOD_LABELS[m] })));
  const rows = edges.map((e, i) => el("tr", {}, el("td", { class: "num", text: String(i + 1) }),
    el("td", { class: "mono", text: res.edges[e], title: `${res.edges[e]}: edge ${e} of the answer's edges` }),
    ...methods.map((m) => el("td", { class: m === by ? "num ranked" : "num", text: scores[m][e] === null ? "—" : decimal(scores[m][e], 4) }))));
  $("edges-table").replaceChildren(el("table", { class: "lens-table" }, el("thead", {}, head), el("tbody", {}, ...rows)));
  const more = res.circuit.edges.length > MAX_ROWS ? `; the first ${MAX_ROWS} shown` : "";
  $("edges-stats").textContent = `the circuit's ${int(res.circuit.edges.length)} edges, ranked by ${METHOD_LABELS[by]}${more}; scores in nats`;
}
