// Stage 3, step b′ (RoPE models only): how rotary positions turn the selected head's queries and
// keys. The angle of every pair of dimensions at every position, the queries before and after the
// turn, and the distance check: one query / key pair scored at distances 0..T-1 twice, with the key
// at position 0 and at a far offset; the curves coincide because the score depends on the distance only.
// Data: the `rope` part of POST /api/v1/forward (the selected layer, head and position).
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, tokenLabels } from "../lib/format.js";
import { CYCLIC, OKABE, SIGNED } from "../lib/palette.js";
import { draw, signedLimit, tokenAxis } from "../lib/plot.js";

let part = null;
let labels = [];

export function initRope() {
  if (!$("step-rope")) return;
  addDownloads($("rope-angles-plot"), "rope-angles", () => part);
  addDownloads($("rope-q-plot"), "rope-queries", () => part);
  addDownloads($("rope-distance-plot"), "rope-distance-check", () => part?.distance_check);
}

export function renderRope(trace) {
  if (!trace.rope || !$("step-rope")) return;
  part = trace.rope;
  labels = tokenLabels(trace.tokens);
  const r = part;
  const pairs = r.frequencies.length;
  $("rope-shapes").innerHTML = `layer ${r.layer}, head ${r.head} (key/value head ${r.kv_head}): <b>d<sub>head</sub></b> = ${2 * pairs}, ` +
    `so ${pairs} pairs; base ${r.base}; θ from ${decimal(r.frequencies[0], 4)} (pair 0) to ${decimal(r.frequencies[pairs - 1], 4)} ` +
    `(pair ${pairs - 1}) radians per position. Angles are T × ${pairs}; q before and after the turn T × ${2 * pairs}.`;
  $("step-rope").dataset.head = `${r.layer}.${r.head}`;
  later("rope-angles", $("rope-angles-plot"), () => drawAngles(r));
  later("rope-q", $("rope-q-plot"), () => drawQueries(r));
  later("rope-distance", $("rope-distance-plot"), () => drawDistance(r, trace.position));
}

function drawAngles(r) {
  const T = r.angles.length;
  const height = Math.max(240, Math.min(900, 100 + T * 15));
  draw($("rope-angles-plot"), [{
    type: "heatmap", z: r.angles, x: r.frequencies.map((_, i) => i), y: r.angles.map((_, t) => t),
    colorscale: CYCLIC, zmin: -Math.PI, zmax: Math.PI,
    colorbar: { title: { text: "angle (rad)", side: "right" }, thickness: 10, tickvals: [-Math.PI, 0, Math.PI], ticktext: ["−π", "0", "π"] },
    customdata: r.angles.map((row, t) => row.map(() => labels[t] ?? "")),
    hovertemplate: "position %{y} “%{customdata}”<br>pair %{x}<br>angle %{z} rad<extra></extra>",
  }], {
    height, margin: { l: 20, r: 10, t: 20, b: 45 },
    xaxis: { title: { text: "pair of dimensions (fast → slow)" }, dtick: r.frequencies.length > 16 ? undefined : 1, showgrid: false, zeroline: false },
    yaxis: { ...tokenAxis(labels, height - 70), autorange: "reversed" },
  }, "rope-angles");
}

// q before and after the turn, side by side on one colour scale.
function drawQueries(r) {
  const T = r.q.length;
  const height = Math.max(240, Math.min(900, 100 + T * 15));
  const lim = Math.max(signedLimit(r.q), signedLimit(r.q_rotated));
  const mats = [["q", "q before"], ["q_rotated", "q after the turn"]];
  const axes = {};
  const data = mats.map(([key, name], j) => {
    const x = `x${j ? j + 1 : ""}`;
    axes[`xaxis${j ? j + 1 : ""}`] = { domain: [j * 0.52, j * 0.52 + 0.48], anchor: "y", showgrid: false, zeroline: false,
      title: { text: `${name}: dim 0..${r.q[0].length - 1}` } };
    return { type: "heatmap", z: r[key], name, xaxis: x, yaxis: "y", coloraxis: "coloraxis",
      customdata: r[key].map((row, t) => row.map(() => labels[t] ?? "")),
      hovertemplate: `${name}<br>position %{y} “%{customdata}”<br>dim %{x}: %{z}<extra></extra>` };
  });
  draw($("rope-q-plot"), data, {
    height, ...axes, margin: { l: 20, r: 10, t: 20, b: 45 },
    yaxis: { ...tokenAxis(labels, height - 70), autorange: "reversed" },
    coloraxis: { colorscale: SIGNED, cmin: -lim, cmax: lim, cmid: 0, colorbar: { title: { text: "value" }, thickness: 10 } },
  }, "rope-queries");
}

function drawDistance(r, position) {
  const c = r.distance_check;
  const gap = Math.max(...c.scores_at_start.map((v, i) => Math.abs(v - c.scores_at_offset[i])));
  draw($("rope-distance-plot"), [
    { type: "scatter", mode: "lines", name: "key at position 0", x: c.distances, y: c.scores_at_start,
      line: { color: OKABE.blue, width: 4 }, hovertemplate: "distance %{x}<br>score %{y}<extra>key at 0</extra>" },
    { type: "scatter", mode: "markers", name: `key at position ${c.offset}`, x: c.distances, y: c.scores_at_offset,
      marker: { color: OKABE.orange, size: 8, symbol: "circle-open", line: { width: 2 } },
      hovertemplate: `distance %{x}<br>score %{y}<extra>key at ${c.offset}</extra>` },
  ], {
    height: 320, margin: { l: 60, r: 20, t: 36, b: 70 }, showlegend: true, legend: { orientation: "h", y: -0.3 },
    title: { text: `the query and key of position ${position}, layer ${r.layer}, head ${r.head}: largest gap between the curves ${decimal(gap, 5)}`,
      x: 0, xanchor: "left", font: { size: 12 } },
    xaxis: { title: { text: "distance d = query position − key position" }, rangemode: "tozero" },
    yaxis: { title: { text: "score q·k / √d_head" } },
  }, "rope-distance-check");
  $("rope-distance-plot").dataset.gap = String(gap);
}

// Stage 3's step b′ (RoPE models only), for main.js's table.
export const panel = {
  stage: "block",
  parts: ["rope"],
  init: () => initRope(),
  render: (trace, view) => { if (view.parts.includes("rope")) renderRope(trace); },
};
