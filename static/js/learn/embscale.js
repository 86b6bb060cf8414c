// Embedding-scale panel: embedding rows times sqrt(d_model) against the sinusoidal position vector's
// length sqrt(d_model / 2), from GET /api/v1/curves/embedding-scale.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("embscale-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("embscale-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/embedding-scale?${formQuery(form)}`, signal));
  const idx = b.embedding_norms.map((_, i) => i);
  await chart($("embscale-plot"), [
    { x: b.positions, y: b.position_norms, type: "scatter", mode: "lines", name: "sinusoidal position vector", line: { color: OKABE.orange, width: 3 } },
    { x: idx, y: b.embedding_norms_scaled, type: "scatter", mode: "markers", name: `embedding row × √d`, marker: { color: OKABE.blue, size: 5 } },
    { x: idx, y: b.embedding_norms, type: "scatter", mode: "markers", name: "embedding row as initialised", marker: { color: OKABE.vermillion, size: 5 } },
  ], { height: 300, xaxis: { title: { text: "position / token index" } }, yaxis: { title: { text: "length of the vector" }, rangemode: "tozero" } });
  $("embscale-summary").textContent = `d = ${b.d_model}: √d = ${fixed(b.sqrt_d_model, 1)}; every sinusoidal position vector has length ` +
    `√(d/2) = ${fixed(b.position_norm_formula, 1)}. Unscaled embedding rows average ${fixed(b.embedding_norm_mean, 2)}, so position would ` +
    `outweigh identity ${fixed(b.position_to_embedding, 1)} to 1; scaled, they average ${fixed(b.embedding_norm_scaled_mean, 1)}.`;
}

export function init() {
  keep = figureBars([["embscale-plot", "embedding-scale"]]);
  bindForms(panel, form, load);
}
