// The heads panel: one role's score of every head (rows "layer.head") at every snapshot (columns), the
// role picked in a select (induction first), the slider's snapshot boxed; under it each role's best head
// against the step with the role's threshold dashed, and the phase change's band.
import { $, el } from "../lib/dom.js";
import { decimal, int } from "../lib/format.js";
import { SEQ, SERIES } from "../lib/palette.js";
import { chart, draw } from "../lib/plot.js";
import { ROLE_COLOURS, ROLE_SYMBOLS } from "../lib/roles.js";
import { columnBox, phaseBand, scrubLine, snapshotAxis, stepAxis, stepX } from "./axes.js";

const DEFAULT_ROLE = "induction";
const roleColour = (name, i) => ROLE_COLOURS[name] || SERIES[i % SERIES.length];

function fillRoles(t) {
  const select = $("role");
  const names = t.roles.map((r) => r.name);
  if ([...select.options].map((o) => o.value).join() === names.join()) return;
  const keep = select.value || DEFAULT_ROLE;
  select.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
  select.value = names.includes(keep) ? keep : names[0];
}

function headsMap(t, i, role) {
  const gd = $("heads-map");
  const snaps = t.snapshots;
  const steps = snaps.map((s) => s.step);
  const labels = [];
  for (let l = 0; l < t.n_layer; l++) for (let h = 0; h < t.n_head; h++) labels.push(`${l}.${h}`);
  // z[row = head][column = snapshot]: the API's [layer][head] score at each snapshot
  const z = labels.map((_, r) => snaps.map((s) => s.scores[role][Math.floor(r / t.n_head)][r % t.n_head]));
  const def = t.roles.find((r) => r.name === role);
  const rowPx = Math.max(6, Math.min(22, Math.floor(640 / labels.length)));
  draw(gd, [{
    type: "heatmap", name: `${role} score`, z, x: steps.map((_, k) => k), y: labels.map((_, r) => r),
    colorscale: SEQ, zmin: 0, zmax: 1, colorbar: { title: { text: "score", side: "right" }, thickness: 12 },
    customdata: labels.map((h) => steps.map((s) => [h, s])), xgap: 1, ygap: 1,
    hovertemplate: `head %{customdata[0]} · step %{customdata[1]}<br>${role} score %{z:.3f}`
      + `<br>threshold ${decimal(def.threshold, 3)}<extra></extra>`,
  }], {
    height: labels.length * rowPx + 130, margin: { l: 60, r: 20, t: 20, b: 70 },
    xaxis: snapshotAxis(steps, (gd.clientWidth || 900) - 180),
    yaxis: { tickmode: "array", tickvals: labels.map((_, r) => r).filter((r) => rowPx >= 12 || r % t.n_head === 0),
      ticktext: labels.filter((_, r) => rowPx >= 12 || r % t.n_head === 0), range: [labels.length - 0.5, -0.5],
      title: { text: "head (layer.head)" }, showgrid: false, zeroline: false, automargin: true },
    shapes: [columnBox(i)],
  }, `head-scores-${role}`);
  gd.dataset.role = role;
}

function bestTraces(t) {
  const snaps = t.snapshots;
  const x = snaps.map((s) => stepX(s.step));
  const ends = [x[0], x.at(-1)];
  return t.roles.flatMap((role, k) => {
    const c = roleColour(role.name, k);
    return [{
      type: "scatter", mode: "lines+markers", name: role.name, legendgroup: role.name, x,
      y: snaps.map((s) => s.best[role.name]), customdata: snaps.map((s) => s.step),
      line: { color: c, width: 2 }, marker: { color: c, size: 7, symbol: ROLE_SYMBOLS[role.name] || "circle" },
      hovertemplate: `${role.name}<br>step %{customdata}<br>best head's score %{y:.3f}<br>threshold `
        + `${decimal(role.threshold, 3)}<extra></extra>`,
    }, {
      type: "scatter", mode: "lines", name: `${role.name} threshold`, legendgroup: role.name, showlegend: false,
      x: ends, y: [role.threshold, role.threshold], line: { color: c, width: 1.2, dash: "dash" },
      hovertemplate: `${role.name} threshold ${decimal(role.threshold, 3)} (random weights' best head `
        + `${decimal(role.baseline_max, 3)})<extra></extra>`,
    }];
  });
}

// The picked role's best head at the slider's step, and whether it passes the role's threshold.
function headsAt(t, i, role) {
  const s = t.snapshots[i];
  const def = t.roles.find((r) => r.name === role);
  let best = null;
  s.scores[role].forEach((row, l) => {
    row.forEach((v, h) => { if (!best || v > best.v) best = { v, l, h }; });
  });
  const passes = s.best[role] >= def.threshold;
  return `At step ${int(s.step)} the best ${role} head is ${best.l}.${best.h}, scoring ${decimal(s.best[role], 3)}: `
    + `${passes ? "at or above" : "below"} the role's threshold of ${decimal(def.threshold, 3)} `
    + `(${def.definition}).`;
}

export const headsView = {
  figures: ["heads-map", "best-plot"],
  init(redraw) {
    $("role").addEventListener("change", redraw);
  },
  render(t, i) {
    fillRoles(t);
    const role = $("role").value;
    headsMap(t, i, role);
    const band = phaseBand(t.phase_change);
    chart($("best-plot"), bestTraces(t), {
      height: 380, xaxis: stepAxis(t.snapshots.map((s) => s.step)), margin: { l: 64, r: 16, t: 36, b: 48 },
      yaxis: { title: { text: "best head's score" }, range: [0, 1.02] },
      shapes: [...band.shapes, scrubLine(t.snapshots[i].step)], annotations: band.annotations,
    });
    $("heads-now").textContent = headsAt(t, i, role);
    $("heads-now").dataset.step = String(t.snapshots[i].step);
  },
};
