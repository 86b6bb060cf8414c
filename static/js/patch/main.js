// The /patch page: activation patching between a clean and a corrupted prompt. A change of the
// prompts, the metric, the answer tokens, the direction or the head set starts one sweep as a job
// (POST /api/v1/patch/jobs, polled for its progress; a newer one replaces it); a click on a cell
// asks POST /api/v1/patch for that cell alone (kinds: [], the pair's runs come from the cache).
// The URL carries clean, corrupted, metric, direction, answer, wrong, heads and cell.
import { apiPost, isAbort, latest, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { runJob, showProgress } from "../lib/jobs.js";
import { askedForPair, loadPairs } from "../lib/pair.js";
import { setPageQuery, whole } from "../lib/query.js";
import { stageNavigation } from "../lib/stages.js";
import { cellAt, cellName, cellOf, initPatchViews, renderCell, renderPrompts, renderSweeps } from "./views.js";

const KINDS = ["resid_pre", "attn_out", "mlp_out", "head"];
const given = $("patch-form-panel").dataset;
const parseHeads = (s) => (s || "").split(",").map((x) => x.split(".").map(Number))
  .filter((p) => p.length === 2 && p.every((n) => Number.isInteger(n) && n >= 0)).map(([layer, head]) => ({ layer, head }));
function parseCell(s) {
  const [kind, ...rest] = (s || "").split(":");
  const n = rest.map((x) => whole(x, null));
  if (["resid_pre", "attn_out", "mlp_out"].includes(kind) && n.length === 2) return { kind, layer: n[0], position: n[1] };
  if (kind === "head" && n.length === 2) return { kind, layer: n[0], head: n[1] };
  if (kind === "head_position" && n.length === 3) return { kind, layer: n[0], head: n[1], position: n[2] };
  return null;
}
const cellText = (c) => (c ? [c.kind, c.layer, ...(c.kind === "head" ? [c.head] : c.kind === "head_position" ? [c.head, c.position] : [c.position])].join(":") : "");

const state = {
  metric: given.metric, direction: given.direction, answer: whole(given.answer, null), wrong: whole(given.wrong, null),
  heads: parseHeads(given.heads), cell: parseCell(given.cell),
};
let shown = null;
const sweepSlot = latest();
const cellSlot = latest();

function writeUrl() {
  const q = new URLSearchParams({ clean: $("clean").value, corrupted: $("corrupted").value, metric: state.metric, direction: state.direction });
  if (state.answer !== null) q.set("answer", state.answer);
  if (state.wrong !== null && state.metric === "logit_diff") q.set("wrong", state.wrong);
  if (state.heads.length) q.set("heads", state.heads.map((h) => `${h.layer}.${h.head}`).join(","));
  if (state.cell) q.set("cell", cellText(state.cell));
  setPageQuery(q);
}

function body(extra = {}) {
  const b = { clean: $("clean").value, corrupted: $("corrupted").value, metric: state.metric, direction: state.direction,
    kinds: state.heads.length ? [...KINDS, "head_position"] : KINDS, heads: state.heads };
  if (state.answer !== null) b.answer = state.answer;
  if (state.wrong !== null && state.metric === "logit_diff") b.wrong = state.wrong;
  return { ...b, ...extra };
}

async function sweep(signal) {
  writeUrl();
  document.body.dataset.busy = "1";
  try {
    const result = await runJob("/patch/jobs", body(), signal, (job) => showProgress(job, "patched runs"), "sweep");
    showError(null);
    apply(result);
  } catch (err) {
    if (!isAbort(err)) showError(askedForPair(err) ? null : err);  // (#pair-note asks for a corrupted prompt)
  } finally {
    if (!signal.aborted) delete document.body.dataset.busy;
  }
}

function apply(res) {
  shown = res;
  state.answer = res.metric.answer.id;
  state.wrong = res.metric.wrong ? res.metric.wrong.id : state.wrong;
  renderPrompts(res, { onAnswer: (id) => { state.answer = id; request(); }, onWrong: (id) => { state.wrong = id; request(); } });
  if (state.cell && !res.sweeps.some((s) => cellAt(s, state.cell))) state.cell = null;
  renderSweeps(res, state.cell);
  $("head-set").textContent = state.heads.map((h) => `${h.layer}.${h.head}`).join(", ");
  writeUrl();
  document.body.dataset.ready = "1";
  if (state.cell) pick(state.cell);
}

function pick(cell) {
  state.cell = cell;
  $("sel-cell").textContent = `cell: ${cellName(cell)}`;
  $("add-head").hidden = !(cell.kind === "head" && !state.heads.some((h) => h.layer === cell.layer && h.head === cell.head));
  if (shown) renderSweeps(shown, cell);
  writeUrl();
  cellSlot.now(async (signal) => {
    try {
      const res = await apiPost("/patch", body({ kinds: [], cell }), signal);
      renderCell(res);
      document.body.dataset.cell = cellText(cell);
    } catch (err) {
      if (!isAbort(err)) showError(err);
    }
  });
}

// h / l: the chosen cell's column; [ / ]: its row (in the sweep it belongs to)
function move(dr, dc) {
  if (!shown || !state.cell) return;
  const s = shown.sweeps.find((x) => x.kind === state.cell.kind);
  const at = s && cellAt(s, state.cell);
  if (!at) return;
  const r = Math.max(0, Math.min(s.effect.length - 1, at[0] + dr));
  const c = Math.max(0, Math.min(s.effect[0].length - 1, at[1] + dc));
  pick(cellOf(s, r, c));
}

const request = (ms = 0) => { writeUrl(); sweepSlot.soon(sweep, ms); };

export function init() {
  initPatchViews({ onPick: pick });
  $("metric").value = state.metric;
  $("direction").value = state.direction;
  $("patch-form").addEventListener("submit", (e) => { e.preventDefault(); request(); });
  for (const id of ["clean", "corrupted"]) {
    $(id).addEventListener("input", () => { state.answer = null; state.wrong = null; $("pair").value = ""; request(600); });
  }
  $("metric").addEventListener("change", (e) => { state.metric = e.target.value; request(); });
  $("direction").addEventListener("change", (e) => { state.direction = e.target.value; request(); });
  $("add-head").addEventListener("click", () => {
    if (state.cell?.kind !== "head") return;
    state.heads = [...state.heads, { layer: state.cell.layer, head: state.cell.head }];
    $("add-head").hidden = true;
    request();
  });
  stageNavigation({ h: () => move(0, -1), ArrowLeft: () => move(0, -1), l: () => move(0, 1), ArrowRight: () => move(0, 1),
    "[": () => move(-1, 0), "]": () => move(1, 0) });
  loadPairs((p) => { Object.assign(state, { answer: p.answer, wrong: p.wrong, cell: null, heads: [] }); request(); }).catch(showError);
  request();
}
