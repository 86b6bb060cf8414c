// /compare panels 2-6 and the two tables: what each model is, the totals, loss per token, the
// next-token guesses with KL both ways, one head's attention (and b − a), the logit lens and how far
// each weight moved. Data: one POST /api/v1/compare response; nothing here computes a model number.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, int, pct, tokenLabels, visible } from "../lib/format.js";
import { squareHeatmap } from "../lib/heatmaps.js";
import { MONO, OKABE, SEQ } from "../lib/palette.js";
import { chart, draw, tokenAxis } from "../lib/plot.js";

let res = null;
const COLOUR = { a: OKABE.blue, b: OKABE.orange };

export function initViews() {
  const part = (f) => () => res && f(res);
  const sides = (f) => part((r) => ({ a: f(r.a), b: f(r.b) }));
  addDownloads($("token-loss-plot"), "token-loss", sides((s) => ({ checkpoint: s.checkpoint, tokens: s.tokens, token_loss: s.token_loss })));
  addDownloads($("next-a-plot"), "next-token-a", part((r) => ({ checkpoint: r.a.checkpoint, position: r.a.position, next_token: r.a.next_token, kl_ab: r.kl_ab, kl_ba: r.kl_ba })));
  addDownloads($("next-b-plot"), "next-token-b", part((r) => ({ checkpoint: r.b.checkpoint, position: r.b.position, next_token: r.b.next_token, kl_ab: r.kl_ab, kl_ba: r.kl_ba })));
  addDownloads($("attn-a-plot"), "attention-a", part((r) => ({ layer: r.layer, head: r.head, checkpoint: r.a.checkpoint, attention: r.a.attention })));
  addDownloads($("attn-b-plot"), "attention-b", part((r) => ({ layer: r.layer, head: r.head, checkpoint: r.b.checkpoint, attention: r.b.attention })));
  addDownloads($("attn-diff-plot"), "attention-diff", part((r) => ({ layer: r.layer, head: r.head, attention_diff: r.attention_diff })));
  addDownloads($("lens-a-plot"), "logit-lens-a", part((r) => r.a.logit_lens));
  addDownloads($("lens-b-plot"), "logit-lens-b", part((r) => r.b.logit_lens));
  addDownloads($("params-plot"), "weights", part((r) => r.params));
}

export function renderViews(r) {
  res = r;
  renderSides(r);
  renderTotals(r);
  renderNextStats(r);
  later("cmp-token-loss", $("token-loss-plot"), drawTokenLoss);
  for (const w of ["a", "b"]) {
    later(`cmp-next-${w}`, $(`next-${w}-plot`), () => drawNext(w));
    later(`cmp-attn-${w}`, $(`attn-${w}-plot`), () => drawAttention(w));
    later(`cmp-lens-${w}`, $(`lens-${w}-plot`), () => drawLens(w));
  }
  renderAttentionDiff(r);
  renderParams(r);
}

// --- the two tables -------------------------------------------------------------------------------

function table(node, head, rows) {
  node.replaceChildren(el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
    el("tbody", {}, rows.map(([name, a, b, key]) => el("tr", {}, el("th", { text: name }),
      el("td", { class: "num", "data-k": key && `a.${key}`, text: a }),
      el("td", { class: "num", "data-k": key && `b.${key}`, text: b })))));
}

function renderSides(r) {
  const row = (name, f, key) => [name, f(r.a), f(r.b), key];
  table($("sides"), ["", "a", "b"], [
    row("checkpoint", (s) => s.checkpoint, "checkpoint"), row("model", (s) => s.model, "model"),
    row("parameters", (s) => int(s.params), "params"), row("layers × heads", (s) => `${s.n_layer} × ${s.n_head}`, "shape"),
    row("width d", (s) => String(s.d_model)), row("tokenizer", (s) => `${s.tokenizer}, ${int(s.vocab_size)} tokens`),
    row("tokens in this text", (s) => String(s.tokens.length), "tokens")]);
  $("tok-note").textContent = r.same_tokenizer
    ? `Both models cut the text into the same ${r.a.tokens.length} tokens: per-token losses, KL and the attention difference are defined.`
    : `The two models cut the text differently (a: ${r.a.tokens.length} tokens, b: ${r.b.tokens.length}): they are compared on the characters; losses per token, KL and attention are shown for each on its own.`;
}

function renderTotals(r) {
  table($("totals"), ["", "a", "b"], [
    ["bits over the text (every token but the first)", decimal(r.a.total_bits, 3), decimal(r.b.total_bits, 3), "total_bits"],
    ["characters scored", int(r.a.scored_chars), int(r.b.scored_chars), "scored_chars"],
    ["bits per character", decimal(r.a.bits_per_char, 4), decimal(r.b.bits_per_char, 4), "bits_per_char"],
    ["characters both scored", int(r.common_chars), int(r.common_chars), "common_chars"],
    ["bits over those characters", decimal(r.common_bits_a, 3), decimal(r.common_bits_b, 3), "common_bits"]]);
}

// --- loss per token ----------------------------------------------------------------------------------

function lossTrace(w, side, axis = "") {
  const labels = tokenLabels(side.tokens);
  return { type: "bar", name: `${w}: ${side.checkpoint}`, x: labels.map((_, i) => i), y: side.token_loss,
    marker: { color: COLOUR[w] }, xaxis: `x${axis}`, yaxis: `y${axis}`, customdata: labels,
    hovertemplate: `${w} · token %{x} “%{customdata}”<br>%{y:.3f} nats<extra></extra>` };
}

function drawTokenLoss() {
  const gd = $("token-loss-plot");
  const px = (gd.clientWidth || 1000) - 120;
  const axis = (side) => ({ ...tokenAxis(tokenLabels(side.tokens), px, {}, 20), tickangle: -60, title: { text: "token" } });
  if (res.same_tokenizer) {
    chart(gd, [lossTrace("a", res.a), lossTrace("b", res.b)], { barmode: "group", height: 360,
      xaxis: axis(res.a), yaxis: { title: { text: "loss (nats)" } }, legend: { orientation: "h", y: 1.12, x: 0 } });
    return;
  }
  chart(gd, [lossTrace("a", res.a), lossTrace("b", res.b, "2")], { height: 600,
    grid: { rows: 2, columns: 1, pattern: "independent", ygap: 0.45 }, legend: { orientation: "h", y: 1.08, x: 0 },
    xaxis: axis(res.a), xaxis2: axis(res.b), yaxis: { title: { text: "a: nats" } }, yaxis2: { title: { text: "b: nats" } } });
}

// --- next-token guesses -----------------------------------------------------------------------------

function renderNextStats(r) {
  const tokOf = (s) => `${s.position} “${visible(s.tokens[s.position].text)}”`;
  $("next-tag").textContent = `after character ${r.char}`;
  $("next-a-name").textContent = `${r.a.checkpoint} · after token ${tokOf(r.a)}`;
  $("next-b-name").textContent = `${r.b.checkpoint} · after token ${tokOf(r.b)}`;
  const box = $("kl-stats");
  if (r.kl_ab === null) {
    box.replaceChildren("The two models have different tokenizers, so their guesses are over different sets of tokens "
      + "and KL is not defined: compare the lists by eye, and the bits per character above.");
    return;
  }
  box.replaceChildren("KL(a‖b) = ", el("b", { id: "kl-ab", class: "mono", text: decimal(r.kl_ab, 4) }), " nats · KL(b‖a) = ",
    el("b", { id: "kl-ba", class: "mono", text: decimal(r.kl_ba, 4) }), " nats");
}

function drawNext(w) {
  const list = res[w].next_token;
  chart($(`next-${w}-plot`), [{
    type: "bar", orientation: "h", x: list.map((t) => t.prob), y: list.map((_, i) => i), marker: { color: COLOUR[w] },
    text: list.map((t) => pct(t.prob)), textposition: "auto", customdata: list.map((t) => [visible(t.text), t.id, t.logit]),
    hovertemplate: "“%{customdata[0]}” (id %{customdata[1]})<br>p %{x:.2%} · logit %{customdata[2]}<extra></extra>",
  }], { height: 60 + 26 * list.length, showlegend: false, margin: { l: 110, r: 16, t: 10, b: 40 },
    xaxis: { title: { text: "probability" }, tickformat: ".2~p", rangemode: "tozero" },
    yaxis: { tickmode: "array", tickvals: list.map((_, i) => i), ticktext: list.map((t) => `“${visible(t.text)}”`),
      autorange: "reversed", tickfont: { family: MONO } } });
}

// --- attention ------------------------------------------------------------------------------------------

// A causal model's rows stop at the query (the API leaves the masked keys out).
const causal = (rows) => rows.length > 1 && rows.every((row, q) => row.length === q + 1);

// a, b and b − a in one row: each map at most a third of the row, less their margins and colour
// bars (90 px for a, 150 for b and b − a, 16-px gaps); wrapped, the third stood alone in a row
function heatOpts(side, extra) {
  const room = Math.floor((($("attn-flow").clientWidth || 1100) - 90 - 150 - 150 - 32) / 3);
  return { row: side.position, causalMask: causal(side.attention), maxSide: Math.max(180, Math.min(300, room)), cell: 14, tickangle: -60, ...extra };
}

function drawAttention(w) {
  const side = res[w];
  squareHeatmap($(`attn-${w}-plot`), side.attention, tokenLabels(side.tokens),
    heatOpts(side, { colorbar: w === "b", colorTitle: "weight", hoverName: "weight", name: `attention-${w}` }));
}

function renderAttentionDiff(r) {
  $("attn-tag").textContent = `layer ${r.layer} · head ${r.head}`;
  const has = r.attention_diff !== null;
  $("attn-diff-fig").hidden = !has;
  $("attn-note").hidden = has;
  $("attn-note").textContent = has ? "" : r.same_tokenizer
    ? "One model has the causal mask and the other does not, so their maps do not line up: no difference map."
    : "The two models cut the text into different tokens, so their maps have different rows and columns: no difference map.";
  if (has) {
    later("cmp-attn-diff", $("attn-diff-plot"), () => squareHeatmap($("attn-diff-plot"), res.attention_diff,
      tokenLabels(res.a.tokens), heatOpts(res.a, { signed: true, colorTitle: "b − a", hoverName: "b − a", name: "attention-diff" })));
  }
}

// --- logit lens ----------------------------------------------------------------------------------------

function drawLens(w) {
  const side = res[w];
  const L = side.logit_lens;
  const labels = tokenLabels(side.tokens);
  const gd = $(`lens-${w}-plot`);
  const n = labels.length;
  $(`lens-${w}-name`).textContent = side.checkpoint;
  draw(gd, [{
    type: "heatmap", z: L.actual_next_prob, y: L.stages.map((_, i) => i), x: L.positions, colorscale: SEQ, zmin: 0, zmax: 1,
    colorbar: { title: { text: "p(actual next)" }, thickness: 10 }, hoverongaps: true,
    text: L.top.map((row) => row.map((c) => visible(c[0].text))), texttemplate: n <= 40 ? "%{text}" : undefined,
    textfont: { family: MONO, size: 10 },
    customdata: L.top.map((row, s) => row.map((c, p) => [L.stages[s], labels[p], visible(c[0].text), c[0].prob])),
    hovertemplate: "after %{customdata[0]}, token %{x} “%{customdata[1]}”<br>top guess “%{customdata[2]}” %{customdata[3]:.2%}"
      + "<br>p(actual next) %{z:.2%}<extra></extra>",
  }], {
    height: 120 + 36 * L.stages.length, plot_bgcolor: "#e9e9e9", margin: { l: 10, r: 10, t: 10, b: 10 },
    xaxis: { ...tokenAxis(labels, (gd.clientWidth || 1000) - 200, {}, 20), tickangle: -60, title: { text: "token" } },
    yaxis: { tickmode: "array", tickvals: L.stages.map((_, i) => i), ticktext: L.stages.map((s) => `after ${s}`),
      autorange: "reversed", tickfont: { family: MONO }, automargin: true },
    shapes: [{ type: "rect", xref: "x", yref: "y", x0: side.position - 0.5, x1: side.position + 0.5, y0: -0.5,
      y1: L.stages.length - 0.5, line: { color: OKABE.vermillion, width: 2 } }],
  }, `logit-lens-${w}`);
}

// --- weights ---------------------------------------------------------------------------------------------

// "blocks.3.attn.c_attn.weight" -> ["block 3", "attn.c_attn.weight"]: the bars are grouped by layer.
function tensorPlace(name) {
  const m = /^blocks\.(\d+)\.(.+)$/.exec(name);
  if (m) return [`block ${m[1]}`, m[2]];
  if (/^(wte|wpe)\./.test(name)) return ["embeddings", name];
  if (name.startsWith("ln_final.")) return ["final LN", name.slice("ln_final.".length)];
  return ["other", name];
}

function tensorColour(name) {
  if (/^(wte|wpe)\./.test(name)) return OKABE.green;
  if (/(^|\.)ln\w*\.|ln_final/.test(name)) return OKABE.grey;
  if (/\.attn\./.test(name)) return OKABE.blue;
  if (/\.mlp\./.test(name)) return OKABE.orange;
  return OKABE.black;
}

function renderParams(r) {
  const p = r.params;
  const gd = $("params-plot");
  $("params-stats").textContent = `a: ${int(p.a_params)} parameters · b: ${int(p.b_params)} parameters · `
    + (p.same_architecture ? `same architecture: ${p.changes.length} tensors compared one by one.`
      : "different architectures: the weights cannot be lined up tensor by tensor.");
  $("params-fig").hidden = !p.same_architecture;
  gd.dataset.bars = String(p.changes.length);
  if (!p.same_architecture) return;
  // a tensor that is all zeros in a (biases start at zero) has no relative change: the API gives null
  const zero = p.changes.filter((c) => c.relative_change === null).map((c) => c.name);
  $("params-zero").hidden = !zero.length;
  $("params-zero").textContent = zero.length ? `${zero.length} tensors are all zeros in a (${zero.slice(0, 3).join(", ")}`
    + `${zero.length > 3 ? ", …" : ""}), so ‖b − a‖ / ‖a‖ is undefined for them: no bar (their ‖b‖ is in the hover text and in the JSON).` : "";
  later("cmp-params", gd, () => {
    const places = p.changes.map((c) => tensorPlace(c.name));
    chart(gd, [{
      type: "bar", x: [places.map((x) => x[0]), places.map((x) => x[1])], y: p.changes.map((c) => c.relative_change),
      marker: { color: p.changes.map((c) => tensorColour(c.name)) },
      customdata: p.changes.map((c) => [c.name, c.shape.join(" × "), c.a_norm, c.b_norm]),
      hovertemplate: "%{customdata[0]} (%{customdata[1]})<br>‖a‖ %{customdata[2]} · ‖b‖ %{customdata[3]}"
        + "<br>‖b − a‖ / ‖a‖ = %{y}<extra></extra>",
    }], { height: 440, showlegend: false, margin: { l: 64, r: 16, t: 16, b: 150 },
      xaxis: { tickangle: -60, tickfont: { family: MONO, size: 10 } },
      yaxis: { title: { text: "‖b − a‖ / ‖a‖" }, rangemode: "tozero" } });
  });
}
