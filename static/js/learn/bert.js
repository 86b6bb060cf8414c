// BERT-vs-GPT panel: the causal and the bidirectional mask on one text, and masked-LM corruption
// (picked positions: [MASK], a random token, or kept), from GET /api/v1/curves/masked-lm.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { int, pct, tokenLabels, visible } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("bert-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("bert-form");
const BINARY = [[0, "#eeeeee"], [1, OKABE.blue]];

function maskMap(gd, mask, labels) {
  return chart(gd, [{ z: mask.map((r) => r.map(Number)), x: labels.map((l, i) => `${i} ${l}`), y: labels.map((l, i) => `${i} ${l}`),
    type: "heatmap", colorscale: BINARY, zmin: 0, zmax: 1, showscale: false, name: "may see",
    hovertemplate: "query %{y}<br>key %{x}<br>%{z}<extra></extra>" }],
  { height: 360, xaxis: { title: { text: "key (what is read)" }, tickangle: -45 }, yaxis: { title: { text: "query" }, autorange: "reversed" } });
}

async function load(signal) {
  const b = keep(await apiGet(`/curves/masked-lm?${formQuery(form)}`, signal));
  const labels = tokenLabels(b.tokens);
  await maskMap($("bert-causal-plot"), b.causal, labels);
  await maskMap($("bert-full-plot"), b.bidirectional, labels);
  $("bert-table").querySelector("tbody").innerHTML = b.positions.map((p) => `<tr${p.action ? ' class="picked"' : ""}>
    <td class="num">${p.index}</td><td><code>${visible(p.original.text)}</code></td><td>${p.action ?? "—"}</td>
    <td><code>${visible(p.shown)}</code></td></tr>`).join("");
  $("bert-summary").textContent = `${int(b.picked)} of ${b.tokens.length} positions picked here. On 100,000 positions the same rule picks ` +
    `${pct(b.shares.picked)}, and of those ${pct(b.shares.mask)} become [MASK], ${pct(b.shares.random)} a random token and ` +
    `${pct(b.shares.keep)} stay as they were. Under the causal mask ${b.visible_next_causal} positions can see their next token; under ` +
    `the full mask ${b.visible_next_bidirectional} can. Why BERT cannot write: ${b.cannot_generate}.`;
}

export function init() {
  keep = figureBars([
    ["bert-causal-plot", "causal-mask"],
    ["bert-full-plot", "bidirectional-mask"],
  ]);
  bindForms(panel, form, load);
}
