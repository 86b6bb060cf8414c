// The /timeline page: a run's snapshots read the same way and followed. The form starts one job
// (POST /api/v1/timeline/jobs), polled about every 500 ms until it ends; the timeline of the snapshots
// read so far (`partial`) is drawn as it grows, then the final one (`result`). One slider over the
// snapshots drives every panel. The URL carries the run, the form's settings and the slider's step; a
// URL that names a run starts its timeline at once (a link, a notebook's frame, an exported panel).
import { ApiError, apiGet, apiPost, isAbort, latest, showError } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { duration, int } from "../lib/format.js";
import { going } from "../lib/jobs.js";
import { pageQuery, real, setPageQuery, whole } from "../lib/query.js";
import { circuitView } from "./circuit.js";
import { iclView, lossView } from "./curves.js";
import { featuresView } from "./features.js";
import { headsView } from "./heads.js";
import { lensView } from "./lens.js";
import { summaryView } from "./summary.js";

const POLL_MS = 500;
// [panel, view]: each view draws its panel from a timeline and the slider's snapshot index
const VIEWS = [["loss", lossView], ["icl", iclView], ["heads", headsView], ["circuit", circuitView],
  ["lens", lensView], ["features", featuresView], ["summary", summaryView]];
// [input id, the request's field]: the numbers of the form (empty: the API's default)
const FIELDS = [["sae-tokens", "sae_tokens"], ["lens-tokens", "lens_tokens"], ["sae-layer", "sae_layer"],
  ["min-cosine", "min_cosine"], ["circuit-target", "circuit_target"]];

const state = { t: null, index: 0, follow: true, want: null, job: null, drawnKey: null, frame: 0 };
const slot = latest();

const nap = (ms, signal) => new Promise((ok, fail) => {
  const timer = setTimeout(ok, ms);
  signal.addEventListener("abort", () => { clearTimeout(timer); fail(new DOMException("aborted", "AbortError")); }, { once: true });
});

// --- the form and the URL ---------------------------------------------------------------------------

function request() {
  const body = { run: $("run").value, pair: $("circuit-on").checked ? $("pair").value.trim() : null };
  for (const [id, field] of FIELDS) {
    const v = real($(id).value, null);
    if (v !== null) body[field] = v;
  }
  return body;
}

function writeUrl() {
  const q = new URLSearchParams();
  if ($("run").value) q.set("run", $("run").value);
  if ($("pair").value.trim()) q.set("pair", $("pair").value.trim());
  if (!$("circuit-on").checked) q.set("circuit", "off");
  for (const [id, field] of FIELDS) if ($(id).value !== $(id).defaultValue) q.set(field, $(id).value);
  if (state.t && !state.follow) q.set("step", String(state.t.snapshots[state.index].step));
  else if (state.want !== null) q.set("step", String(state.want));
  setPageQuery(q);
}

function readUrl(q) {
  if (q.get("pair")) $("pair").value = q.get("pair");
  $("circuit-on").checked = q.get("circuit") !== "off";
  for (const [id, field] of FIELDS) if (q.has(field)) $(id).value = q.get(field);
  state.want = whole(q.get("step"), null);
}

// The #pair input's suggestions (names): the served model's pairs until a run is read, then those that
// fit the run's tokenizer (the answer's `pairs`, what `pair` may name for it).
function suggestPairs(names) {
  $("pair-list").replaceChildren(...names.map((n) => el("option", { value: n })));
  $("pair-list").dataset.names = names.join(",");
}

async function loadRuns(asked) {
  const runs = await apiGet("/timeline/runs");
  const options = runs.map((r) => el("option", { value: r.run,
    text: `${r.run} · ${int(r.steps.length)} snapshots, steps ${int(r.steps[0])}–${int(r.steps.at(-1))}` }));
  if (asked && !runs.some((r) => r.run === asked)) options.unshift(el("option", { value: asked, text: asked }));
  $("run").replaceChildren(...options);
  if (asked) $("run").value = asked;
  $("start").disabled = !options.length;
  $("runs-note").hidden = runs.length > 0;
  $("runs-note").textContent = "No run has two snapshots yet: train one on the Training page (its snapshots are saved "
    + "by default), or import a series with `gptscope import --series`.";
}

// A refusal (422) names its field: that input is marked and the message shown under the form.
function refused(err) {
  for (const [id] of FIELDS) $(id).removeAttribute("aria-invalid");
  $("pair").removeAttribute("aria-invalid");
  if (!err) { setNote($("form-error"), "", "note error"); return; }
  const fields = err instanceof ApiError && Array.isArray(err.detail) ? err.detail.map((d) => (d.loc || []).at(-1)) : [];
  for (const f of fields) {
    const id = f === "pair" ? "pair" : FIELDS.find(([, name]) => name === f)?.[0];
    if (id) $(id).setAttribute("aria-invalid", "true");
  }
  setNote($("form-error"), err.message, "note error");
}

// --- the job ----------------------------------------------------------------------------------------

function progressWords(job) {
  const n = int(job.total);
  if (job.status === "queued") return `queued: waiting for memory other work holds · ${int(job.done)} of ${n} read`;
  if (job.status === "done") return `all ${n} snapshots read · ${duration(job.elapsed)}`;
  if (job.status === "cancelled") return `cancelled after ${int(job.done)} of ${n} snapshots`;
  if (job.status === "failed") return `failed after ${int(job.done)} of ${n} snapshots`;
  if (job.current === null) return `snapshot ${int(job.done)} of ${n}`;
  return `snapshot ${int(job.done + 1)} of ${n} (step ${int(job.current)}) · ${duration(job.elapsed)}`;
}

function showJob(job) {
  state.job = job;
  const panel = $("run-panel").dataset;
  Object.assign(panel, { job: job.id, status: job.status, done: String(job.done), total: String(job.total) });
  $("progress-box").hidden = false;
  $("progress").max = Math.max(1, job.total);
  $("progress").value = job.done;
  $("progress-text").textContent = progressWords(job);
  $("cancel").disabled = !going(job);
  if (job.status === "failed") setNote($("form-error"), `The timeline failed: ${job.error}`, "note error");
  const t = job.result || job.partial;
  const key = t ? `${job.id}|${t.snapshots.length}|${job.result ? "result" : "partial"}` : null;
  if (t?.snapshots.length && key !== state.drawnKey) {
    state.drawnKey = key;
    show(t);
  }
}

// POST the request, then GET the job until it ends; each answer shown and its timeline drawn.
async function follow(body, signal) {
  let job = await apiPost("/timeline/jobs", body, signal);
  showJob(job);
  while (going(job)) {
    await nap(POLL_MS, signal);
    job = await apiGet(`/timeline/jobs/${job.id}`, signal);
    showJob(job);
  }
  return job;
}

function start() {
  refused(null);
  writeUrl();
  return slot.now(async (signal) => {
    try {
      const job = await follow(request(), signal);
      if (job.status !== "failed") showError(null);
    } catch (err) {
      if (isAbort(err)) return;
      if (err instanceof ApiError && (err.status === 422 || err.status === 404)) refused(err);
      else showError(err);
    }
  });
}

async function cancel() {
  if (!going(state.job)) return;
  $("cancel").disabled = true;
  try {
    showJob(await apiPost(`/timeline/jobs/${state.job.id}/cancel`));
  } catch (err) {
    showError(err);
  }
}

// --- drawing ----------------------------------------------------------------------------------------

function render() {
  state.frame = 0;
  const t = state.t;
  if (!t) return;
  const n = t.snapshots.length;
  const s = t.snapshots[state.index];
  $("scrub-step").textContent = `step ${int(s.step)} · snapshot ${int(state.index + 1)} of ${int(n)}`
    + `${going(state.job) ? ` read so far (of ${int(state.job.total)})` : ""}`;
  $("scrub-bar").dataset.step = String(s.step);
  for (const [name, view] of VIEWS) if (panelShown(name)) view.render(t, state.index);
}

// One drawing per frame, however fast the slider moves.
function redraw() {
  if (!state.frame) state.frame = requestAnimationFrame(render);
}

// A new timeline (one more snapshot read, or the final answer): the slider stays on its snapshot,
// or follows the newest one while it stands at the end; a step the URL asked for is taken once read.
function show(t) {
  state.t = t;
  if ($("pair-list").dataset.names !== t.pairs.join(",")) suggestPairs(t.pairs);
  const steps = t.snapshots.map((s) => s.step);
  if (state.want !== null && steps.includes(state.want)) {
    state.index = steps.indexOf(state.want);
    state.follow = false;
    state.want = null;
  } else if (state.follow) state.index = steps.length - 1;
  state.index = Math.min(state.index, steps.length - 1);
  const scrub = $("scrub");
  scrub.max = String(steps.length - 1);
  scrub.value = String(state.index);
  $("scrub-bar").hidden = false;
  $("scrub-bar").dataset.points = String(steps.length);
  document.querySelector("main").classList.remove("no-timeline");
  render();
}

function onScrub() {
  if (!state.t) return;
  state.index = Number($("scrub").value);
  state.follow = state.index === state.t.snapshots.length - 1;
  state.want = null;
  writeUrl();
  redraw();
}

export async function init() {
  window.addEventListener("unhandledrejection", (e) => showError(e.reason));
  document.querySelector("main").classList.add("no-timeline");
  for (const p of document.querySelectorAll(".now")) p.textContent = "Nothing read yet: pick a run and press Start.";
  for (const [name, view] of VIEWS) {
    for (const id of view.figures) addDownloads($(id), `timeline-${id.replace(/-(plot|map)$/, "")}`, () => state.t);
    if (view.init) view.init(() => { if (panelShown(name)) redraw(); });
  }
  $("timeline-form").addEventListener("submit", (e) => { e.preventDefault(); start(); });
  $("cancel").addEventListener("click", cancel);
  $("scrub").addEventListener("input", onScrub);
  const q = pageQuery();
  readUrl(q);
  try {
    await loadRuns(q.get("run"));
    if (!state.t) suggestPairs((await apiGet("/patch/pairs").catch(() => [])).map((p) => p.name));
    if (q.get("run")) await start();
  } catch (err) {
    showError(err);
  }
  document.body.dataset.ready = "1";
}
