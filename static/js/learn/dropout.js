// Dropout panel: a seeded mask and the 1/(1-p) rescale on a real embedding row of the loaded model,
// and the average over many masks, from GET /api/v1/curves/dropout.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, int, sci, visible } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("dropout-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("dropout-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/dropout?${formQuery(form)}`, signal));
  const idx = b.h.map((_, i) => i);
  await chart($("dropout-plot"), [
    { x: idx, y: b.h, type: "bar", name: "h (the embedding row)", marker: { color: OKABE.sky } },
    { x: idx, y: b.out, type: "bar", name: `after dropout: h × mask × ${fixed(b.scale, 4)}`, marker: { color: OKABE.vermillion },
      customdata: b.mask, hovertemplate: "coordinate %{x}<br>%{y:.4f}<br>mask %{customdata}<extra></extra>" },
  ], { barmode: "group", height: 300, xaxis: { title: { text: "coordinate" } }, yaxis: { title: { text: "value" } } });
  await chart($("dropout-avg-plot"), [
    { x: idx, y: b.h, type: "scatter", mode: "markers", name: "h", marker: { color: OKABE.black, size: 9, symbol: "line-ew-open" } },
    { x: idx, y: b.average_rescaled, type: "bar", name: `mean of ${int(b.trials)} masks, rescaled`, marker: { color: OKABE.blue } },
    { x: idx, y: b.average_plain, type: "bar", name: "mean without the rescale", marker: { color: OKABE.orange } },
  ], { barmode: "group", height: 300, xaxis: { title: { text: "coordinate" } }, yaxis: { title: { text: "value" } } });
  $("dropout-summary").textContent = `p = ${fixed(b.p, 2)}: ${b.kept} of ${b.h.length} numbers of the row of ${visible(b.token)} ` +
    `(token ${b.token_id}) survive this mask, each multiplied by 1/(1 − p) = ${fixed(b.scale, 4)}. Averaged over ${int(b.trials)} masks ` +
    `the rescaled vector is within ${sci(b.max_abs_error_rescaled, 2)} of the original; PyTorch's own dropout applies the same factor ` +
    `(largest difference ${sci(b.torch_max_abs_diff, 2)}).`;
}

export function init() {
  keep = figureBars([
    ["dropout-plot", "dropout-mask"],
    ["dropout-avg-plot", "dropout-average"],
  ]);
  bindForms(panel, form, load);
}
