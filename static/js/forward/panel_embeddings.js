// Stage 1: token embeddings + position embeddings = the stream entering block 0 (T x d each).
// A model without learned positions (RoPE, or none: `embeddings.position` is null) has no W_P
// figure: its stream starts as the token embeddings alone. Below them, the server's permutation check
// (`embeddings.permutation`): block 0's attention on the prompt and on it with two tokens exchanged,
// without and with the model's positions, beside the texts' "dog bites man".
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { sci, tokenLabels } from "../lib/format.js";
import { tokenFeatureHeatmap } from "../lib/heatmaps.js";
import { textFactBlock } from "../lib/text_facts.js";
import { showPromptTokens } from "./tokens_panel.js";

let part = null;

export function renderEmbeddings(trace) {
  part = trace.embeddings;
  if (!part) return;
  const labels = tokenLabels(trace.tokens);
  const T = trace.tokens.length;
  const d = trace.d_model;
  const learned = !!part.position;
  $("emb-shapes").innerHTML = learned
    ? `<b>T</b> = ${T} tokens, <b>d</b> = ${d}: token embeddings (T × d) + position embeddings (T × d) = input (T × d)`
    : `<b>T</b> = ${T} tokens, <b>d</b> = ${d}: token embeddings (T × d) = input (T × d); no position rows are added ` +
      (part.pos === "rope" ? "(RoPE turns queries and keys by position inside attention)" : "(this model has no position signal)");
  const common = { rowLabels: labels, rowTitle: "", colTitle: `feature (0..${d - 1})`, signed: true };
  const posLabels = labels.map((_, i) => `${i}`);
  const p = part;
  later("emb-token", $("emb-token-plot"), () => tokenFeatureHeatmap($("emb-token-plot"), p.token, { ...common, name: "token-embeddings", colorTitle: "W_E", hoverName: "W_E value" }));
  if (learned) later("emb-pos", $("emb-pos-plot"), () => tokenFeatureHeatmap($("emb-pos-plot"), p.position, { ...common, rowLabels: posLabels, rowHover: posLabels.map(() => ""), rowName: "position", name: "position-embeddings", colorTitle: "W_P", hoverName: "W_P value" }));
  later("emb-sum", $("emb-sum-plot"), () => tokenFeatureHeatmap($("emb-sum-plot"), p.sum, { ...common, name: "embedding-sum", colorTitle: "sum", hoverName: "W_E + W_P" }));
  renderPermutation(trace, labels);
  for (const [id, name] of [["emb-token-plot", "token-embeddings"], ["emb-pos-plot", "position-embeddings"], ["emb-sum-plot", "embedding-sum"]]) {
    if ($(id)) addDownloads($(id), name, () => part);
  }
}

const SIGNAL = { learned: "its learned position rows added", rope: "its RoPE turns of queries and keys", none: "" };

// What the server measured, in words: the order-blind run (no position signal) against the model's own.
function permutationSummary(c, labels) {
  const [a, b] = c.swapped;
  const swap = `Swapping “${labels[a]}” (position ${a}) with “${labels[b]}” (position ${b}) and running block ${c.layer}'s attention again`;
  const free = `with no position signal, each token's output changes by at most ${sci(c.without_positions)} ` +
    `(outputs reach ${sci(c.output_scale)}): the same numbers in a new order, up to rounding`;
  const own = c.pos === "none"
    ? "This model has no position signal of its own, so that is also how it reads the prompt: nothing in its attention tells the two orders apart"
    : `With ${SIGNAL[c.pos]}, the largest change is ${sci(c.with_positions)}: now where a token stands alters what it gets`;
  const mask = c.causal_without_positions === null ? ""
    : ` The check lifts the causal mask, since letting each token see only earlier ones already encodes order: kept, with no positions, the change is ${sci(c.causal_without_positions)}.`;
  return `${swap}: ${free}. ${own}.${mask}`;
}

function renderPermutation(trace, labels) {
  const c = trace.embeddings.permutation;
  $("perm-box").hidden = !c;
  if (!c) return;
  $("perm-summary").textContent = permutationSummary(c, labels);
  $("perm-table").replaceChildren(
    el("tr", {}, ["token", "change, no positions", c.pos === "none" ? "change (no positions of its own)" : "change, the model's positions"]
      .map((h) => el("th", { text: h }))),
    ...labels.map((t, i) => el("tr", {}, el("td", { text: `${i} ${t}` }),
      el("td", { class: "num", text: sci(c.per_token_without[i]) }), el("td", { class: "num", text: sci(c.per_token_with[i]) }))));
  $("perm-fact").replaceChildren(textFactBlock(c.fact, "perm-fact-block"));
}

// Stage 1, for main.js's table: the prompt's tokens and their embeddings, drawn once per prompt.
export const panel = {
  stage: "tokens",
  parts: ["embeddings"],
  render: (trace, view) => {
    if (!view.promptChanged) return;
    showPromptTokens($("tokens"), $("token-count"), trace.tokens);
    renderEmbeddings(trace);
  },
};
