// The loss panel and the in-context-learning panel: line charts over the snapshots' steps (log axis),
// the slider's step a dotted line, the phase change a shaded band; under each, the numbers of the
// slider's step. Every number drawn or written is one the API returned.
import { $ } from "../lib/dom.js";
import { decimal, int, pct } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { phaseBand, scrubLine, stepAxis, stepX } from "./axes.js";

const KIND_COLOURS = [OKABE.blue, OKABE.orange, OKABE.green, OKABE.purple, OKABE.sky];

const stepsOf = (t) => t.snapshots.map((s) => s.step);

function lossTraces(t) {
  const snaps = t.snapshots;
  const x = snaps.map((s) => stepX(s.step));
  const steps = stepsOf(t);
  const kinds = snaps[0].loss_by_kind.map((k) => k.kind);
  return [{
    type: "scatter", mode: "lines+markers", name: "held-out loss", x, y: snaps.map((s) => s.loss), customdata: steps,
    line: { color: OKABE.black, width: 2.5 }, marker: { color: OKABE.black, size: 7 },
    hovertemplate: "step %{customdata}<br>held-out loss %{y:.4f} nats<extra></extra>",
  }, {
    type: "scatter", mode: "lines+markers", name: "trainer's validation loss", x, y: snaps.map((s) => s.val_loss),
    customdata: steps, line: { color: OKABE.grey, width: 1.5, dash: "dash" }, marker: { color: OKABE.grey, size: 5 },
    hovertemplate: "step %{customdata}<br>validation loss (the trainer's last) %{y:.4f}<extra></extra>",
  }, ...kinds.map((kind, k) => {
    const of = snaps.map((s) => s.loss_by_kind.find((b) => b.kind === kind));
    const c = KIND_COLOURS[k % KIND_COLOURS.length];
    return {
      type: "scatter", mode: "lines+markers", name: `${kind} tokens`, x, y: of.map((b) => (b ? b.loss : null)),
      customdata: of.map((b, i) => [steps[i], b ? pct(b.share) : "—"]),
      line: { color: c, width: 1.5 }, marker: { color: c, size: 5 },
      hovertemplate: `step %{customdata[0]}<br>${kind}: loss %{y:.4f} nats<br>%{customdata[1]} of the tokens<extra></extra>`,
    };
  })];
}

function lossAt(s) {
  const kinds = s.loss_by_kind.map((k) => (k.loss === null ? `${k.kind}: none in the text`
    : `${k.kind} ${decimal(k.loss, 3)} (${pct(k.share)} of the tokens)`));
  return `At step ${int(s.step)}: held-out loss ${decimal(s.loss, 3)} nats`
    + `${s.val_loss === null ? "" : `, the trainer's validation loss ${decimal(s.val_loss, 3)}`}. `
    + `By kind of token: ${kinds.join(", ")}.`;
}

export const lossView = {
  figures: ["loss-plot"],
  render(t, i) {
    chart($("loss-plot"), lossTraces(t), {
      height: 360, xaxis: stepAxis(stepsOf(t)), yaxis: { title: { text: "loss (nats per token)" } },
      shapes: [scrubLine(t.snapshots[i].step)],
    });
    $("loss-now").textContent = lossAt(t.snapshots[i]);
    $("loss-now").dataset.step = String(t.snapshots[i].step);
  },
};

function iclTraces(t) {
  const snaps = t.snapshots;
  const x = snaps.map((s) => stepX(s.step));
  return [{
    type: "scatter", mode: "lines", name: "0: the context does not help", x: [x[0], x.at(-1)], y: [0, 0],
    line: { color: OKABE.line, width: 1.2, dash: "dash" }, hoverinfo: "skip",
  }, {
    type: "scatter", mode: "lines+markers", name: "ICL score (held-out text)", x, y: snaps.map((s) => s.icl.score),
    customdata: snaps.map((s) => [s.step, s.icl.late_loss, s.icl.early_loss]),
    line: { color: OKABE.blue, width: 2.5 }, marker: { color: OKABE.blue, size: 8, symbol: "diamond" },
    hovertemplate: "step %{customdata[0]}<br>ICL score %{y:.4f} nats<br>late positions %{customdata[1]:.4f}"
      + "<br>early positions %{customdata[2]:.4f}<extra></extra>",
  }, {
    type: "scatter", mode: "lines+markers", name: "in-context score (random tokens shown twice)", x,
    y: snaps.map((s) => s.in_context.in_context_score),
    customdata: snaps.map((s) => [s.step, s.in_context.second_copy_loss, s.in_context.first_copy_loss]),
    line: { color: OKABE.black, width: 2 }, marker: { color: OKABE.black, size: 7 },
    hovertemplate: "step %{customdata[0]}<br>in-context score %{y:.4f} nats<br>second copy %{customdata[1]:.4f}"
      + "<br>first copy %{customdata[2]:.4f}<extra></extra>",
  }];
}

// The phase change's sentence from the API, or why there is none to mark.
function phaseWords(t) {
  if (t.phase_change) return t.phase_change.summary;
  if (t.snapshots.length < 2) return "A phase change needs two snapshots: only the first is read so far.";
  return "No phase change to mark: the best induction score did not rise between any two snapshots.";
}

function iclAt(s) {
  const c = s.icl;
  const ic = s.in_context;
  return `At step ${int(s.step)}: ICL score ${decimal(c.score, 3)} nats (positions ${int(c.late[0])}–${int(c.late[1] - 1)} `
    + `${decimal(c.late_loss, 3)}, positions ${int(c.early[0])}–${int(c.early[1] - 1)} ${decimal(c.early_loss, 3)}, `
    + `over ${int(c.windows)} windows); in-context score ${decimal(ic.in_context_score, 3)} nats (second copy `
    + `${decimal(ic.second_copy_loss, 3)}, first copy ${decimal(ic.first_copy_loss, 3)}).`;
}

export const iclView = {
  figures: ["icl-plot"],
  render(t, i) {
    const band = phaseBand(t.phase_change);
    chart($("icl-plot"), iclTraces(t), {
      height: 380, xaxis: stepAxis(stepsOf(t)), margin: { l: 64, r: 16, t: 36, b: 48 },
      yaxis: { title: { text: "later − earlier loss (nats per token)" }, zeroline: false },
      shapes: [...band.shapes, scrubLine(t.snapshots[i].step)], annotations: band.annotations,
    });
    $("phase-text").textContent = phaseWords(t);
    $("icl-panel").dataset.phaseStep = t.phase_change ? String(t.phase_change.step) : "";
    $("icl-now").textContent = iclAt(t.snapshots[i]);
    $("icl-now").dataset.step = String(t.snapshots[i].step);
  },
};
