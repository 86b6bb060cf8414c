// Sizes panel: the parameter count of a preset or any config (GET /api/v1/params, which calls
// model.gpt.count_params), with today's block choices (RoPE, RMSNorm, SwiGLU, grouped-query
// attention, experts) and the parts the API names; the table of known models (GET /api/v1/params/presets).
import { apiGet, showError } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { int, pct } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { SERIES } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("sizes-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("params-form");
const preset = $("params-preset");
const FIELDS = { n_layer: "params-layers", d_model: "params-d", n_head: "params-heads", vocab_size: "params-vocab", n_ctx: "params-ctx",
  n_kv_head: "params-kv", n_expert: "params-experts", top_k_experts: "params-top-k" };
// The block's choices (selects whose first option, "preset", is filled with the preset's own value).
const CHOICES = { pos: "params-pos", norm: "params-norm", norm_type: "params-norm-type", mlp: "params-mlp" };
const POSITIONS = { rope: "rotations of q and k (RoPE)", sinusoidal: "fixed sinusoids added to the embeddings" };
const MLPS = { swiglu: "SwiGLU: gate, up and down matrices", gelu: "GELU: up and down matrices", relu: "ReLU: up and down matrices" };
const edited = () => [...Object.values(FIELDS), ...Object.values(CHOICES)].some((id) => $(id).value !== "");

function row(label, value, note = "") {
  return `<tr><th scope="row">${label}</th><td class="num">${value}</td><td class="cell-note">${note}</td></tr>`;
}

async function load(signal) {
  const b = keep(await apiGet(`/params?${formQuery(form)}`, signal));
  const c = b.counts;
  const cfg = b.config;
  for (const [k, id] of Object.entries(FIELDS)) $(id).placeholder = int(cfg[k]);
  for (const [k, id] of Object.entries(CHOICES)) $(id).options[0].textContent = `preset: ${cfg[k]}`;
  const gqa = cfg.n_kv_head && cfg.n_kv_head !== cfg.n_head;
  $("params-table").querySelector("tbody").innerHTML = [
    row("Every parameter", int(c.total), "what the model trains; a tied matrix counted once"),
    row("Paper convention", int(c.seed_convention), "weight matrices and embedding tables only"),
    row("Token embedding", int(c.token_embedding), `${int(cfg.vocab_size)} × ${int(cfg.d_model)}: ${pct(b.token_embedding_share)} of the paper count`),
    row("Position embedding", int(c.position_embedding),
      cfg.pos === "learned" ? `${int(cfg.n_ctx)} × ${int(cfg.d_model)}` : `none stored: positions are ${POSITIONS[cfg.pos] || "not given at all"}`),
    row(b.encoder_decoder ? "One decoder layer's weights" : "One block's weights", int(c.per_block_seed_convention),
      `attention ${int(c.attention_weights_per_block)} + ${cfg.n_expert ? `${int(cfg.n_expert)} experts` : cfg.mlp === "swiglu" ? "SwiGLU MLP" : "MLP"} ` +
      `${int(c.mlp_weights_per_block)}; 12d² = ${int(b.twelve_d_squared)}`),
    row("Attention heads", `${int(cfg.n_head)} / ${int(cfg.n_kv_head || cfg.n_head)}`,
      gqa ? `query / key-value heads: grouped-query attention, the ${int(cfg.n_head)} query heads share ${int(cfg.n_kv_head)} key/value heads`
        : "query / key-value heads: one key/value head per query head (multi-head attention)"),
    row("MLP", cfg.n_expert ? `${int(cfg.n_expert)} × ${int(cfg.d_mlp)}` : int(cfg.d_mlp),
      `${MLPS[cfg.mlp] || MLPS.gelu}, ${int(cfg.d_mlp)} wide` +
      (cfg.n_expert ? `; ${int(cfg.n_expert)} experts per block, each token routed to ${int(cfg.top_k_experts)}` : "")),
    row(b.encoder_decoder ? `All ${int(cfg.n_layer)} + ${int(cfg.n_layer)} layers` : `All ${int(cfg.n_layer)} blocks`, int(b.non_embedding), "the non-embedding parameters (N in the scaling law)"),
    row(`Biases and ${cfg.norm_type === "rmsnorm" ? "RMSNorm" : "LayerNorm"}`, int(c.biases_and_norms), "the difference between the first two rows"),
  ].join("");
  $("params-parts").querySelector("tbody").replaceChildren(...b.parts.map((p) => el("tr", {},
    el("td", { text: p.label }), el("td", { class: "num", text: int(p.count) }), el("td", { class: "num", text: pct(p.share) }))));
  panel.dataset.total = String(c.total);
  encoderDecoder(b.encoder_decoder);
  await chart($("params-plot"), b.parts.map((p, i) => ({
    x: [p.count], y: ["parameters"], type: "bar", orientation: "h", name: p.label, marker: { color: SERIES[i % SERIES.length] },
    customdata: [p.share], hovertemplate: `${p.label}<br>%{x:,} parameters<br>%{customdata:.2%} of all<extra></extra>`,
  })), { barmode: "stack", height: 240, xaxis: { title: { text: "parameters" }, exponentformat: "SI" },
    yaxis: { showticklabels: false }, legend: { orientation: "h", y: -0.45, x: 0 }, margin: { l: 10, r: 10, t: 10, b: 40 } });
  $("params-summary").textContent =
    `${preset.options[preset.selectedIndex].text}${edited() ? " (edited)" : ""}: ` +
    `${int(c.seed_convention)} by the paper's convention, ${int(c.total)} counting everything. ` +
    `The token embedding table alone is ${pct(b.token_embedding_share)} of it, embeddings together ${pct(b.embedding_share)}; ` +
    "that share shrinks as models get wider and deeper, because blocks grow with d² and the table only with d.";
}

// preset=transformer-base: the encoder-decoder's tied and untied totals and where they differ.
function encoderDecoder(e) {
  const box = $("params-encdec");
  box.hidden = !e;
  if (!e) return;
  box.textContent = `Encoder-decoder: ${int(e.encoder)} in the encoder (${int(e.encoder_layer)} per layer), ${int(e.decoder)} in the ` +
    `decoder (${int(e.decoder_layer)} per layer, cross-attention included), ${int(e.embedding)} in the shared embedding table. ` +
    `Tied: ${int(e.tied_total)} (the paper says ${int(e.stated_tied)}); untied: ${int(e.untied_total)} (the texts say about ` +
    `${int(e.stated_untied)}). The difference, ${int(e.difference)}, is exactly one more vocabulary × d output matrix.`;
}

async function loadPresets() {
  const b = await apiGet("/params/presets");
  $("presets-table").querySelector("tbody").innerHTML = b.presets.map((p) => `<tr>
    <td>${p.label}</td><td class="num">${int(p.config.n_layer)}</td><td class="num">${int(p.config.d_model)}</td>
    <td class="num">${int(p.config.vocab_size)}</td><td class="num">${int(p.seed_convention)}</td><td class="num">${int(p.total)}</td>
    <td class="num">${pct(p.token_embedding_share)}</td><td class="num">${int(p.batch_size)}</td><td class="num">${int(p.context)}</td>
    <td class="num">${int(p.tokens_per_update)}</td></tr>`).join("");
  const gpt3 = b.presets.find((p) => p.name === "gpt3");
  if (gpt3) {
    $("presets-note").textContent = `One GPT-3 block, at width d = ${int(gpt3.config.d_model)}, holds ${int(gpt3.per_block)} ` +
      "weights on its own: 12d², two thirds of them in the MLP.";
  }
}

export function init() {
  keep = figureBars([["params-plot", "parameter-count"]]);
  preset.addEventListener("change", () => { for (const id of [...Object.values(FIELDS), ...Object.values(CHOICES)]) $(id).value = ""; });
  bindForms(panel, form, load);
  loadPresets().catch(showError);
}
