// Shared by the training page's panels: which run is shown, and one poller per running run.
// Numbers come only from GET /api/v1/training/{id}; this module merges the `since` pages into one
// history per run and tells the panels (events on `bus`) when something changed.
import { ApiError, apiGet, apiRequest } from "../lib/api.js";
import { int } from "../lib/format.js";

export const bus = new EventTarget();
const POLL_MS = 1000;
export const TERMINAL = new Set(["done", "cancelled", "failed"]);

const runs = new Map(); // id -> { id, body (last status, history stripped), history: [...], lastStep, label }
const polls = new Map(); // id -> promise of the final run (one poll loop per run)
let shownId = null;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function emit(name, detail) {
  bus.dispatchEvent(new CustomEvent(name, { detail }));
}

export function on(name, fn) {
  bus.addEventListener(name, (e) => fn(e.detail));
}

export function getRun(id) {
  return runs.get(id) || null;
}

export function shownRun() {
  return shownId ? runs.get(shownId) || null : null;
}

export function isRunning(run) {
  return !!run && !TERMINAL.has(run.body.status);
}

function merge(id, body, label) {
  let run = runs.get(id);
  if (!run) {
    run = { id, body: null, history: [], lastStep: 0, label: label || null };
    runs.set(id, run);
  }
  if (label) run.label = label;
  for (const h of body.history) {
    if (h.step > run.lastStep) { run.history.push(h); run.lastStep = h.step; }
  }
  run.body = { ...body, history: [] };
  return run;
}

async function fetchStatus(id, since) {
  // a busy server answers 503 at once: wait and ask again rather than give up
  for (let attempt = 0; ; attempt++) {
    try {
      return await apiGet(`/training/${encodeURIComponent(id)}?since=${since}`);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 503) || attempt >= 10) throw err;
      await sleep(POLL_MS);
    }
  }
}

// Load a run's whole history once (since=0).
export async function load(id, label) {
  const known = runs.get(id);
  const body = await fetchStatus(id, known ? known.lastStep : 0);
  const run = merge(id, body, label);
  emit("run-update", run);
  return run;
}

// Poll a run every POLL_MS until it is done, cancelled or failed. The next request is only sent
// after the previous answer arrived, so slow answers never pile up. Resolves with the final run.
export function watch(id, label) {
  if (polls.has(id)) return polls.get(id);
  const p = (async () => {
    let run = await load(id, label);
    while (isRunning(run)) {
      await sleep(POLL_MS);
      run = merge(id, await fetchStatus(id, run.lastStep));
      emit("run-update", run);
    }
    emit("run-finished", run);
    return run;
  })().finally(() => polls.delete(id));
  polls.set(id, p);
  return p;
}

// Make `id` the run that the progress and replay panels show (and follow it while it runs).
export async function show(id, label) {
  shownId = id;
  emit("run-shown", { id });
  const run = await load(id, label);
  if (isRunning(run)) watch(id);
  return run;
}

// POST /api/v1/training with the raw answer: 202 (new run), 200 (cached: an identical request had
// already finished), 409 (another run is going: body.running_id) or a 422 whose detail names the field.
export async function startRun(request) {
  const { status, body } = await apiRequest("POST", "/training", request);
  if (status === 200 || status === 202) emit("runs-changed", body);
  return { status, body };
}

export function describeRequest(req) {
  const len = req.max_steps ? `${int(req.max_steps)} steps` : `${req.time_budget} s budget`;
  const over = Object.entries(req.overrides || {}).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => `${k}=${v}`);
  return [req.corpus, req.preset, ...over, `vocab ${int(req.vocab_size)}`, len, `lr ${req.max_lr}`, `warmup ${req.warmup_steps}`,
    ...(req.schedule === "wsd" ? [`wsd, cooldown ${req.cooldown}`] : []), `seed ${req.seed}`].join(" · ");
}
