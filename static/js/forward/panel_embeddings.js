// Stage 1: token embeddings + position embeddings = the stream entering block 0 (T x d each).
// A model without learned positions (RoPE, or none: `embeddings.position` is null) has no W_P
// figure: its stream starts as the token embeddings alone.
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { tokenLabels } from "../lib/format.js";
import { tokenFeatureHeatmap } from "../lib/heatmaps.js";
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
  for (const [id, name] of [["emb-token-plot", "token-embeddings"], ["emb-pos-plot", "position-embeddings"], ["emb-sum-plot", "embedding-sum"]]) {
    if ($(id)) addDownloads($(id), name, () => part);
  }
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
