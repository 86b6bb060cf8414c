// Initialisation panel: GPT-1's N(0, 0.02) against Xavier and He for a d-wide layer, the variance of
// a pre-activation (formula and a simulation on real random matrices), from GET /api/v1/curves/initialisation.
import { apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { fixed, pct } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { SERIES } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { figureBars } from "./bars.js";

const panel = $("init-panel");
let keep = null;   // hands the download bars each answer drawn (bars.js)
const form = $("init-form");

async function load(signal) {
  const b = keep(await apiGet(`/curves/initialisation?${formQuery(form)}`, signal));
  const traces = [];
  b.schemes.forEach((s, i) => {
    const total = s.histogram.counts.reduce((a, c) => a + c, 0) || 1;
    const width = s.histogram.edges[1] - s.histogram.edges[0];
    traces.push({ x: s.histogram.centers, y: s.histogram.counts.map((c) => c / total / width), type: "bar", name: `${s.label}: simulated`,
      marker: { color: SERIES[i], opacity: 0.45 }, hovertemplate: `${s.label}<br>z ≈ %{x}<br>density %{y:.3f}<extra></extra>` });
    traces.push({ x: s.histogram.centers, y: s.density_formula, type: "scatter", mode: "lines", name: `${s.label}: N(0, d·std²)`,
      line: { color: SERIES[i], width: 2 } });
  });
  await chart($("init-plot"), traces, { barmode: "overlay", bargap: 0, height: 360,
    xaxis: { title: { text: `pre-activation w·h of a ${b.width}-wide layer` } }, yaxis: { title: { text: "density" } },
    shapes: [-b.band, b.band].map((x) => ({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { dash: "dot", color: "#555" } })) });
  $("init-table").querySelector("tbody").innerHTML = b.schemes.map((s) => `<tr><td>${s.label}<div class="muted small"><code>${s.torch_init}</code></div></td>
    <td class="num">${fixed(s.std, 3)}</td><td class="num">${fixed(s.variance_formula, 3)}</td><td class="num">${fixed(s.std_formula, 3)}</td>
    <td class="num">± ${fixed(s.band_sigmas, 1)} σ</td><td class="num">${fixed(s.variance_simulated, 3)}</td>
    <td class="num">${pct(s.share_in_band_simulated, 2)}</td></tr>`).join("");
  const [g, x, h] = b.schemes;
  $("init-summary").textContent = `At width ${b.width}: GPT-1 uses std ${fixed(g.std, 2)}, Xavier would give ${fixed(x.std, 3)} and He ` +
    `${fixed(h.std, 3)}. With GPT-1's weights one pre-activation has variance ${b.width} × ${fixed(g.std, 2)}² = ${fixed(g.variance_formula, 3)} ` +
    `(std ${fixed(g.std_formula, 3)}), so [−2, 2] is ± ${fixed(g.band_sigmas, 1)} standard deviations; ${b.rows} real vectors through a real ` +
    `matrix give ${fixed(g.variance_simulated, 3)}, with ${pct(g.share_in_band_simulated, 2)} of them inside the band.`;
}

export function init() {
  keep = figureBars([["init-plot", "initialisation"]]);
  bindForms(panel, form, load);
}
