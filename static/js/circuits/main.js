// The /circuits page: edge circuits between a clean and a corrupted prompt. A change of the prompts,
// the metric, the answer tokens or the search's settings starts one job (POST /api/v1/circuits/jobs,
// polled for its progress; a newer one replaces it). Exact scores of every edge are asked for when
// the form says so; a 422 naming `exact` (more work than a job may do on this model) is shown, and
// the job asked again for the exact scores of the top edges only. The URL carries clean, corrupted,
// metric, answer, wrong, steps, exact, rank_by and target.
import { ApiError, isAbort, latest, showError } from "../lib/api.js";
import { $, setNote } from "../lib/dom.js";
import { runJob, showProgress } from "../lib/jobs.js";
import { askedForPair, loadPairs } from "../lib/pair.js";
import { real, setPageQuery, whole } from "../lib/query.js";
import { stageNavigation } from "../lib/stages.js";
import { renderGraph } from "./graph.js";
import { initCircuitViews, renderCircuitStats, renderCurve, renderEdgeTable, renderPairPanel, renderScatter } from "./views.js";

const given = $("circuits-form-panel").dataset;
const state = { answer: whole(given.answer, null), wrong: whole(given.wrong, null) };
const slot = latest();

// The form's settings as the request has them (a number the API refuses comes back as its 422).
function settings() {
  return { metric: $("metric").value, steps: real($("steps").value, null), exact: $("exact").value,
    rank_by: $("rank-by").value, target: real($("target").value, null) };
}

function body() {
  const s = settings();
  const b = { clean: $("clean").value, corrupted: $("corrupted").value, ...s };
  if (state.answer !== null) b.answer = state.answer;
  if (state.wrong !== null && s.metric === "logit_diff") b.wrong = state.wrong;
  return b;
}

function writeUrl() {
  const s = settings();
  const q = new URLSearchParams({ clean: $("clean").value, corrupted: $("corrupted").value, metric: s.metric });
  if (state.answer !== null) q.set("answer", state.answer);
  if (state.wrong !== null && s.metric === "logit_diff") q.set("wrong", state.wrong);
  for (const [k, id] of [["steps", "steps"], ["exact", "exact"], ["rank_by", "rank-by"], ["target", "target"]]) q.set(k, $(id).value);
  setPageQuery(q);
}

// The API's message for `field` when `err` is a 422 naming it; null otherwise.
function refusal(err, field) {
  if (!(err instanceof ApiError) || err.status !== 422 || !Array.isArray(err.detail)) return null;
  const d = err.detail.find((x) => (x.loc || []).at(-1) === field);
  return d ? d.msg : null;
}

// The job's answer: exact scores of every edge if asked and allowed, else of the top edges.
async function scored(signal) {
  const run = (b) => runJob("/circuits/jobs", b, signal, (job) => showProgress(job, "graph runs"), "edge scoring");
  const b = body();
  try {
    const res = await run(b);
    setNote($("exact-note"), "");
    return res;
  } catch (err) {
    const why = b.exact === "all" ? refusal(err, "exact") : null;
    if (why === null) throw err;
    const rankBy = b.rank_by === "exact" ? "eap_ig" : b.rank_by;
    setNote($("exact-note"), `Exact scores of every edge were refused: “${why}” So only the top edges by estimate get an exact ` +
      `score here${rankBy === b.rank_by ? "" : ", and the edges are ranked by EAP-IG (ranking by the exact scores needs them all)"}.`);
    return run({ ...b, exact: "top", rank_by: rankBy });
  }
}

async function search(signal) {
  writeUrl();
  document.body.dataset.busy = "1";
  try {
    const res = await scored(signal);
    showError(null);
    await apply(res);
  } catch (err) {
    if (!isAbort(err)) showError(askedForPair(err) ? null : err);  // (#pair-note asks for a corrupted prompt)
  } finally {
    if (!signal.aborted) delete document.body.dataset.busy;
  }
}

async function apply(res) {
  state.answer = res.metric.answer.id;
  state.wrong = res.metric.wrong ? res.metric.wrong.id : state.wrong;
  renderPairPanel(res, { onAnswer: (id) => { state.answer = id; request(); }, onWrong: (id) => { state.wrong = id; request(); } });
  renderCircuitStats(res);
  renderEdgeTable(res);
  writeUrl();
  await Promise.all([renderGraph(res), renderCurve(res), renderScatter(res)]);
  document.body.dataset.ready = "1";
}

const request = (ms = 0) => { writeUrl(); slot.soon(search, ms); };

export function init() {
  initCircuitViews();
  $("metric").value = given.metric;
  $("exact").value = given.exact;
  $("rank-by").value = given.rankBy;
  $("circuits-form").addEventListener("submit", (e) => { e.preventDefault(); request(); });
  for (const id of ["clean", "corrupted"]) {
    $(id).addEventListener("input", () => { state.answer = null; state.wrong = null; $("pair").value = ""; request(600); });
  }
  for (const id of ["metric", "exact", "rank-by", "steps", "target"]) $(id).addEventListener("change", () => request());
  stageNavigation();
  loadPairs((p) => { Object.assign(state, { answer: p.answer, wrong: p.wrong }); request(); }).catch(showError);
  request();
}
