// KV-cache panel: cache memory against context length for multi-head and grouped-query attention (GQA),
// from GET /api/v1/curves/kv-cache; below it, the texts' word on multi-head latent attention (`texts`).
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { bytes, int } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { textFactBlock } from "../lib/text_facts.js";
import { figureBars } from "./bars.js";

const panel = $("kv-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("kv-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/kv-cache?${formQuery(form)}`, signal));
  const hover = (what) => `${what}<br>%{x:,} tokens<br>%{customdata}<br>%{y:,} bytes<extra></extra>`;
  await chart($("kv-plot"), [
    { x: b.contexts, y: b.curve_mha, customdata: b.curve_mha.map(bytes), type: "scatter", mode: "lines",
      name: `multi-head: ${b.n_head} key/value heads`, line: { color: OKABE.orange, width: 3 }, hovertemplate: hover("multi-head") },
    { x: b.contexts, y: b.curve_gqa, customdata: b.curve_gqa.map(bytes), type: "scatter", mode: "lines",
      name: `grouped-query: ${b.n_kv_head} key/value heads`, line: { color: OKABE.blue, width: 3, dash: "dash" }, hovertemplate: hover("grouped-query") },
  ], { xaxis: { title: { text: "tokens in the cache (context)" }, tickformat: ",d" },
    yaxis: { title: { text: "cache size (bytes)" }, exponentformat: "SI", rangemode: "tozero" }, height: 300,
    legend: { orientation: "h", y: -0.35, x: 0 } });
  $("kv-summary").textContent =
    `Each token adds ${bytes(b.bytes_per_token_mha)} per sequence with one key/value head per query head ` +
    `(2 vectors × ${b.n_layer} layers × ${b.n_head} heads × ${b.d_head} numbers × ${b.bytes_per_value} bytes). ` +
    `At ${int(b.context)} tokens${b.batch > 1 ? ` for ${b.batch} sequences` : ""} that is ${bytes(b.bytes_mha)}; with ` +
    `${b.group_size} query heads sharing each key/value head (grouped-query attention${b.n_kv_head === 1 ? "; one for all of them is multi-query" : ""}) ` +
    `it is ${bytes(b.bytes_gqa)}, ${b.ratio} times smaller.`;
  // multi-head latent attention, as the texts put it (the answer's `texts`)
  $("kv-texts").replaceChildren(...b.texts.map((f) => textFactBlock(f, `kv-fact-${f.name}`)));
}

export function init() {
  keep = figureBars([["kv-plot", "kv-cache"]]);
  bindForms(panel, form, load);
}
