// Learning-rate schedules panel: the Transformer's and GPT-1's schedules from
// GET /api/v1/schedules/lr (editable, with kept copies overlaid), and the loaded model's own
// schedule with the learning rates its trainer really set.
import { ApiError, apiGet } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { int, sci } from "../lib/format.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { OKABE } from "../lib/palette.js";
import { chart, clearPlot } from "../lib/plot.js";
import { pageQuery, setPageQuery } from "../lib/query.js";
import { figureBars } from "./bars.js";

const panel = $("schedule-panel");
const form = $("schedule-form");
const DASHES = ["dash", "dot", "dashdot", "longdash"];
// Kept settings, drawn dashed: the two requests of each (in the URL as schedule-kept, so that a link
// and an exported file keep them too) and the answers they got.
const kept = [];
const keptAnswers = new Map();
const SCHEDULE_PATH = /^\/schedules\/lr\?kind=(transformer|gpt1)(&|$)/;
let current = { paths: [], bodies: [] };   // the requests and answers of the two curves drawn now
let keep = null;        // hands the download bars each answer drawn (bars.js)
let keepModel = null;

function label(body) {
  const p = body.params;
  return body.kind === "transformer"
    ? `Transformer d_model=${p.d_model}, warmup=${int(p.warmup)}`
    : `GPT-1 max_lr=${sci(p.max_lr)}, warmup=${int(p.warmup)}, min_lr=${sci(p.min_lr)}`;
}

function curveTrace(body, color, dash = "solid", name = null) {
  return {
    x: body.step, y: body.lr, type: "scatter", mode: "lines", name: name || label(body),
    line: { color, width: dash === "solid" ? 2.5 : 1.5, dash },
    hovertemplate: "step %{x:,}<br>learning rate %{y:.4e}<extra>%{fullData.name}</extra>",
  };
}

function peakTrace(bodies) {
  return {
    x: bodies.map((b) => b.peak.step), y: bodies.map((b) => b.peak.lr), type: "scatter", mode: "markers+text",
    name: "peaks", showlegend: false, cliponaxis: false, marker: { size: 9, color: bodies.map((b) => (b.kind === "transformer" ? OKABE.blue : OKABE.orange)),
      line: { color: "#fff", width: 1 } },
    text: bodies.map((b) => `peak ${sci(b.peak.lr, 2)} at step ${int(b.peak.step)}`), textposition: "top right",
    hovertemplate: "peak at step %{x:,}<br>learning rate %{y:.4e}<extra></extra>",
  };
}

function restoreKept() {
  try {
    const paths = JSON.parse(pageQuery().get("schedule-kept") || "[]");
    if (Array.isArray(paths)) kept.push(...paths.filter((p) => typeof p === "string" && SCHEDULE_PATH.test(p)));
  } catch { /* a link with a broken list: nothing kept */ }
}

function writeKept() {
  const q = pageQuery();
  if (kept.length) q.set("schedule-kept", JSON.stringify(kept));
  else q.delete("schedule-kept");
  setPageQuery(q);
}

function keptAnswer(path, signal) {
  if (keptAnswers.has(path)) return keptAnswers.get(path);
  return apiGet(path, signal).then((b) => { keptAnswers.set(path, b); return b; });
}

const keptTrace = (b, i) => curveTrace(b, b.kind === "transformer" ? OKABE.sky : OKABE.vermillion,
  DASHES[Math.floor(i / 2) % DASHES.length], `kept: ${label(b)}`);

async function loadPublished(signal) {
  const both = formQuery(form);
  const tq = formQuery(form, "t");
  const gq = formQuery(form, "g");
  for (const [k, v] of both) { tq.set(k, v); gq.set(k, v); }
  const paths = [`/schedules/lr?kind=transformer&${tq}`, `/schedules/lr?kind=gpt1&${gq}`];
  const [t, g, ...old] = await Promise.all([...paths.map((p) => apiGet(p, signal)), ...kept.map((p) => keptAnswer(p, signal))]);
  current = { paths, bodies: [t, g] };
  keep(old.length ? { transformer: t, gpt1: g, kept: old } : { transformer: t, gpt1: g });
  const data = [...old.map(keptTrace), curveTrace(t, OKABE.blue), curveTrace(g, OKABE.orange), peakTrace([t, g])];
  await chart($("schedule-plot"), data, {
    xaxis: { title: { text: "update step" }, tickformat: ",d" },
    yaxis: { title: { text: "learning rate" }, exponentformat: "e", rangemode: "tozero" },
    legend: { orientation: "h", y: -0.25, x: 0 }, height: 380,
  });
  $("schedule-summary").textContent =
    `Transformer: rises to ${sci(t.peak.lr, 2)} at step ${int(t.peak.step)} and has fallen to ` +
    `${sci(t.end.lr, 2)} by step ${int(t.end.step)}, still above zero. ` +
    `GPT-1: rises to ${sci(g.peak.lr, 2)} at step ${int(g.peak.step)} and reaches ${sci(g.end.lr, 2)} ` +
    `at step ${int(g.end.step)}. Hover a curve for the exact rate at any step.`;
}

// --- the loaded model's own schedule ----------------------------------------------------------

const mform = $("model-schedule-form");
const mpanel = $("model-schedule-box");
const fields = { max_lr: "m-max-lr", warmup: "m-warmup", min_lr: "m-min-lr", total_steps: "m-total", cooldown: "m-cooldown" };
let recorded = null;

// the recorded schedule's fields (a cosine one has no cooldown: that field stays empty and hidden)
function fillFields(schedule, always = false) {
  for (const [k, id] of Object.entries(fields)) {
    if (!(k in schedule)) continue;
    if (always || $(id).value === "") $(id).value = schedule[k];
  }
  $("m-cooldown-label").hidden = !("cooldown" in schedule);
}

// The API refuses kind=model (naming the field `kind`) when checkpoint.json records no schedule:
// an imported model (GPT-2, nanoGPT) was trained elsewhere. That is no error of the reader's input.
const noSchedule = (err) => err instanceof ApiError && err.status === 422 && Array.isArray(err.detail)
  && err.detail.some((d) => (d.loc || []).includes("kind"));

// The model's schedule plot and its download bar, shown or not.
function showModelPlot(on) {
  $("model-schedule-plot").hidden = !on;
  mpanel.querySelector(".dl-bar").hidden = !on;
}

function showNoSchedule(why) {
  mform.hidden = true;
  clearPlot($("model-schedule-plot"));
  showModelPlot(false);
  mpanel.dataset.schedule = "none";
  $("model-schedule-summary").textContent = `Nothing to draw for this model: ${why} ` +
    "(a model imported from elsewhere was trained by another program, which kept its schedule to itself).";
}

async function loadModel(signal) {
  // /health's `schedule` (the page's data-recorded) says there is none: nothing to ask the API
  if (mpanel.dataset.recorded === "no") {
    showNoSchedule("the loaded model's checkpoint.json records no schedule of our trainer");
    return;
  }
  let body;
  try {
    body = await apiGet(`/schedules/lr?kind=model&${formQuery(mform)}`, signal);
  } catch (err) {
    if (!noSchedule(err)) throw err;
    showNoSchedule(err.detail.map((d) => d.msg).join("; "));
    return;
  }
  mform.hidden = false;
  showModelPlot(true);
  keepModel(body);
  mpanel.dataset.schedule = "recorded";
  recorded = body.checkpoint_schedule;
  fillFields(recorded);
  const data = [curveTrace(body, OKABE.blue, "solid", `schedule (${body.function})`)];
  if (body.history) {
    data.push({
      x: body.history.step, y: body.history.lr, type: "scatter", mode: "markers", name: "rate the trainer set",
      marker: { color: OKABE.orange, size: 6, symbol: "circle-open", line: { width: 1.5 } },
      customdata: body.history.loss,
      hovertemplate: "update at step %{x:,}<br>learning rate %{y:.4e}<br>training loss %{customdata:.4f} nats<extra></extra>",
    });
  }
  await chart($("model-schedule-plot"), data, {
    xaxis: { title: { text: "update step" }, tickformat: ",d" },
    yaxis: { title: { text: "learning rate" }, exponentformat: "e", rangemode: "tozero" },
  });
  const r = recorded;
  const decay = r.kind === "warmup_stable_decay"
    ? `then hold it, and fall in a straight line over the last ${Math.round(100 * r.cooldown)}% of the run`
    : "then a cosine";
  let text = `Recorded in checkpoint.json: warm up over ${int(r.warmup)} updates to ${sci(r.max_lr, 2)}, ${decay} ` +
    `down to ${sci(r.min_lr, 2)} at step ${int(r.total_steps)}.`;
  if (body.history && body.history_max_abs_diff !== null) {
    text += " Across every recorded update the rate the trainer set differs from the curve by at most " +
      (body.history_max_abs_diff === 0 ? "0: they are identical."
        : `${sci(body.history_max_abs_diff, 2)}: a run with a time budget plans its length after a few updates and ` +
          "again a third of the way in, and its earlier updates followed the first plan.");
  } else if (body.history) {
    text += " The curve now shows your edited values; the dots still show the recorded run.";
  }
  $("model-schedule-summary").textContent = text;
}

export function init() {
  keep = figureBars([["schedule-plot", "lr-schedules"]]);
  keepModel = figureBars([["model-schedule-plot", "lr-schedule-loaded-model"]]);
  restoreKept();
  const runPublished = bindForms(panel, form, loadPublished);
  $("schedule-pin").addEventListener("click", () => {
    current.paths.forEach((p, i) => { kept.push(p); keptAnswers.set(p, current.bodies[i]); });
    writeKept();
    runPublished();
  });
  $("schedule-clear").addEventListener("click", () => { kept.length = 0; keptAnswers.clear(); writeKept(); runPublished(); });
  const runModel = bindForms(mpanel, mform, loadModel);
  $("model-schedule-reset").addEventListener("click", () => { if (recorded) { fillFields(recorded, true); runModel(); } });
}
