// Stage 4, head roles: a mark on each model-view map whose head passes a role (colour and symbol
// per role, lib/roles.js ROLE_COLOURS / ROLE_SYMBOLS; filled = confirmed by ablation, hollow = not confirmed,
// dashed = untested), a legend, the API's summary sentence and a table of the role heads (score
// against the threshold, ablation costs). A mark opens its head on the input that defines the role:
// a prompt role on the prompt (the stage's own head view), duplicate-token and induction on the
// standard test input (random tokens repeated twice), fetched with POST /api/v1/forward {ids}.
// Data: GET /api/v1/heads?text=... fetched after the trace has drawn, once the grid comes near the
// viewport (the analysis holds the model for a moment: a reader typing at the top does not pay for
// it): ablate=false first (scores only, quick), then the full answer with ablation costs (cached by
// the server after the first time).
import { apiGet, apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, tokenLabels } from "../lib/format.js";
import { squareHeatmap } from "../lib/heatmaps.js";
import { OKABE } from "../lib/palette.js";
import { ROLE_COLOURS, roleMark } from "../lib/roles.js";
import { setGridDecorator } from "./panel_attention_overview.js";

const STATUS_TEXT = {
  confirmed: "confirmed: switching it off clearly raises the loss",
  "not confirmed": "not confirmed: switching it off barely changes the loss",
  untested: "not tested by ablation (yet)",
};
const slot = latest();       // the /heads requests of the prompt on show (a newer prompt aborts them)
const testSlot = latest();   // the test-input trace of the opened head
let data = null;             // the latest /heads answer
let dataText = null;         // the prompt it belongs to
let shownText = null;        // the prompt on show
let handlers = {};
let opened = null;           // { layer, head, role } shown on the test input
let reopen = null;           // the same from the URL (?test_head=L.H:role), opened once the roles arrive
let testTrace = null;

// `open`: the head a shared URL had open on the test input; `onOpen(opened or null)` when that changes.
export function initHeads({ onSelectHead, redecorate, open = null, onOpen } = {}) {
  handlers = { onSelectHead, redecorate, onOpen };
  reopen = open;
  if (open) {   // its place is kept (and the reader told) until the roles are scored
    $("role-test-fig").hidden = false;
    $("role-test-fig").dataset.state = "waiting";
    $("role-test-caption").textContent = `Layer ${open.layer}, head ${open.head} opens on the test input (${open.role}) once the head roles are scored…`;
  }
  drawLegend();
  addDownloads($("role-test-plot"), "head-on-test-input", () => testTrace?.attention);
}

const headsUrl = (text, ablate) => `/heads?${new URLSearchParams(ablate ? { text } : { text, ablate: "false" })}`;

// Resolves once `node` is within a screen and a half of the viewport; rejects (AbortError) on abort.
function whenNear(node, signal) {
  return new Promise((resolve, reject) => {
    const obs = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) { obs.disconnect(); resolve(); }
    }, { rootMargin: "150% 0px" });
    obs.observe(node);
    signal.addEventListener("abort", () => { obs.disconnect(); reject(new DOMException("replaced by a newer prompt", "AbortError")); },
      { once: true });
  });
}

// A new prompt is on show: score its heads once the page has drawn (scores first, then ablation).
export function loadHeads(text, nTokens) {
  if (shownText !== null && text !== shownText) setOpened(null);   // another prompt: its roles are not known yet
  shownText = text;
  $("roles-json").href = `/api/v1${headsUrl(text, true)}`;
  handlers.redecorate?.();     // the old prompt's marks go
  const box = $("roles-box");
  if (nTokens < 2) {
    slot.cancel();
    box.dataset.state = "idle";
    $("roles-summary").textContent = "";
    $("roles-table").replaceChildren();
    setNote($("roles-note"), "Head roles need a prompt of at least two tokens.");
    return;
  }
  setNote($("roles-note"), "");
  box.dataset.state = "waiting";
  $("roles-summary").textContent = "Every head's roles are scored when this stage comes into view…";
  slot.soon(async (signal) => {
    try {
      await whenNear(box, signal);
      box.dataset.state = "loading";
      $("roles-summary").textContent = "Scoring every head's roles…";
      show(await apiGet(headsUrl(text, false), signal), text, "scored");
      show(await apiGet(headsUrl(text, true), signal), text, "ready");
    } catch (err) {
      if (isAbort(err)) return;
      box.dataset.state = "error";
      setNote($("roles-note"), `Could not score the head roles: ${err.message}`, "error");
    }
  }, 300);
}

function show(res, text, state) {
  data = res;
  dataText = text;
  setNote($("roles-note"), "");
  $("roles-summary").replaceChildren(el("span", { text: res.summary }),
    ...(state === "ready" ? [] : [el("span", { class: "muted", text: " Ablation (switching each role head off) is still running…" })]));
  drawLegend();
  drawTable();
  handlers.redecorate?.();
  const box = $("roles-box");
  box.dataset.state = state;
  box.dataset.roles = JSON.stringify(roleHeads().map((h) => [h.layer, h.head, h.roles, h.status]));
  const again = reopen;
  if (!again) return;
  if (onTestInput(again.role) && res.heads.some((h) => h.layer === again.layer && h.head === again.head)) {
    openHead(again.layer, again.head, again.role);
  } else {
    setOpened(null);   // not a head of this model, or not a test-input role: the URL forgets it
  }
}

// The head open on the test input (null: none); the URL's pending one is settled by it either way.
function setOpened(which) {
  const had = opened || reopen;
  opened = which;
  reopen = null;
  $("role-test-fig").hidden = !which;
  if (which || had) handlers.onOpen?.(which);
}

const current = () => (data && dataText === shownText ? data : null);
const roleHeads = () => (current() ? current().heads.filter((h) => h.roles.length) : []);
const definition = (role) => (current() ? current().roles.find((r) => r.name === role) : null);
const onTestInput = (role) => { const d = definition(role); return d ? d.input !== "prompt" : role === "induction" || role === "duplicate-token"; };

function markTitle(h, role) {
  const d = definition(role);
  const score = `${role} score ${decimal(h.scores[role], 3)}${d ? ` (threshold ${decimal(d.threshold, 3)})` : ""}`;
  const ab = h.ablation ? `; switching it off costs ${decimal(h.ablation.zero_cost, 4)} nats (needed ${decimal(h.ablation.needed, 4)})` : "";
  return `L${h.layer}H${h.head} ${role}: ${score}. ${STATUS_TEXT[h.status] || h.status}${ab}. ` +
    `Click: open it on ${onTestInput(role) ? "the repeated random tokens" : "the prompt"}.`;
}

function mark(h, role) {
  return el("button", {
    type: "button", class: "role-mark", title: markTitle(h, role),
    "aria-label": `layer ${h.layer}, head ${h.head}: ${role}, ${h.status}; open it`,
    dataset: { layer: h.layer, head: h.head, role, status: h.status },
    onclick: (ev) => { ev.stopPropagation(); openHead(h.layer, h.head, role); },
  }, roleMark(role, h.status, 14));
}

// The grid's marks (panel_attention_overview calls this after each build, and when the roles change).
export function decorateGrid(marksOf) {
  const byHead = new Map(roleHeads().map((h) => [`${h.layer}.${h.head}`, h]));
  const grid = $("model-view-plot");
  for (const box of grid.querySelectorAll(".hg-marks")) box.replaceChildren();
  for (const h of byHead.values()) {
    const box = marksOf(h.layer, h.head);
    if (box) box.replaceChildren(...h.roles.map((r) => mark(h, r)));
  }
  highlightOpened();
  grid.dataset.roleMarks = String(grid.querySelectorAll(".role-mark").length);
}

function drawLegend() {
  const roles = Object.keys(ROLE_COLOURS);
  const items = roles.map((r) => {
    const d = definition(r);
    return el("span", { title: d ? `${d.definition}; threshold ${decimal(d.threshold, 3)} (random weights reach ${decimal(d.baseline_max, 3)})` : r,
      dataset: { role: r } }, roleMark(r, "confirmed", 14), el("span", { text: r }));
  });
  const status = ["confirmed", "not confirmed", "untested"].map((s) =>
    el("span", { class: "muted", title: STATUS_TEXT[s] }, roleMark(null, s, 14), el("span", { text: s })));
  $("roles-legend").replaceChildren(...items, el("span", { class: "muted", text: "·" }), ...status);
}

function drawTable() {
  const heads = roleHeads();
  const table = $("roles-table");
  if (!heads.length) {
    table.replaceChildren(el("caption", { class: "muted", text: "No head passes a role on this prompt." }));
    return;
  }
  const th = (text, title, cls) => el("th", { text, title, class: cls });
  const head = el("tr", {}, th("head"), th("role"), th("score", "the role's score on its input", "num"),
    th("threshold", "what a head needs: random weights' best score plus a margin", "num"),
    th("random best", "the best score of a head with random weights", "num"),
    th("switched off: zero", "loss increase (nats) with the head's output set to zero", "num"),
    th("mean", "loss increase with the head's output replaced by its mean", "num"),
    th("needed", "the cost that confirms a role", "num"), th("status"));
  const rows = [];
  for (const h of heads) {
    h.roles.forEach((role, i) => {
      const d = definition(role);
      const cells = [];
      if (i === 0) cells.push(el("td", { class: "mono", rowspan: h.roles.length, text: `L${h.layer}H${h.head}` }));
      cells.push(el("td", {}, el("button", { type: "button", class: "role-open", title: markTitle(h, role),
        dataset: { layer: h.layer, head: h.head, role }, onclick: () => openHead(h.layer, h.head, role) },
        el("span", { class: "role-name" }, roleMark(role, h.status, 12), el("span", { text: role })))));
      const pass = d && h.scores[role] >= d.threshold;
      cells.push(el("td", { class: `num mono ${pass ? "pass" : "fail"}`, text: decimal(h.scores[role], 3) }),
        el("td", { class: "num mono", text: d ? decimal(d.threshold, 3) : "—" }),
        el("td", { class: "num mono", text: d ? decimal(d.baseline_max, 3) : "—" }));
      if (i === 0) {
        const a = h.ablation;
        const span = { rowspan: h.roles.length };
        cells.push(el("td", { ...span, class: "num mono", text: a ? decimal(a.zero_cost, 4) : "—" }),
          el("td", { ...span, class: "num mono", text: a ? decimal(a.mean_cost, 4) : "—" }),
          el("td", { ...span, class: "num mono", text: a ? decimal(a.needed, 4) : "—" }),
          el("td", { ...span, text: h.status, title: a ? `${a.task_description}: ${decimal(a.clean_loss, 4)} nats with every head on` : STATUS_TEXT[h.status] }));
      }
      rows.push(el("tr", { dataset: { layer: h.layer, head: h.head, role } }, cells));
    });
  }
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
}

// Open a role head: a prompt role in the stage's head view, a repeated-token role on the test input.
function openHead(layer, head, role) {
  if (!onTestInput(role)) {
    setOpened(null);
    highlightOpened({ layer, head, role });
    if (handlers.onSelectHead) handlers.onSelectHead(layer, head, "prompt");
    return;
  }
  setOpened({ layer, head, role });
  highlightOpened();
  if (handlers.onSelectHead) handlers.onSelectHead(layer, head, "test");
  showOnTestInput(layer, head, role);
}

function highlightOpened(which = opened) {
  for (const b of document.querySelectorAll("#model-view-plot .role-mark")) {
    b.classList.toggle("sel", !!which && +b.dataset.layer === which.layer && +b.dataset.head === which.head && b.dataset.role === which.role);
  }
}

function showOnTestInput(layer, head, role) {
  const d = current();
  if (!d) return;
  const fig = $("role-test-fig");
  const ti = d.test_input;
  const n = ti.n;
  fig.hidden = false;
  fig.dataset.state = "loading";
  fig.dataset.head = `${layer}.${head}`;
  fig.dataset.role = role;
  const h = d.heads.find((x) => x.layer === layer && x.head === head);
  const def = definition(role);
  $("role-test-caption").textContent = `Layer ${layer}, head ${head} on the test input: ${n} random tokens, then the same ${n} again ` +
    `(seed ${ti.seed}, the first of ${ti.ids.length} rows). Dashed: where the second copy starts. On the dotted diagonals the second copy ` +
    `reads its earlier copy: the same token (duplicate-token, orange) or the token right after it (induction, vermillion). ` +
    `${role} score ${decimal(h ? h.scores[role] : null, 3)}${def ? `, threshold ${decimal(def.threshold, 3)}` : ""}.`;
  fig.scrollIntoView({ block: "center" });
  testSlot.now(async (signal) => {
    try {
      const res = await apiPost("/forward", { ids: ti.ids[0], include: ["attention"], layers: [layer], heads: [head] }, signal);
      testTrace = res;
      drawTestInput(res, layer, head, role, n);
      fig.dataset.state = "ready";
    } catch (err) {
      if (isAbort(err)) return;
      fig.dataset.state = "error";
      $("role-test-caption").textContent = `Could not run the test input: ${err.message}`;
    }
  });
}

function drawTestInput(res, layer, head, role, n) {
  const labels = tokenLabels(res.tokens);
  const T = labels.length;
  const line = (x0, y0, x1, y1, color, dash, width = 2) => ({ type: "line", xref: "x", yref: "y", x0, y0, x1, y1, line: { color, dash, width } });
  const shapes = [
    line(n - 0.5, -0.5, n - 0.5, T - 0.5, OKABE.black, "dash", 1.5),
    line(-0.5, n - 0.5, T - 0.5, n - 0.5, OKABE.black, "dash", 1.5),
    line(0, n, n - 1, 2 * n - 1, ROLE_COLOURS["duplicate-token"], "dot", role === "duplicate-token" ? 3 : 1.5),
    line(1, n, n, 2 * n - 1, ROLE_COLOURS.induction, "dot", role === "induction" ? 3 : 1.5),
  ];
  return squareHeatmap($("role-test-plot"), res.attention.pattern[0][0], labels, {
    fit: true, causalMask: res.causal !== false, window: res.window || 0, traceName: "attention", shapes,
    title: `Layer ${layer}, head ${head} on repeated random tokens (${role})`,
    xTitle: "key: the token being read", yTitle: "query: the token reading", colorTitle: "weight", hoverName: "weight",
    name: "head-on-test-input",
  });
}

// Stage 4's head roles, for main.js's table: its own GET /api/v1/heads, after each new prompt's trace.
// A prompt role's head opens in the stage's own head view; a test-input role's head in this panel's view.
export const panel = {
  stage: "attention",
  parts: [],
  init: (page) => initHeads({
    onSelectHead: (l, h, where) => { page.selectHead(l, h); if (where === "prompt") $("attention-plot").scrollIntoView({ block: "center" }); },
    redecorate: () => setGridDecorator(decorateGrid), open: page.state.testHead,
    onOpen: (o) => { page.state.testHead = o && { layer: o.layer, head: o.head, role: o.role }; page.writeUrl(); },
  }),
  render: (trace, view) => { if (view.promptChanged) loadHeads(view.text, trace.tokens.length); },
};
