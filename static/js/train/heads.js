// Panel 4 · Heads over training: GET /api/v1/training/{id}/heads for the shown run (asked again
// whenever its list of snapshots grows). Left: every role's best-head score at each snapshot against
// the step, with the role's threshold dashed in the same colour. Right: the in-context score (loss on
// the second copy of repeated random tokens minus the loss on the first copy) and the
// in-context-learning score (loss late in a window of held-out text minus early in it) against the
// step. Both mark the API's phase change (the step where the best induction score jumps most) and
// its sentence is written under the summary. Every number drawn or written here is one the API returned.
import { ApiError, apiGet, isAbort, latest } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { decimal, int } from "../lib/format.js";
import { OKABE, SERIES } from "../lib/palette.js";
import { draw } from "../lib/plot.js";
import { ROLE_COLOURS, ROLE_SYMBOLS } from "../lib/roles.js";
import * as runs from "./runs.js";

const state = { run: null, key: null, data: null };
const slot = latest();

const colour = (name, i) => ROLE_COLOURS[name] || SERIES[i % SERIES.length];
const symbol = (name) => ROLE_SYMBOLS[name] || "circle";

function xRange(run, snaps) {
  // a running run is drawn on its whole planned length, so the curves grow into it
  const last = snaps.length ? snaps[snaps.length - 1].step : 0;
  const planned = run && runs.isRunning(run) ? run.body.total_steps || 0 : 0;
  const end = Math.max(last, planned, 1);
  return [0, end];
}

// The phase change as a dotted vertical line at its step, labelled: a "jump" when the API calls it
// clear, else only the largest rise (the label on the side of the line with more room).
function phaseMark(data, range) {
  const pc = data.phase_change;
  if (!pc) return {};
  const label = pc.clear ? `induction jump (step ${int(pc.step)})` : `largest induction rise (step ${int(pc.step)})`;
  const xanchor = pc.step > (range[0] + range[1]) / 2 ? "right" : "left";
  return {
    shapes: [{ type: "line", xref: "x", yref: "paper", x0: pc.step, x1: pc.step, y0: 0, y1: 1,
      line: { color: OKABE.vermillion, width: 1.5, dash: pc.clear ? "dot" : "dashdot" } }],
    annotations: [{ xref: "x", yref: "paper", x: pc.step, y: 1, yanchor: "bottom", xanchor, showarrow: false,
      text: label, font: { size: 11, color: OKABE.vermillion } }],
  };
}

function rolesPlot(data, run) {
  const gd = $("heads-roles-plot");
  const snaps = data.snapshots;
  const x = snaps.map((s) => s.step);
  const range = xRange(run, snaps);
  const traces = [];
  data.roles.forEach((role, i) => {
    const c = colour(role.name, i);
    traces.push({
      type: "scatter", mode: "lines+markers", name: role.name, legendgroup: role.name, x,
      y: snaps.map((s) => s.best[role.name]),
      customdata: snaps.map((s) => [s.role_counts[role.name]]),
      line: { color: c, width: 2 }, marker: { color: c, size: 8, symbol: symbol(role.name) },
      hovertemplate: `${role.name}<br>step %{x}<br>best head's score %{y:.3f}<br>heads passing: %{customdata[0]}`
        + `<br>threshold ${decimal(role.threshold, 3)}<extra></extra>`,
    }, {
      type: "scatter", mode: "lines", name: `${role.name} threshold`, legendgroup: role.name, showlegend: false,
      x: range, y: [role.threshold, role.threshold], line: { color: c, width: 1.2, dash: "dash" },
      hovertemplate: `${role.name} threshold ${decimal(role.threshold, 3)}<br>(the best random-weight head `
        + `${decimal(role.baseline_max, 3)} + margin ${decimal(data.margin, 2)}, at least ${decimal(data.min_score, 2)})<extra></extra>`,
    });
  });
  draw(gd, traces, {
    ...phaseMark(data, range),
    height: 380, xaxis: { title: { text: "step" }, range },
    yaxis: { title: { text: "best head's score" }, range: [0, 1.02] },
    legend: { orientation: "h", y: 1.02, yanchor: "bottom", x: 0, font: { size: 11 } },
    margin: { l: 60, r: 15, t: 60, b: 45 },
  }, `head-roles-${data.run}`);
  gd.dataset.run = data.run;
  gd.dataset.points = String(snaps.length);
}

// The in-context-learning score on held-out text (null where a snapshot has none): hovering shows its
// two bands' losses, the whole windows' loss and the trainer's last validation loss.
function iclTrace(snaps) {
  const icl = snaps.map((s) => s.icl);
  return {
    type: "scatter", mode: "lines+markers", name: "in-context-learning score (held-out text)",
    x: snaps.map((s) => s.step), y: icl.map((c) => (c ? c.score : null)),
    customdata: snaps.map((s, i) => {
      const c = icl[i];
      return c ? [c.late_loss, c.early_loss, c.loss, s.val_loss ?? "—", `${c.late[0]}–${c.late[1] - 1}`, `${c.early[0]}–${c.early[1] - 1}`]
        : [null, null, null, s.val_loss ?? "—", "", ""];
    }),
    line: { color: OKABE.blue, width: 2 }, marker: { color: OKABE.blue, size: 8, symbol: "diamond" },
    hovertemplate: "step %{x}<br>in-context-learning score %{y:.4f} nats<br>positions %{customdata[4]}: %{customdata[0]:.4f}"
      + "<br>positions %{customdata[5]}: %{customdata[1]:.4f}<br>held-out loss %{customdata[2]:.4f}"
      + "<br>validation loss (last eval) %{customdata[3]}<extra></extra>",
  };
}

function inContextPlot(data, run) {
  const gd = $("heads-incontext-plot");
  const snaps = data.snapshots;
  const range = xRange(run, snaps);
  draw(gd, [{
    type: "scatter", mode: "lines", name: "0: the first copy does not help", x: range, y: [0, 0],
    line: { color: OKABE.line, width: 1.2, dash: "dash" }, hoverinfo: "skip",
  }, {
    type: "scatter", mode: "lines+markers", name: "in-context score", x: snaps.map((s) => s.step),
    y: snaps.map((s) => s.in_context.in_context_score),
    customdata: snaps.map((s) => [s.in_context.second_copy_loss, s.in_context.first_copy_loss]),
    line: { color: OKABE.black, width: 2 }, marker: { color: OKABE.black, size: 8 },
    hovertemplate: "step %{x}<br>in-context score %{y:.4f} nats<br>second copy %{customdata[0]:.4f}"
      + "<br>first copy %{customdata[1]:.4f}<extra></extra>",
  }, iclTrace(snaps)], {
    ...phaseMark(data, range),
    height: 380, xaxis: { title: { text: "step" }, range },
    yaxis: { title: { text: "later − earlier loss (nats per token)" }, zeroline: false },
    legend: { orientation: "h", y: 1.02, yanchor: "bottom", x: 0, font: { size: 11 } },
    margin: { l: 70, r: 15, t: 60, b: 45 },
  }, `in-context-${data.run}`);
  gd.dataset.run = data.run;
  gd.dataset.points = String(snaps.length);
}

function rolesTable(data) {
  const rows = data.roles.map((r, i) => el("tr", {},
    el("td", {}, el("span", { class: "role-key", style: `background:${colour(r.name, i)}` }), ` ${r.name}`),
    el("td", { text: r.definition }),
    el("td", { text: r.input }),
    el("td", { class: "num", text: decimal(r.baseline_max, 3) }),
    el("td", { class: "num", text: decimal(r.baseline_mean, 3) }),
    el("td", { class: "num", text: decimal(r.threshold, 3) })));
  $("heads-roles-table").querySelector("tbody").replaceChildren(...rows);
}

// Plain words from the API's numbers: which roles pass at the last snapshot, when each first passed,
// or that none passes anywhere; and the in-context score at the last snapshot.
function summary(data) {
  const snaps = data.snapshots;
  const last = snaps[snaps.length - 1];
  const names = data.roles.map((r) => r.name);
  const passing = names.filter((n) => last.role_counts[n] > 0);
  const ever = names.filter((n) => snaps.some((s) => s.role_counts[n] > 0));
  const parts = [];
  if (!ever.length) {
    parts.push(`No role passes its threshold at any of the ${int(snaps.length)} snapshot${snaps.length === 1 ? "" : "s"}: `
      + "no head of this model does any of these jobs clearly enough to count yet (the thresholds are in the table below).");
  } else {
    const now = passing.map((n) => `${n} (${int(last.role_counts[n])} head${last.role_counts[n] === 1 ? "" : "s"})`);
    parts.push(now.length ? `At step ${int(last.step)}, ${now.join(", ")} pass${now.length === 1 ? "es its" : " their"} threshold${now.length === 1 ? "" : "s"}.`
      : `At step ${int(last.step)} no role passes its threshold.`);
    parts.push(`First passed: ${ever.map((n) => `${n} at step ${int(snaps.find((s) => s.role_counts[n] > 0).step)}`).join(", ")}.`);
    const never = names.filter((n) => !ever.includes(n));
    if (never.length) parts.push(`Never passed: ${never.join(", ")}.`);
  }
  const ic = last.in_context;
  parts.push(`In-context score at step ${int(last.step)}: ${decimal(ic.in_context_score, 3)} nats `
    + `(second copy ${decimal(ic.second_copy_loss, 3)}, first copy ${decimal(ic.first_copy_loss, 3)}).`);
  const icl = last.icl;
  if (icl) {
    parts.push(`In-context-learning score on held-out text: ${decimal(icl.score, 3)} nats (positions ${int(icl.late[0])}–`
      + `${int(icl.late[1] - 1)} ${decimal(icl.late_loss, 3)}, positions ${int(icl.early[0])}–${int(icl.early[1] - 1)} `
      + `${decimal(icl.early_loss, 3)}).`);
  }
  $("heads-summary").textContent = parts.join(" ");
  const pc = data.phase_change;
  $("heads-phase").hidden = !pc;
  $("heads-phase").textContent = pc ? pc.summary : "";
  $("heads-panel").dataset.phaseStep = pc ? String(pc.step) : "";
  $("heads-panel").dataset.passing = String(ever.length);
}

function render(data) {
  state.data = data;
  const run = runs.getRun(data.run);
  const has = data.snapshots.length > 0;
  $("heads-body").hidden = !has;
  $("heads-empty").hidden = has;
  if (!has) { $("heads-empty").textContent = "The server found no saved snapshot of this run to score."; return; }
  summary(data);
  rolesTable(data);
  rolesPlot(data, run);
  inContextPlot(data, run);
  $("heads-panel").dataset.run = data.run;
  $("heads-panel").dataset.steps = data.snapshots.map((s) => s.step).join(",");
}

function setMessage(text) {
  const msg = $("heads-msg");
  msg.textContent = text || "";
  msg.hidden = !text;
}

async function fetchHeads(id, key) {
  setMessage(state.data && state.data.run === id ? "" : "Scoring the heads of every snapshot…");
  try {
    const data = await slot.now((signal) => apiGet(`/training/${encodeURIComponent(id)}/heads`, signal));
    if (state.key !== key) return;
    setMessage("");
    render(data);
  } catch (err) {
    if (isAbort(err) || state.key !== key) return;
    // a busy server (503) is asked again at the next update of the run
    if (err instanceof ApiError && err.status === 503) state.key = null;
    setMessage(`Could not score the heads of run ${id}: ${err.message}`);
  }
}

function onRun(run) {
  if (!run || run !== runs.shownRun() || !panelShown("heads")) return;
  if (state.run !== run.id) {
    state.run = run.id;
    state.key = null;
    state.data = null;
    $("heads-body").hidden = true;
  }
  const steps = run.body.snapshots;
  if (!steps.length) {
    slot.cancel();
    state.key = null;
    $("heads-body").hidden = true;
    $("heads-empty").hidden = false;
    $("heads-empty").textContent = runs.isRunning(run) ? "The run shown in panel 2 has no snapshots yet."
      : "The run shown in panel 2 saved no snapshots, so there is nothing to score.";
    setMessage("");
    return;
  }
  const key = `${run.id}|${steps.join(",")}`;
  if (key === state.key) return;
  state.key = key;
  fetchHeads(run.id, key);
}

export function init() {
  runs.on("run-update", onRun);
  runs.on("run-shown", ({ id }) => {
    if (id === state.run) return;
    slot.cancel();
    state.run = id;
    state.key = null;
    state.data = null;
    $("heads-body").hidden = true;
    $("heads-empty").hidden = false;
    $("heads-empty").textContent = "Loading the run…";
    setMessage("");
  });
  addDownloads($("heads-roles-plot"), "head-roles-over-training", () => state.data);
  addDownloads($("heads-incontext-plot"), "in-context-over-training", () => state.data);
}
