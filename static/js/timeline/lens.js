// The lens panel: the logit lens's and the tuned lens's KL to the final distribution at every stage
// (rows) and snapshot (columns), on one colour scale so the two maps compare; the slider's snapshot
// boxed, and its numbers per stage written under them.
import { $, el } from "../lib/dom.js";
import { decimal, int } from "../lib/format.js";
import { MONO, SEQ } from "../lib/palette.js";
import { draw } from "../lib/plot.js";
import { columnBox, snapshotAxis } from "./axes.js";

function kl(s, stage, key) {
  const row = s.lens.find((l) => l.stage === stage);
  return row ? row[key] : null;
}

function lensMap(gd, t, i, key, title, zmax) {
  const steps = t.snapshots.map((s) => s.step);
  const stages = t.snapshots[0].lens.map((l) => l.stage);
  draw(gd, [{
    type: "heatmap", name: title, x: steps.map((_, k) => k), y: stages.map((_, r) => r),
    z: stages.map((st) => t.snapshots.map((s) => kl(s, st, key))), hoverongaps: false,
    colorscale: SEQ, zmin: 0, zmax, xgap: 1, ygap: 1,
    colorbar: { title: { text: "KL (nats)", side: "right" }, thickness: 12 },
    customdata: stages.map((st) => steps.map((s) => [st, s])),
    hovertemplate: `${title} · %{customdata[0]} · step %{customdata[1]}<br>KL to the final distribution %{z:.4f} nats<extra></extra>`,
  }], {
    title: { text: title, x: 0, xanchor: "left", font: { size: 13 } },
    height: Math.max(260, stages.length * 26 + 150), margin: { l: 60, r: 20, t: 40, b: 60 },
    xaxis: snapshotAxis(steps, (gd.clientWidth || 450) - 200),
    yaxis: { tickmode: "array", tickvals: stages.map((_, r) => r), ticktext: stages, range: [stages.length - 0.5, -0.5],
      tickfont: { family: MONO, size: 11 }, showgrid: false, zeroline: false, automargin: true },
    shapes: [columnBox(i)],
  }, `lens-${key}-${t.run}`);
}

function lensTable(s) {
  const rows = s.lens.map((l) => el("tr", {},
    el("td", { class: "mono", text: l.stage }),
    el("td", { class: "num", text: decimal(l.logit_kl, 4) }),
    el("td", { class: "num", text: decimal(l.tuned_kl, 4) })));
  return el("table", { class: "jumps-table" },
    el("caption", { text: `KL to the final distribution at step ${int(s.step)} (nats)` }),
    el("thead", {}, el("tr", {}, el("th", { text: "stage" }), el("th", { class: "num", text: "logit lens" }),
      el("th", { class: "num", text: "tuned lens" }))),
    el("tbody", {}, rows));
}

export const lensView = {
  figures: ["lens-logit-map", "lens-tuned-map"],
  render(t, i) {
    const all = t.snapshots.flatMap((s) => s.lens.flatMap((l) => [l.logit_kl, l.tuned_kl])).filter((v) => v !== null);
    const zmax = Math.max(1e-6, ...all);
    const tuned = t.snapshots.some((s) => s.lens.some((l) => l.tuned_kl !== null));
    lensMap($("lens-logit-map"), t, i, "logit_kl", "logit lens", zmax);
    $("lens-tuned-map").closest("figure").hidden = !tuned;
    $("lens-logit-map").closest(".fig-grid").classList.toggle("one", !tuned);
    if (tuned) lensMap($("lens-tuned-map"), t, i, "tuned_kl", "tuned lens", zmax);
    const s = t.snapshots[i];
    $("lens-now").replaceChildren(tuned ? "" : "No tuned lens was trained (lens tokens 0): the logit lens alone. ",
      lensTable(s));
    $("lens-now").dataset.step = String(s.step);
  },
};
