// The classifier panel (only when the served model is a fine-tuned classifier: /health's
// info.classifier): the label probabilities with the winner marked, the label logits (W_y applied to
// the last position's final hidden state), which tokens the last position's attention read (a heat
// strip per layer, one head or every head), and the winning label's logit split into the parts of
// the residual stream (drawn as stage 10 draws a token's). Data: the `classifier` part of POST
// /api/v1/forward; the page comes with a default prompt in the classifier's format (a test-half input).
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, pct } from "../lib/format.js";
import { tokenStrip } from "../lib/heatmaps.js";
import { OKABE } from "../lib/palette.js";
import { PROB_TICKS, chart } from "../lib/plot.js";
import { decompositionPills, drawDecomposition } from "./panel_decomposition.js";

let block = null;
let labels = [];

export function initClassifier() {
  if (!$("classifier-panel")) return;
  $("cl-head").addEventListener("change", () => { if (block) drawAttention(); });
  addDownloads($("cl-probs-plot"), "classifier", () => block);
  addDownloads($("cl-attn-plot"), "classifier-attention", () => block?.attention);
  addDownloads($("cl-dc-plot"), "classifier-decomposition", () => block?.decomposition);
}

export function renderClassifier(trace, tokenLabels) {
  const b = trace.classifier;
  if (!b || !$("classifier-panel")) return;
  block = b;
  labels = tokenLabels;
  const panel = $("classifier-panel");
  panel.dataset.predicted = b.labels[b.predicted];
  panel.dataset.atExtract = String(b.at_extract);
  const note = $("cl-note");
  note.hidden = b.at_extract;
  note.textContent = b.at_extract ? "" : `The last token is not the extract token the classifier was trained to read (` +
    `${panel.dataset.extract}), so this reading of position ${b.position} is off the task's format: add the token at the end.`;
  $("cl-summary").replaceChildren("Predicted label: ", el("b", { id: "cl-predicted", text: b.labels[b.predicted] }),
    ` with probability ${pct(b.probs[b.predicted])}, read at position ${b.position} “${labels[b.position] ?? ""}”.`);
  logitTable(b);
  fillHeads(b);
  later("classifier-probs", $("cl-probs-plot"), () => drawProbs(b));
  later("classifier-attention", $("cl-attn-plot"), drawAttention);
  const d = b.decomposition;
  $("cl-dc-stats").replaceChildren(el("span", {}, `Logit of the label “${b.labels[b.predicted]}” at position ${d.position}: `),
    ...decompositionPills(d, "cl-dc"), el("br"), el("span", { class: "muted", text: d.note }));
  if (d.exact && d.contributions.length) {
    later("classifier-decomposition", $("cl-dc-plot"), () => {
      drawDecomposition($("cl-dc-plot"), d, `what each part adds to the logit of the label “${b.labels[b.predicted]}”`, "classifier-decomposition");
      $("cl-dc-plot").dataset.target = String(d.target_id);
    });
  }
  panel.dataset.ready = "1";
}

function logitTable(b) {
  $("cl-logits").replaceChildren(
    el("thead", {}, el("tr", {}, el("th", { text: "label" }), el("th", { class: "num", text: "logit" }),
      el("th", { class: "num", text: "probability" }))),
    el("tbody", {}, b.labels.map((l, i) => el("tr", {
      class: i === b.predicted ? "winner" : "", dataset: { label: l, logit: b.logits[i], prob: b.probs[i] } },
    el("td", {}, el("code", { text: l }), i === b.predicted ? " ◀ predicted" : ""),
    el("td", { class: "num", text: decimal(b.logits[i], 4) }),
    el("td", { class: "num", text: pct(b.probs[i]) })))));
}

function drawProbs(b) {
  const colours = b.labels.map((_, i) => (i === b.predicted ? OKABE.vermillion : OKABE.blue));
  const gd = $("cl-probs-plot");
  chart(gd, [{
    type: "bar", orientation: "h", y: b.labels, x: b.probs, marker: { color: colours },
    text: b.probs.map((p, i) => `${pct(p)}${i === b.predicted ? " ◀ predicted" : ""}`), textposition: "auto",
    customdata: b.logits, hovertemplate: "%{y}: probability %{x:.2%}<br>logit %{customdata:.4f}<extra></extra>",
  }], {
    height: Math.max(180, 90 + 40 * b.labels.length), showlegend: false,
    xaxis: { title: { text: "probability" }, range: [0, 1], tickformat: PROB_TICKS },
    yaxis: { autorange: "reversed", type: "category" },
  });
  gd.dataset.labels = String(b.labels.length);
}

function fillHeads(b) {
  const sel = $("cl-head");
  const nHead = b.attention.length ? b.attention[0].length : 0;
  const want = sel.value || "mean";
  const opts = [["mean", "mean of each layer's heads"], ["all", "every head (one row each)"], ...Array.from({ length: nHead }, (_, h) => [String(h), `head ${h} of each layer`])];
  if (sel.options.length !== opts.length) sel.replaceChildren(...opts.map(([v, t]) => new Option(t, v)));
  sel.value = opts.some(([v]) => v === want) ? want : "mean";
}

// One row per layer for the chosen head, or one row per (layer, head): the weight the last position
// gave each token of the prompt.
function drawAttention() {
  const b = block;
  const pick = $("cl-head").value;
  const rows = [];
  const names = [];
  if (pick === "mean") {  // the API's attention_mean: each layer's heads averaged
    b.attention_mean.forEach((row, l) => { rows.push(row); names.push(`layer ${l} (mean)`); });
  }
  b.attention.forEach((heads, l) => {
    heads.forEach((row, h) => {
      if (pick === "mean" || (pick !== "all" && +pick !== h)) return;
      rows.push(row);
      names.push(pick === "all" ? `L${l}H${h}` : `layer ${l}`);
    });
  });
  const gd = $("cl-attn-plot");
  tokenStrip(gd, rows, labels.slice(0, rows.length ? rows[0].length : 0), {
    rowNames: names, colorTitle: "attention", hoverName: "weight", name: "classifier-attention", mark: b.position });
  gd.dataset.rows = String(rows.length);
}

// The classifier's section (fine-tuned classifiers only), above stage 1.
export const panel = {
  stage: "classifier",
  parts: ["classifier"],
  init: () => initClassifier(),
  render: (trace, view) => { if (view.parts.includes("classifier")) renderClassifier(trace, view.labels); },
};
