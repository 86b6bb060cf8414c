// The /attribution page: a prompt's attribution graph through the served model's transcoders. The
// form's run starts one job (POST /api/v1/attribution/jobs, polled for its progress in features
// whose inputs are computed; a newer run replaces it); its answer is drawn as a graph (graph.js),
// with the hovered and pinned nodes and the supernodes beside it (side.js), the intervention panel
// (intervene.js), the set's and the graph's figures (trust.js) and the graph beside another set's
// (compare.js). The URL carries the request (text, transcoders, token, wrong, node_threshold), the
// pinned nodes (pin=ID,ID), the supernodes (group=NAME|ID,ID, one each), the intervention run
// (scale=ID:S,ID:S, run again on load), the node whose inputs are split by head (heads=ID: heads.js),
// the head asked why it attended (head=L.H, query=P, key=P: qk.js), the supernodes proposed
// (propose=SIGNAL: supernodes.js; an accepted one is a group= like any other) and the graph checked
// on the real model (trust=1: trust.js), both asked again on load.
import { isAbort, latest, showError } from "../lib/api.js";
import { addDownloads } from "../lib/downloads.js";
import { $ } from "../lib/dom.js";
import { int, pct } from "../lib/format.js";
import { runJob, showProgress } from "../lib/jobs.js";
import { pageQuery, setPageQuery, whole } from "../lib/query.js";
import { stageNavigation } from "../lib/stages.js";
import { clearCompare, compareSets, renderCompareChoices } from "./compare.js";
import { graphBody, initForm, loadChoices, loadSets } from "./form.js";
import { drawAttributionGraph, graphStats } from "./graph.js";
import { initHeadParts, loadHeadParts, selectNode, showEdgeHeads } from "./heads.js";
import { initIvPanel, ivBody, pinnedFeatures, renderIvTable, runIntervention } from "./intervene.js";
import { nodeKey } from "./nodes.js";
import { initQk } from "./qk.js";
import { initSide, renderSide, showHovered, togglePin } from "./side.js";
import { clearProposals, initProposals, propose } from "./supernodes.js";
import { checkTrust, clearTrust, initTrust, renderHonesty, renderSet } from "./trust.js";

const given = $("attribution-form-panel").dataset;
const state = { pins: [], groups: [], ticked: new Set(), scales: {}, applied: null, sel: null, head: null, query: null, key: null,
  propose: null, trust: false };
let res = null;        // the answer drawn
let traced = null;     // the request it answers
let view = null;       // what graph.js drew of it
let sets = [];
let ivOnLoad = false;  // the URL's intervention, run once the first graph is drawn
let askOnLoad = {};    // the URL's proposals and check, asked for once the first graph is drawn
const SIGNALS = ["auto", "decoder", "coactivation", "targets"];
const slot = latest();
const choiceSlot = latest();

const split = (s, sep) => { const i = s.lastIndexOf(sep); return i > 0 ? [s.slice(0, i), s.slice(i + 1)] : null; };

function readUrl() {
  const q = pageQuery();
  state.pins = (q.get("pin") || "").split(",").filter(Boolean);
  state.groups = q.getAll("group").map((g) => split(g, "|")).filter(Boolean)
    .map(([name, ids]) => ({ name, members: ids.split(",").filter(Boolean) }));
  state.scales = Object.fromEntries((q.get("scale") || "").split(",").map((s) => split(s, ":")).filter(Boolean));
  ivOnLoad = Object.keys(state.scales).length > 0;
  state.sel = q.get("heads") || null;
  state.head = state.sel && /^\d+\.\d+$/.test(q.get("head") || "") ? q.get("head") : null;
  state.query = whole(q.get("query"));
  state.key = whole(q.get("key"));
  askOnLoad = { propose: SIGNALS.includes(q.get("propose")) ? q.get("propose") : null, trust: q.get("trust") === "1" };
  if (askOnLoad.propose) $("propose-signal").value = askOnLoad.propose;
}

function writeUrl() {
  const b = traced ?? graphBody();
  const q = new URLSearchParams({ text: b.text, transcoders: b.transcoders });
  for (const k of ["token", "wrong"]) if (b[k] !== undefined) q.set(k, b[k]);
  q.set("node_threshold", b.node_threshold);
  if (state.pins.length) q.set("pin", state.pins.join(","));
  for (const g of state.groups) q.append("group", `${g.name}|${g.members.join(",")}`);
  if (state.applied) q.set("scale", Object.entries(state.applied).map(([id, s]) => `${id}:${s}`).join(","));
  if (state.sel) q.set("heads", state.sel);
  if (state.sel && state.head) {
    q.set("head", state.head);
    for (const k of ["query", "key"]) if (state[k] !== null) q.set(k, state[k]);
  }
  if (state.propose) q.set("propose", state.propose);
  if (state.trust) q.set("trust", "1");
  setPageQuery(q);
}

const blocks = () => sets.find((s) => s.name === res.transcoders)?.quality.layers.length ?? 1 + Math.max(0, ...res.nodes.map((n) => n.layer ?? 0));

async function redraw() {
  renderSide(res);
  renderIvTable(res, state);
  view = await drawAttributionGraph(res, blocks(), state.groups, new Set(state.pins),
    { onClick, onHover: (id) => showHovered(id, res, view), onEdge: (s, t) => showEdgeHeads(s, t, res) });
  graphStats(res, view, state.groups.length);
  $("graph-plot").dataset.pins = state.pins.join();   // drawn with these pinned (for whoever waits on it)
  $("bar-stats").textContent = `graph: ${int(res.nodes.length)} nodes · ${int(view.edges.length)} edges drawn · ` +
    `errors' influence ${pct(res.error_influence)} · ${int(state.pins.length)} pinned · ${int(state.groups.length)} supernodes`;
}

// A click on a node: it is pinned (or unpinned), and one with inputs has them split by head.
function onClick(id) {
  selectNode(id, res, traced.text);
  togglePin(id);
}

// A change beside the graph: pins (the intervention shown no longer matches them) or supernodes.
function onSideChange() {
  const pinned = pinnedFeatures(res, state.pins).map(nodeKey).join();
  if (state.applied && pinned !== Object.keys(state.applied).join()) {
    state.applied = null;
    $("iv-result").hidden = true;
  }
  writeUrl();
  redraw().catch(showError);
}

// Propose supernodes for the graph drawn, with the signal chosen.
async function proposeNow() {
  const signal = $("propose-signal").value;
  try {
    await propose(res, traced, signal);
    state.propose = signal;
    writeUrl();
  } catch (err) {
    showError(err);
  }
}

async function checkNow() {
  try {
    await checkTrust(traced);
    state.trust = true;
    writeUrl();
  } catch (err) {
    showError(err);
  }
}

// A proposal's ticked members checked in panel 2: pinned alone, each at scale 0, and run.
async function takeOut(ids) {
  if (!ids.length) return;
  state.pins = ids;
  state.ticked.clear();
  for (const id of ids) state.scales[id] = 0;
  onSideChange();
  $("intervene-panel").scrollIntoView({ block: "start" });
  await intervene();
}

async function intervene() {
  const body = ivBody(res, traced.text, state);
  try {
    await runIntervention(body, res);
    state.applied = Object.fromEntries(pinnedFeatures(res, state.pins).map((n, i) => [nodeKey(n), body.interventions[i].scale]));
    showError(null);
    writeUrl();
  } catch (err) {
    showError(err);
  }
}

// A new answer: the pins and supernodes it lacks are dropped, the rest drawn on it.
async function apply(answer, body) {
  res = answer;
  traced = body;
  const ids = new Set(res.nodes.map(nodeKey));
  state.pins = state.pins.filter((id) => ids.has(id));
  state.groups = state.groups.map((g) => ({ ...g, members: g.members.filter((m) => ids.has(m)) })).filter((g) => g.members.length);
  state.ticked.clear();
  state.applied = null;
  $("iv-result").hidden = true;
  state.propose = null;
  state.trust = false;
  clearProposals();
  clearTrust();
  clearCompare();
  renderCompareChoices(sets, body.transcoders);
  $("propose").disabled = false;
  $("trust-run").disabled = false;
  $("compare-run").disabled = false;
  renderHonesty(res);
  const heads = loadHeadParts(res, body.text);
  await redraw();
  if (ivOnLoad) { ivOnLoad = false; await intervene(); }
  const asked = askOnLoad;
  askOnLoad = {};
  if (asked.propose) { $("propose-signal").value = asked.propose; await proposeNow(); }
  if (asked.trust) await checkNow();
  await heads;
  writeUrl();
  document.body.dataset.ready = "1";
}

async function trace(signal) {
  const body = graphBody();
  document.body.dataset.busy = "1";
  try {
    const answer = await runJob("/attribution/jobs", body, signal, (job) => showProgress(job, "features"), "attribution graph");
    showError(null);
    await apply(answer, body);
  } catch (err) {
    if (!isAbort(err)) showError(err);
  } finally {
    if (!signal.aborted) delete document.body.dataset.busy;
  }
}

async function start() {
  sets = await loadSets(given.transcoders);
  renderCompareChoices(sets, $("transcoders").value);
  await renderSet(sets.find((s) => s.name === $("transcoders").value) ?? null);
  if (sets.length) slot.now(trace);
  else document.body.dataset.ready = "1";
}

export function init() {
  readUrl();
  initForm();
  initSide(state, onSideChange);
  initHeadParts(state, writeUrl);
  initQk(state, writeUrl);
  initIvPanel();
  initTrust();
  initProposals(state, { accept: onSideChange, check: (ids) => takeOut(ids).catch(showError), propose: () => proposeNow() });
  $("trust-run").addEventListener("click", () => checkNow());
  $("compare-run").addEventListener("click", () => compareSets(traced).catch(showError));
  addDownloads($("graph-plot"), "attribution-graph", () => res);
  $("attribution-form").addEventListener("submit", (e) => { e.preventDefault(); slot.now(trace); });
  $("text").addEventListener("input", () => choiceSlot.soon(loadChoices, 500));
  $("transcoders").addEventListener("change", () => renderSet(sets.find((s) => s.name === $("transcoders").value) ?? null));
  $("iv-run").addEventListener("click", intervene);
  stageNavigation();
  choiceSlot.now(loadChoices);
  start().catch(showError);
}
