// Two transcoder sets on the same prompt (issue #64): the graph's own request sent with a second set
// of the served model (POST /api/v1/attribution/compare-sets, `other`), and its answer shown as a
// table with one column per set (its kind, width, loss recovered, kept features, error share, the
// replacement's KL from the real model, its top next token and target), the overlap of the two
// graphs' kept (block, position) cells, and per set the cells the other graph lacks. Every number is
// that answer's.
import { apiPost } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, grouped, int, pct, visible } from "../lib/format.js";


const said = (t) => `“${visible(t)}”`;
const KIND = { per_layer: "per-layer", clt: "cross-layer (CLT)" };
const ROWS = [
  ["kind", (s) => KIND[s.kind] ?? s.kind, "per-layer: one transcoder per MLP; cross-layer: a feature writes to its block's MLP and every later one"],
  ["features per block", (s) => grouped(s.features_per_block), ""],
  ["loss recovered", (s) => pct(s.loss_recovered), "the set's own figure on held-out text, every MLP replaced"],
  ["kept features", (s) => `${int(s.kept_features)} of ${int(s.active_features)}`, "at the node threshold, of those active on the prompt"],
  ["error nodes' share of the influence", (s) => pct(s.error_share), "what no feature of the set explains"],
  ["KL(real ‖ replacement) of the next token", (s) => `${decimal(s.kl, 4)} nats`, "the replacement without its error nodes; 0: as the model"],
  ["top next token (real: %top)", (s) => said(s.top1_replaced), "the replacement's most likely next token, without its error nodes"],
  ["target (real: %target)", (s) => decimal(s.target_replaced, 3), "the target's value in that replacement"],
];

// The choice of the other set: the served model's sets but the one the graph is traced with; with
// only one set the control is hidden and a note says how to train another.
export function renderCompareChoices(sets, current) {
  const others = sets.filter((s) => s.name !== current);
  const sel = $("compare-other");
  const was = sel.value;
  sel.replaceChildren(...others.map((s) => new Option(`${s.name} (${KIND[s.kind] ?? s.kind}, ${grouped(s.d_transcoder)} features per block)`, s.name)));
  if (others.some((s) => s.name === was)) sel.value = was;
  $("compare-controls").hidden = !others.length;
  setNote($("compare-help"), sets.length === 1
    ? "The served model has one transcoder set only: train a cross-layer one with `gptscope transcoders --kind clt` and reload to compare it with this one."
    : "");
}

// The comparison of an older graph is dropped.
export function clearCompare() {
  $("compare-result").hidden = true;
  setNote($("compare-note"), "");
  delete $("compare-result").dataset.loaded;
}

function onlyBox(o) {
  const head = el("tr", {}, ...["block", "position", "token", "influence"].map((t) => el("th", { text: t })));
  const rows = o.cells.map((c) => el("tr", {}, el("td", { class: "num", text: String(c.layer) }),
    el("td", { class: "num", text: String(c.position) }), el("td", { class: "mono", text: said(c.token) }),
    el("td", { class: "num", text: pct(c.influence, 2) })));
  return el("div", { class: "compare-only", "data-name": o.name },
    el("h4", {}, "only in ", el("span", { class: "mono", text: o.name }), "'s graph: ",
      el("span", { class: "only-share", text: pct(o.share) }), " of its kept influence"),
    o.cells.length ? el("table", { class: "lens-table compare-cells", "aria-label": `cells only in ${o.name}'s graph` }, el("thead", {}, head), el("tbody", {}, ...rows))
      : el("p", { class: "muted", text: "none: every cell it keeps, the other graph keeps too" }));
}

function render(c) {
  const real = { "%top": said(c.top1_real), "%target": decimal(c.target_real, 3) };
  const head = el("tr", {}, el("th", { text: "figure" }), ...c.sets.map((s) => el("th", { class: "mono", text: s.name })),
    el("th", { text: "what it means" }));
  const rows = ROWS.map(([name, val, what]) => el("tr", {}, el("td", { text: name.replace(/%\w+/, (k) => real[k]) }),
    ...c.sets.map((s) => el("td", { class: "num", text: val(s) })), el("td", { class: "muted", text: what })));
  $("compare-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  $("compare-stats").replaceChildren(`${c.target}: the two graphs' kept (block, position) cells overlap by `,
    el("b", { id: "compare-jaccard", text: pct(c.jaccard) }), ` (Jaccard: the cells both keep over the cells either keeps) · computed in ${decimal(c.seconds, 2)} s`);
  $("compare-only").replaceChildren(...c.only.map(onlyBox));
}

// Compare the graph made from `body` with its graph through the chosen set; resolves once drawn.
export async function compareSets(body) {
  const other = $("compare-other").value;
  $("compare-run").disabled = true;
  setNote($("compare-note"), `tracing the same prompt through ${other}…`);
  try {
    const c = await apiPost("/attribution/compare-sets", { ...body, other });
    setNote($("compare-note"), "");
    render(c);
    $("compare-result").hidden = false;
    $("compare-result").dataset.loaded = other;
  } catch (err) {
    setNote($("compare-note"), err.message, "error");
    throw err;
  } finally {
    $("compare-run").disabled = false;
  }
}
