// How far to trust the graph: the transcoder set's quality figures (GET /api/v1/transcoders: per
// block the MLP output's variance explained, L0 and dead features beside the untrained set's; the
// loss with every MLP replaced against the model and against every MLP zeroed) and the graph's own
// figures (the kept shares, the error nodes' influence, the target in the replacement against the
// real model's), and on request the graph checked on the real model (POST /api/v1/attribution/trust,
// the graph's own request: the replacement's fidelity on the prompt, and its most influential features
// each taken out of the real model beside their direct edge into the target). Every number is one of
// those answers.
import { addDownloads } from "../lib/downloads.js";
import { apiPost } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, duration, grouped, int, pct, visible } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart, clearPlot } from "../lib/plot.js";
import { snapshotSvg } from "../lib/snapshot_svg.js";

let set = null;     // the set drawn: its entry of GET /api/v1/transcoders
let graph = null;   // the answer whose figures are shown
let checked = null; // POST /attribution/trust's answer for it

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
  addDownloads($("trust-plot"), "attribution-trust", () => checked);
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

const quote = (t) => `“${visible(t)}”`;
const FIDELITY = [
  ["KL(real ‖ replacement) of the next token", (t) => `${decimal(t.kl, 4)} nats`, "0: the replacement predicts exactly as the model does"],
  ["the top next token: real · replacement", (t) => `${quote(t.top1_real)} · ${quote(t.top1_replaced)}`, "the same token: it gives the model's answer"],
  ["the target: real · replacement", (t) => `${decimal(t.target_real, 3)} · ${decimal(t.target_replaced, 3)}`, "the replacement without its error nodes"],
  ["error nodes' share of the influence", (t) => pct(t.error_share), "what no feature explains, as in the graph"],
  ["tokens' direct share", (t) => pct(t.token_share), "the prompt's tokens straight into the target"],
  ["checked features whose real effect has the edge's sign", (t) => pct(t.sign_agreement), "taking out a feature with a positive edge should lower the target"],
  ["rank correlation of the edge's prediction and the real effect", (t) => decimal(t.rank_correlation, 3), "Spearman's: 1, the graph orders the features as the model does"],
  ["the top paths' edges whose real change has the sign of −edge", (t) => pct(t.path_agreement), "each edge's source taken out, its target node measured (table below)"],
  ["checked in", (t) => `${decimal(t.seconds, 2)} s`, ""],
];

// The checked features drawn: each one's direct edge into the target against the real model's
// change when it is taken out, with the line where the edge alone would put it (effect = −edge).
function trustPlot(t) {
  const xs = t.checked.map((c) => c.edge);
  const lim = Math.max(1e-9, ...xs.map(Math.abs), ...t.checked.map((c) => Math.abs(c.effect)));
  const where = (c) => `${c.source.label} @${c.source.position}`;
  return chart($("trust-plot"), [
    { type: "scatter", mode: "lines", name: "edge alone (effect = −edge)", x: [-lim, lim], y: [lim, -lim],
      line: { color: OKABE.grey, dash: "dot", width: 1 }, hoverinfo: "skip" },
    { type: "scatter", mode: "markers", name: "checked features", x: xs, y: t.checked.map((c) => c.effect),
      customdata: t.checked.map(where), marker: { color: OKABE.blue, size: 8 },
      hovertemplate: "%{customdata}<br>edge %{x:.3f} · real effect %{y:.3f}<extra></extra>" },
  ], { height: 340, xaxis: { title: { text: "direct edge (graph)" }, zeroline: true },
    yaxis: { title: { text: "real effect (taken out)" }, zeroline: true } });
}

function checkedTable(t) {
  const head = el("tr", {}, ...["feature", "position", "influence", "edge into the target", "real effect"].map((x) => el("th", { text: x })));
  const tokens = graph?.tokens ?? [];
  const rows = t.checked.map((c) => el("tr", { "data-id": `f${c.source.layer}.${c.source.position}.${c.source.feature}` },
    el("td", { class: "mono", text: c.source.label }),
    el("td", { class: "mono", text: `${c.source.position} ${tokens[c.source.position] ? quote(tokens[c.source.position].text) : ""}` }),
    el("td", { class: "num", text: pct(c.influence, 2) }), el("td", { class: "num", text: decimal(c.edge, 3) }),
    el("td", { class: "num", text: decimal(c.effect, 3) })));
  $("trust-checked").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

// The graph's strongest paths feature -> feature -> target, each edge: its weight (the frozen model
// moves its target node by −weight without its source) beside the real model's change.
function pathsTable(t) {
  const head = el("tr", {}, ...["path", "influence", "edge 1: weight · real", "edge 2: weight · real"].map((x) => el("th", { text: x })));
  const name = (s) => `${s.label.split(" ")[0]} ${s.label.split(" ")[1]} @${s.position}`;
  const rows = t.paths.map((p) => el("tr", {},
    el("td", { class: "mono", text: `${name(p.source)} → ${name(p.via)} → target` }),
    el("td", { class: "num", text: decimal(p.influence, 4) }),
    ...p.edges.map((e) => el("td", { class: "num", text: `${decimal(e.weight, 3)} · ${decimal(e.real, 3)}` }))));
  $("trust-paths").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

// The check of an older graph is dropped.
export function clearTrust() {
  checked = null;
  $("trust-result").hidden = true;
  setNote($("trust-note"), "");
  delete $("trust-result").dataset.loaded;
}

// Check the graph made from `body` on the real model; resolves once drawn.
export async function checkTrust(body) {
  $("trust-run").disabled = true;
  setNote($("trust-note"), "taking the graph's most influential features out of the real model, one at a time…");
  try {
    const t = await apiPost("/attribution/trust", body);
    checked = t;
    setNote($("trust-note"), "");
    $("trust-stats").textContent = `${t.target}: ${int(t.checked.length)} features checked · signs agree for ` +
      `${pct(t.sign_agreement)} · rank correlation ${decimal(t.rank_correlation, 3)}`;
    $("trust-table").replaceChildren(el("thead", {}, el("tr", {}, ...["figure", "this graph", "what it means"].map((x) => el("th", { text: x })))),
      el("tbody", {}, ...FIDELITY.map(([name, val, what]) =>
        el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: val(t) }), el("td", { class: "muted", text: what })))));
    checkedTable(t);
    pathsTable(t);
    $("trust-result").hidden = false;
    await trustPlot(t);
    $("trust-result").dataset.loaded = "1";
  } catch (err) {
    setNote($("trust-note"), err.message, "error");
    throw err;
  } finally {
    $("trust-run").disabled = false;
  }
}
