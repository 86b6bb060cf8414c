// The attribution graph drawn with Plotly: the edges as lines under the nodes (one trace per sign
// and width band; an invisible marker at each one's middle gives its ends and weight on hover), then
// one trace of nodes per kind: features (dots), error nodes
// (grey diamonds), tokens (squares), the target logit (a star), supernodes (hexagons). x is the
// column, y the position with the prompt's tokens as its labels; a node's size follows its
// influence, an edge's width its |weight| and its colour its sign. Hover gives a node's numbers; a
// click or a hover calls the page's handlers with the node's id. Every number shown is the answer's
// (a supernode's edge weights are sums of the answer's: nodes.js).
import { $ } from "../lib/dom.js";
import { decimal, int, pct, tokenLabels } from "../lib/format.js";
import { MONO, OKABE } from "../lib/palette.js";
import { chart, tokenAxis } from "../lib/plot.js";
import { graphView } from "./nodes.js";

export const MAX_EDGES_DRAWN = 500;    // the answer's strongest edges drawn; thousands would hide the nodes
const WIDTHS = [0.7, 1.4, 2.5, 4.2];    // an edge's width band by sqrt(|weight| / the largest)
const SIGNS = { "+": [OKABE.blue, "raises its target (+)"], "−": [OKABE.vermillion, "lowers its target (−)"] };
const KINDS = [
  ["feature", "feature", { symbol: "circle", color: OKABE.orange }],
  ["error", "error node", { symbol: "diamond", color: "#c4c4c4" }],
  ["token", "token", { symbol: "square", color: OKABE.sky }],
  ["logit", "target logit", { symbol: "star", color: OKABE.green }],
  ["supernode", "supernode", { symbol: "hexagon", color: OKABE.purple }],
];

const htmlText = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
// A node's influence as drawn: a supernode's is its largest member's (for its size only).
const drawnInfluence = (n) => (n.kind === "supernode" ? Math.max(...n.members.map((m) => m.influence)) : n.node.influence);

// A node's hover text, from the answer's numbers.
function nodeText(n, tokens) {
  const tok = (p) => `“${tokenLabels([tokens[p]])[0]}”`;
  if (n.kind === "supernode") {
    return `<b>${htmlText(n.name)}</b>: a supernode of ${n.members.length}<br>` +
      n.members.map((m) => `${htmlText(m.label)} · influence ${pct(m.influence, 2)}`).join("<br>");
  }
  const d = n.node;
  const where = d.layer === null ? `position ${d.position} ${tok(d.position)}` : `block ${d.layer} · position ${d.position} ${tok(d.position)}`;
  const lines = [`<b>${htmlText(d.label)}</b>`, where];
  if (d.activation !== null) lines.push(`activation ${decimal(d.activation, 3)}`);
  lines.push(`influence ${pct(d.influence, 2)}`);
  if (d.value !== null) lines.push(`${d.kind === "logit" ? "value" : "input (pre-activation)"} ${decimal(d.value, 3)} = its edges + ${decimal(d.constant, 3)} from biases`);
  return lines.join("<br>");
}

function edgeTraces(view) {
  const top = Math.max(1e-12, ...view.edges.map((e) => Math.abs(e.weight)));
  const bands = new Map();
  for (const e of view.edges) {
    const band = Math.min(WIDTHS.length - 1, Math.floor(WIDTHS.length * Math.sqrt(Math.abs(e.weight) / top)));
    const key = `${e.weight >= 0 ? "+" : "−"}${band}`;
    if (!bands.has(key)) bands.set(key, { x: [], y: [], customdata: [] });
    const t = bands.get(key);
    const a = view.byId.get(e.source);
    const b = view.byId.get(e.target);
    const data = [e.source, e.target, e.weight];
    t.x.push(a.x, b.x, null); t.y.push(a.y, b.y, null); t.customdata.push(data, data, null);
  }
  return [...bands.entries()].sort(([a], [b]) => +a.slice(1) - +b.slice(1)).map(([key, t]) => ({
    type: "scatter", mode: "lines", name: `edges ${key}`, showlegend: false, hoverinfo: "skip", opacity: 0.55,
    line: { color: SIGNS[key[0]][0], width: WIDTHS[+key.slice(1)] }, ...t }));
}

// An invisible marker at each drawn edge's middle: its hover names the edge's two ends and its weight
// (a sum where a supernode merged several of the answer's edges). Its customdata is the pair of ends'
// ids, no node id: a hover on it goes to the page's edge handler, not its node handlers.
function edgeMiddles(view) {
  const name = (n) => htmlText(n.kind === "supernode" ? `${n.name} (supernode)` : n.node.label);
  const ends = view.edges.map((e) => [view.byId.get(e.source), view.byId.get(e.target)]);
  return { type: "scatter", mode: "markers", name: "edges (their middles)", showlegend: false,
    x: ends.map(([a, b]) => (a.x + b.x) / 2), y: ends.map(([a, b]) => (a.y + b.y) / 2), customdata: view.edges.map((e) => [e.source, e.target]),
    text: view.edges.map((e, i) => `${name(ends[i][0])} → ${name(ends[i][1])}<br>weight ${decimal(e.weight, 4)}: ` +
      `${e.weight >= 0 ? "raises" : "lowers"} its target${e.count > 1 ? `<br>the sum of ${e.count} edges of the answer` : ""}`),
    hovertemplate: "%{text}<extra></extra>", marker: { size: 9, opacity: 0 } };
}

function nodeTraces(view, tokens, pinned) {
  const top = Math.max(1e-9, ...view.nodes.filter((n) => n.kind !== "logit").map(drawnInfluence));
  const size = (n) => (n.kind === "logit" ? 22 : 6 + 18 * Math.sqrt(Math.min(1, drawnInfluence(n) / top)));
  return KINDS.map(([kind, name, look]) => {
    const ns = view.nodes.filter((n) => n.kind === kind);
    return { type: "scatter", mode: "markers", name, x: ns.map((n) => n.x), y: ns.map((n) => n.y),
      customdata: ns.map((n) => n.id), text: ns.map((n) => nodeText(n, tokens)), hovertemplate: "%{text}<extra></extra>",
      marker: { symbol: look.symbol, color: look.color, size: ns.map(size), opacity: 0.95,
        line: { color: ns.map((n) => (pinned.has(n.id) ? OKABE.black : "#fff")), width: ns.map((n) => (pinned.has(n.id) ? 3 : 0.8)) } } };
  }).filter((t) => t.x.length);
}

// Legend entries only: the two signs of an edge.
const signLegend = () => Object.values(SIGNS).map(([color, name]) => ({ type: "scatter", mode: "lines", x: [null], y: [null],
  name, line: { color, width: 3 }, hoverinfo: "skip" }));

// Both axes autorange (the first position at the top): a double click, and two quick clicks on two
// nodes are one, puts the view back where it was rather than somewhere new.
function axes(res, blocks, height) {
  const cols = ["tokens", ...Array.from({ length: blocks }, (_, l) => `block ${l} MLP`), "logit"];
  return {
    xaxis: { tickmode: "array", tickvals: cols.map((_, i) => i), ticktext: cols, showgrid: false, zeroline: false },
    yaxis: tokenAxis(tokenLabels(res.tokens), height - 140, { autorange: "reversed", title: { text: "position (its token)" } }),
  };
}

// Draw `res` with its supernodes (`groups`) and its pinned node ids; resolves once drawn. onClick and
// onHover get a node's id, onEdge a hovered edge's two ends' ids.
export function drawAttributionGraph(res, blocks, groups, pinned, { onClick, onHover, onEdge }) {
  const view = graphView(res, blocks, groups, MAX_EDGES_DRAWN);
  const gd = $("graph-plot");
  const height = Math.max(440, Math.min(1400, 140 + 28 * res.tokens.length));
  gd.dataset.edges = String(view.edges.length);
  gd.dataset.nodes = String(view.nodes.length);
  const done = chart(gd, [...edgeTraces(view), edgeMiddles(view), ...nodeTraces(view, res.tokens, pinned), ...signLegend()], {
    height, hovermode: "closest", showlegend: true, margin: { l: 20, r: 16, t: 16, b: 48 },
    hoverlabel: { font: { family: MONO, size: 12 }, align: "left" }, ...axes(res, blocks, height),
  });
  return done.then(() => {
    if (gd.dataset.wired) return view;
    gd.dataset.wired = "1";
    const id = (ev) => ev.points.map((p) => p.customdata).find((c) => typeof c === "string");
    gd.on("plotly_click", (ev) => { const n = id(ev); if (n) onClick(n); });
    const ends = (ev) => ev.points.map((p) => p.customdata).find(Array.isArray);
    gd.on("plotly_hover", (ev) => {
      const n = id(ev);
      const e = n ? null : ends(ev);
      if (n) onHover(n); else if (e) onEdge(e[0], e[1]);
    });
    return view;
  });
}

// Hover the drawn edge source → target (its middle's label shows), as the mouse would, but without
// the hover event; false where it is not drawn (among the weaker ones left out, or in a supernode's).
export function pointAtEdge(source, target) {
  const gd = $("graph-plot");
  const c = (gd.data || []).findIndex((t) => t.name === "edges (their middles)");
  const i = c < 0 ? -1 : gd.data[c].customdata.findIndex((d) => d[0] === source && d[1] === target);
  if (i < 0) return false;
  Plotly.Fx.hover(gd, [{ curveNumber: c, pointNumber: i }]);
  return true;
}

// The graph in words, over the plot (`groups`: how many supernodes it draws).
export function graphStats(res, view, groups) {
  const count = (k) => res.nodes.filter((n) => n.kind === k).length;
  const cut = res.edges_cut ? `; ${int(res.edges_cut)} weaker kept edges were left out of the answer (max_edges)` : "";
  $("graph-stats").textContent = `${int(res.nodes.length)} nodes: ${int(res.kept_features)} of the ${int(res.active_features)} ` +
    `active features, ${int(count("error"))} error nodes, ${int(count("token"))} tokens and the target · ` +
    (groups ? `the answer's strongest ${int(Math.min(MAX_EDGES_DRAWN, res.edges.length))} of its ${int(res.edges.length)} edges, ` +
      `drawn as ${int(view.edges.length)} with each supernode's edges summed${cut} · `
      : `the strongest ${int(view.edges.length)} of the answer's ${int(res.edges.length)} edges drawn${cut} · `) +
    `target ${res.nodes[0].label} = ${decimal(res.target_value, 3)}`;
}
