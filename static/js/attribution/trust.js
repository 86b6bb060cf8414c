// How far to trust the graph: the transcoder set's quality figures (GET /api/v1/transcoders: per
// block the MLP output's variance explained, L0 and dead features beside the untrained set's; the
// loss with every MLP replaced against the model and against every MLP zeroed) and the graph's own
// figures (the kept shares, the error nodes' influence, the target in the replacement against the
// real model's). Every number is one of those answers.
import { addDownloads } from "../lib/downloads.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, duration, grouped, int, pct } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart, clearPlot } from "../lib/plot.js";
import { snapshotSvg } from "../lib/snapshot_svg.js";

let set = null;     // the set drawn: its entry of GET /api/v1/transcoders
let graph = null;   // the answer whose figures are shown

const HONESTY = [
  ["the target in the frozen replacement", (r) => decimal(r.target_value, 5), "every edge into it plus its constant"],
  ["the same target in the real model", (r) => decimal(r.model_value, 5), "equal: the error nodes keep what the transcoders miss"],
  ["features kept", (r) => `${int(r.kept_features)} of ${int(r.active_features)}`, "active on the prompt, every block and position"],
  ["features whose inputs were computed", (r) => int(r.rows), "the most influential ones (max_rows); the rest are sources only"],
  ["kept features' share of all features' influence", (r) => pct(r.kept_share), "what the node threshold asked for"],
  ["kept edges' share of the kept nodes' edge influence", (r) => pct(r.edge_share), "the edge threshold"],
  ["edges in the answer", (r) => `${int(r.edges.length)} (+ ${int(r.edges_cut)} cut)`, "the rest of the kept edges, weakest first, left out (max_edges)"],
  ["error nodes' influence", (r) => pct(r.error_influence), "what the transcoders miss: the answer's share no feature explains"],
  ["tokens' direct influence", (r) => pct(r.token_influence), "the prompt's tokens straight into their targets"],
  ["computed in", (r) => `${decimal(r.seconds, 2)} s`, ""],
];

export function initTrust() {
  const part = (keys) => () => (set ? Object.fromEntries(keys.map((k) => [k, set[k]])) : null);
  addDownloads($("tc-fve-plot"), "transcoder-variance-explained", part(["name", "d_transcoder", "quality"]));
  addDownloads($("tc-loss-plot"), "transcoder-losses", part(["name", "quality"]));
  addDownloads($("honesty-table"), "attribution-honesty",
    () => graph && Object.fromEntries(Object.entries(graph).filter(([k]) => !["nodes", "edges", "tokens"].includes(k))),
    { svgEl: () => snapshotSvg($("honesty-table")) });
}

function setTable(s) {
  const q = s.quality;
  const head = el("tr", {}, ...["block", "variance explained", "untrained", "L0 (features per token)", "dead features", "untrained"]
    .map((t) => el("th", { text: t })));
  const rows = q.layers.map((l) => el("tr", {}, el("td", { text: String(l.layer) }), el("td", { class: "num", text: pct(l.fve) }),
    el("td", { class: "num muted", text: pct(l.fve_at_init) }), el("td", { class: "num", text: `${decimal(l.l0, 1)} of ${grouped(l.d_sae)}` }),
    el("td", { class: "num", text: grouped(l.dead) }), el("td", { class: "num muted", text: grouped(l.dead_at_init) })));
  $("tc-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

// The set `s` (null: the served model has none).
export function renderSet(s) {
  set = s;
  if (!s) {
    setNote($("tc-note"), "The served model has no transcoder set: train one with gptscope transcoders (docs/pages.md says how).");
    $("tc-table").replaceChildren();
    clearPlot($("tc-fve-plot"));
    clearPlot($("tc-loss-plot"));
    return Promise.resolve();
  }
  setNote($("tc-note"), "");
  const q = s.quality;
  $("tc-summary").textContent = `${s.name}: ${grouped(s.d_transcoder)} features per block (${s.activation === "topk" ? `TopK, k = ${s.k}` : "ReLU"}), ` +
    `trained on ${grouped(s.tokens)} MLP input/output pairs of ${s.corpus} in ${duration(s.train_seconds)}; measured on ` +
    `${grouped(q.tokens)} held-out tokens. Made by: ${s.command}`;
  setTable(s);
  const fve = chart($("tc-fve-plot"), [{ type: "bar", x: q.layers.map((l) => `block ${l.layer}`), y: q.layers.map((l) => l.fve),
    customdata: q.layers.map((l) => pct(l.fve_at_init)), marker: { color: OKABE.blue },
    hovertemplate: "%{x}: %{y:.1%} explained (untrained: %{customdata})<extra></extra>" }],
  { height: 280, yaxis: { title: { text: "variance explained" }, tickformat: ".0%", range: [0, 1] }, showlegend: false });
  const recovered = q.loss_recovered === null ? "" : `: ${pct(q.loss_recovered)} of the loss recovered`;
  const loss = chart($("tc-loss-plot"), [{ type: "bar", x: ["the model", "every MLP replaced", "every MLP zeroed"],
    y: [q.loss_clean, q.loss_replaced, q.loss_zero_ablation], marker: { color: [OKABE.green, OKABE.blue, OKABE.vermillion] },
    hovertemplate: "%{x}: %{y:.4f} nats<extra></extra>" }],
  { height: 280, yaxis: { title: { text: "nats per token" } }, showlegend: false,
    title: { text: `the transcoders in place${recovered}`, font: { size: 12 }, x: 0, xanchor: "left" } });
  return Promise.all([fve, loss]);
}

// The graph's own figures.
export function renderHonesty(res) {
  graph = res;
  const head = el("tr", {}, ...["figure", "this graph", "what it means"].map((t) => el("th", { text: t })));
  $("honesty-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...HONESTY.map(([name, val, what]) =>
    el("tr", { title: `${name}: ${val(res)}` }, el("td", { text: name }), el("td", { class: "num", text: val(res) }), el("td", { class: "muted", text: what })))));
}
