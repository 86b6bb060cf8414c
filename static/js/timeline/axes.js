// What every chart of the timeline shares: the step axis, the slider's mark and the phase change's band.
// Snapshots are log-spaced (most of them early), so the line charts put the step on a log axis; step 0
// has no logarithm, so a point is drawn at step + 1 and the ticks are labelled with the step itself.
// The heatmaps give each snapshot one column (its index), labelled with its step. Nothing here
// computes a model number: it only places what the API sent.
import { int } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";

export const stepX = (step) => step + 1;

// Round steps for the ticks: 0, 1, 2, 5, 10, 20, 50, ... up to the last step, and the last step
// itself when it stands far enough from the round one before it.
function roundSteps(last) {
  const out = [0];
  for (let e = 1; e <= last * 10; e *= 10) for (const m of [1, 2, 5]) if (m * e <= last) out.push(m * e);
  if (stepX(last) / stepX(out.at(-1)) >= 1.5) out.push(last);
  return out;
}

// The x axis of a line chart over the snapshots' steps (log of step + 1).
export function stepAxis(steps) {
  const last = Math.max(1, steps.at(-1) ?? 1);
  const ticks = roundSteps(last);
  return {
    type: "log", tickmode: "array", tickvals: ticks.map(stepX), ticktext: ticks.map((s) => int(s)),
    range: [-0.04, Math.log10(stepX(last)) + 0.04], title: { text: "training step (log scale)" },
    showgrid: true, gridcolor: "#eee", zeroline: false,
  };
}

// The x axis of a heatmap with one column per snapshot (columns 0..n-1), labelled with their steps:
// every k-th column's while they would not fit (about 44 px a label).
export function snapshotAxis(steps, px) {
  const n = steps.length;
  const k = Math.ceil(n / Math.max(1, Math.floor(px / 44)));
  const vals = steps.map((_, i) => i).filter((i) => i % k === 0);
  return { tickmode: "array", tickvals: vals, ticktext: vals.map((i) => int(steps[i])), range: [-0.5, n - 0.5],
    showgrid: false, zeroline: false, automargin: true, title: { text: "training step (one column per snapshot)" } };
}

// The slider's step on a line chart: a vertical line.
export function scrubLine(step) {
  return { type: "line", xref: "x", yref: "paper", x0: stepX(step), x1: stepX(step), y0: 0, y1: 1,
    line: { color: OKABE.black, width: 1.5, dash: "dot" } };
}

// The slider's snapshot on a heatmap: a box around its column.
export function columnBox(i) {
  return { type: "rect", xref: "x", yref: "paper", x0: i - 0.5, x1: i + 0.5, y0: 0, y1: 1,
    line: { color: OKABE.vermillion, width: 2 }, fillcolor: "rgba(0,0,0,0)" };
}

// The phase change (the API's phase_change: the snapshots before and after the induction score's
// largest rise) as a shaded band on a line chart, labelled above the plot; none without one.
export function phaseBand(pc) {
  if (!pc) return { shapes: [], annotations: [] };
  const label = pc.clear ? `phase change (steps ${int(pc.from_step)}–${int(pc.step)})`
    : `largest induction rise, no jump (steps ${int(pc.from_step)}–${int(pc.step)})`;
  return {
    shapes: [{ type: "rect", xref: "x", yref: "paper", x0: stepX(pc.from_step), x1: stepX(pc.step), y0: 0, y1: 1,
      fillcolor: "rgba(213, 94, 0, 0.14)", line: { width: 0 }, layer: "below" }],
    annotations: [{ xref: "paper", yref: "paper", x: 0, y: 1, xanchor: "left", yanchor: "bottom", showarrow: false,
      text: `▒ ${label}`, font: { size: 11, color: OKABE.vermillion } }],
  };
}
