// The features panel: each snapshot's SAE (features alive, born, died and kept since the snapshot
// before) against the step, the longest-lived lineages as bars from the step they are born at to the
// step they are gone at, and the API's yardstick for the matches (two SAEs of one snapshot) in words.
import { $ } from "../lib/dom.js";
import { decimal, int, pct } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { scrubLine, stepAxis, stepX } from "./axes.js";

const LINEAGES_DRAWN = 24;
// alive: a wide pale band, so a line of the same numbers (born, when none is kept) still shows on it
const COUNTS = [["alive", OKABE.grey], ["born", OKABE.green], ["died", OKABE.vermillion], ["kept", OKABE.blue]];

function countTraces(t) {
  const snaps = t.snapshots;
  return COUNTS.map(([key, c]) => ({
    type: "scatter", mode: "lines+markers", name: key, x: snaps.map((s) => stepX(s.step)),
    y: snaps.map((s) => (s.sae ? s.sae[key] : null)), customdata: snaps.map((s) => s.step),
    line: { color: c, width: key === "alive" ? 7 : 1.8 }, marker: { color: c, size: key === "alive" ? 10 : 6 },
    opacity: key === "alive" ? 0.55 : 1,
    hovertemplate: `step %{customdata}<br>${key}: %{y} features<extra></extra>`,
  }));
}

// One trace of every drawn lineage: a bar from its birth to its death (or to the last step: alive at
// the end), the lineages apart by nulls; the hover names its feature at each snapshot.
function lineageTrace(t) {
  const last = t.snapshots.at(-1).step;
  const tr = { type: "scatter", mode: "lines+markers", name: "lineages", x: [], y: [], customdata: [],
    line: { color: OKABE.blue, width: 6 }, marker: { color: OKABE.blue, size: 8, symbol: "line-ns-open" },
    showlegend: false, connectgaps: false,
    hovertemplate: "lineage %{y}<br>born at step %{customdata[0]}, %{customdata[1]}<br>%{customdata[2]}<extra></extra>" };
  t.features.lineages.slice(0, LINEAGES_DRAWN).forEach((lin, r) => {
    const gone = lin.died === null ? "alive at the end" : `gone at step ${int(lin.died)}`;
    const path = lin.features.map((f) => (f === null ? "–" : `#${f}`)).join(" → ");
    const row = [int(lin.born), gone, `features: ${path}`];
    tr.x.push(stepX(lin.born), stepX(lin.died ?? last), null);
    tr.y.push(r + 1, r + 1, null);
    tr.customdata.push(row, row, null);
  });
  return tr;
}

function yardstick(f) {
  if (!f) return "No features are followed: no SAE was trained at every snapshot (SAE tokens 0).";
  const head = `The SAEs read the output of block ${int(f.layer)}; ${int(f.count)} lineages in all, the longest drawn. `;
  if (f.same_snapshot_share === null) return `${head}No second SAE was trained, so there is no yardstick for the matches.`;
  return `${head}Yardstick: two SAEs trained on the same last snapshot from different seeds share `
    + `${pct(f.same_snapshot_share)} of their features (decoder cosine ${decimal(f.min_cosine, 2)} or above). A match `
    + "between two snapshots is only as trustworthy as that: where the same snapshot's two SAEs disagree, a "
    + "“death” may only be an SAE learning the feature another way.";
}

function featuresAt(t, i) {
  const s = t.snapshots[i];
  if (!s.sae) return `No SAE at step ${int(s.step)}.`;
  const a = s.sae;
  const moved = i === 0 ? "(the first snapshot: nothing to match yet)"
    : `; since the snapshot before, ${int(a.born)} born, ${int(a.died)} died and ${int(a.kept)} kept`;
  return `At step ${int(s.step)}: ${int(a.alive)} of ${int(a.features)} features alive${i === 0 ? " " : ""}${moved}. `
    + `The SAE misses ${pct(a.fvu)} of the activations' variance (FVU ${decimal(a.fvu, 3)}).`;
}

export const featuresView = {
  figures: ["features-plot", "lineages-plot"],
  render(t, i) {
    const has = !!t.features || t.snapshots.some((s) => s.sae);
    $("features-plot").closest(".fig-grid").hidden = !has;
    $("features-yardstick").textContent = yardstick(t.features);
    $("features-now").textContent = featuresAt(t, i);
    $("features-now").dataset.step = String(t.snapshots[i].step);
    if (!has) return;
    const steps = t.snapshots.map((s) => s.step);
    const scrub = [scrubLine(steps[i])];
    chart($("features-plot"), countTraces(t), {
      height: 380, xaxis: stepAxis(steps), yaxis: { title: { text: "features" }, rangemode: "tozero" }, shapes: scrub,
    });
    const lineages = t.features ? t.features.lineages.slice(0, LINEAGES_DRAWN) : [];
    $("lineages-plot").closest("figure").hidden = !lineages.length;
    $("features-plot").closest(".fig-grid").classList.toggle("one", !lineages.length);
    if (!lineages.length) return;
    chart($("lineages-plot"), [lineageTrace(t)], {
      height: 380, xaxis: stepAxis(steps), shapes: scrub, showlegend: false,
      yaxis: { title: { text: "lineage (longest first)" }, autorange: "reversed", zeroline: false,
        tickmode: "array", tickvals: lineages.map((_, r) => r + 1).filter((r) => r === 1 || r % 5 === 0) },
    });
  },
};
