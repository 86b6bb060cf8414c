// Which heads carried a node's inputs (issue #64). For the node selected in the graph (the logit, or a
// feature whose inputs were computed), POST /api/v1/attribution/heads splits each of its largest
// incoming edges, for every block on the path, into a bypass (that block's heads all taken out) plus
// one part per head, adding up to the edge's weight; and it sums |part| over every incoming edge per
// block and head. Beside the graph: those sums as a table (blocks × heads, the bypass last), each
// listed edge with the heads that carry most of it (in the block where the heads carry most; every
// block on demand), a head's cell opening why it attended (qk.js), and a hovered edge of the graph
// naming its heads. `state.sel` (the node's id) is the page's, in the URL. Every number shown is one
// of the answer's.
import { apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal } from "../lib/format.js";
import { inkOn, seqColour } from "../lib/palette.js";
import { pointAtEdge } from "./graph.js";
import { nodeKey } from "./nodes.js";
import { closeQk, openHead, resumeHead, signed, sourceName } from "./qk.js";

let st = null;
let changed = () => {};
let shownFor = null;   // { id, res, text, ans }: the answer shown, for node `id` of the graph `res`
const slot = latest();

// A node of the graph whose incoming edges the API computed: the logit, or a feature with a value.
const hasInputs = (n) => !!n && (n.kind === "logit" || n.kind === "feature") && n.value !== null;

// The request: the graph's prompt and target, and the node (a feature's block, position and index).
function headsBody(res, text, n) {
  const b = { text, transcoders: res.transcoders, token: res.target.id };
  if (res.wrong) b.wrong = res.wrong.id;
  if (n.kind === "feature") Object.assign(b, { layer: n.layer, position: n.position, feature: n.feature });
  return b;
}

// An edge's blocks, the one whose heads carry most of it first (by the sum of their |parts|: an order
// of the answer's numbers, no number shown).
function byCarried(e) {
  const carried = (b) => b.heads.reduce((s, v) => s + Math.abs(v), 0);
  return [...e.blocks].sort((a, b) => carried(b) - carried(a));
}

// "5.2 +0.778, 5.3 +0.151, bypass +0.062": a block's `n` largest head parts and its bypass (a block
// none of whose heads carries any of it: the edge is all bypass, at one position or past every head).
function headsLine(b, n = 2) {
  if (b.heads.every((v) => v === 0)) return `no head carries it: all bypass (${signed(b.bypass)})`;
  const top = b.heads.map((v, h) => [h, v]).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1])).slice(0, n);
  return [...top.map(([h, v]) => `${b.layer}.${h} ${signed(v)}`), `bypass ${signed(b.bypass)}`].join(", ");
}

function carriedTable(ans) {
  const top = Math.max(1e-12, ...ans.carried.flat());
  const heads = Array.from({ length: ans.n_head }, (_, h) => h);
  const head = el("tr", {}, el("th", { text: "block" }), ...heads.map((h) => el("th", { class: "num", text: `h${h}` })),
    el("th", { class: "num", text: "bypass" }));
  const rows = ans.layers.map((l, i) => el("tr", {}, el("th", { text: String(l) }),
    ...ans.carried[i].map((v, h) => {
      const bg = seqColour(v, 0, top);
      return el("td", { class: "num" }, el("button", { type: "button", class: "head-cell", "data-head": `${l}.${h}`,
        style: `background:${bg};color:${inkOn(bg)}`, text: decimal(v, 3),
        title: `head ${l}.${h}: the sum of |part| over every incoming edge ${decimal(v, 3)} · click: why it attended` }));
    }),
    el("td", { class: "num muted", text: decimal(ans.bypass_carried[i], 3), title: `block ${l}'s bypass` })));
  return [el("thead", {}, head), el("tbody", {}, ...rows)];
}

// Every block's bypass and head parts of one edge (each row adds up to its weight).
function blockTable(ans, e) {
  const head = el("tr", {}, el("th", { text: "block" }), el("th", { class: "num", text: "bypass" }),
    ...Array.from({ length: ans.n_head }, (_, h) => el("th", { class: "num", text: `h${h}` })));
  return el("table", { class: "lens-table parts-table" }, el("thead", {}, head), el("tbody", {}, ...e.blocks.map((b) =>
    el("tr", {}, el("th", { text: String(b.layer) }), el("td", { class: "num", text: signed(b.bypass) }),
      ...b.heads.map((v) => el("td", { class: "num", text: signed(v) }))))));
}

function edgeItem(ans, e, res) {
  const [b] = byCarried(e);
  return el("li", { class: "heads-edge", tabindex: "0", "data-source": nodeKey(e.source) },
    el("div", { class: "edge-head" }, el("span", { class: "mono", text: sourceName(e.source, res) }),
      el("b", { class: "num weight", text: signed(e.weight) })),
    el("div", { class: "mono edge-heads", text: b.heads.some((v) => v !== 0) ? `block ${b.layer}: ${headsLine(b)}` : headsLine(b) }),
    el("details", {}, el("summary", { text: "every block" }), blockTable(ans, e)));
}

function render(entry) {
  const { ans, res } = entry;
  $("heads-target").textContent = `${ans.target} = ${decimal(ans.value, 3)} · its ${ans.edges.length} largest incoming ` +
    `edges split; the parts add up to each weight within ${decimal(ans.max_error)} · ${decimal(ans.seconds, 2)} s`;
  $("heads-carried").replaceChildren(...carriedTable(ans));
  $("heads-edges").replaceChildren(...ans.edges.map((e) => edgeItem(ans, e, res)));
  $("heads-box").dataset.loaded = entry.id;
}

// Show the selected node's heads (`state.sel` in the graph `res` traced from `text`; none: hide the
// section); a head in the state (the URL's) opens its panel once the answer is in.
export function loadHeadParts(res, text) {
  const n = res.nodes.find((m) => nodeKey(m) === st.sel);
  const box = $("heads-box");
  delete box.dataset.loaded;
  shownFor = null;
  if (!hasInputs(n)) { closeHeadParts(); return Promise.resolve(); }
  box.hidden = false;
  $("heads-carried").replaceChildren();
  $("heads-edges").replaceChildren();
  $("heads-target").textContent = `${n.label}: splitting its edges by head…`;
  setNote($("heads-note"), "");
  const id = st.sel;
  return slot.now(async (signal) => {
    try {
      const ans = await apiPost("/attribution/heads", headsBody(res, text, n), signal);
      shownFor = { id, res, text, ans };
      render(shownFor);
      if (st.head) await resumeHead(shownFor);
    } catch (err) {
      if (!isAbort(err)) { $("heads-target").textContent = n.label; setNote($("heads-note"), err.message, "error"); }
    }
  });
}

export function closeHeadParts() {
  slot.cancel();
  shownFor = null;
  st.sel = null;
  $("heads-box").hidden = true;
  closeQk();
}

// A click on node `id` of the graph `res`: one with inputs becomes the selected node.
export function selectNode(id, res, text) {
  const n = res.nodes.find((m) => nodeKey(m) === id);
  if (!hasInputs(n) || (st.sel === id && shownFor?.id === id)) return;
  st.sel = id;
  closeQk();
  changed();
  loadHeadParts(res, text);
}

// The hovered edge source → target of the graph in the hover card, with the heads that carried it
// when its target's split is shown (and its row of the list lit).
export function showEdgeHeads(source, target, res) {
  const card = $("hover-card");
  const split = shownFor && shownFor.id === target ? shownFor : null;
  const e = split?.ans.edges.find((x) => nodeKey(x.source) === source);
  for (const li of $("heads-edges").querySelectorAll("li.lit")) li.classList.remove("lit");
  card.classList.remove("muted");
  card.dataset.id = `${source}>${target}`;
  const name = (id) => res.nodes.find((m) => nodeKey(m) === id)?.label ?? id;
  if (!e) {
    card.replaceChildren(el("b", { class: "mono", text: `${name(source)} → ${name(target)}` }),
      el("div", { class: "muted", text: split ? `not among the ${split.ans.edges.length} largest edges split by head`
        : "click its target node to see which heads carried it" }));
    return;
  }
  $("heads-edges").querySelector(`li[data-source='${source}']`)?.classList.add("lit");
  const parts = byCarried(e).filter((b, i) => i === 0 || b.heads.some((v) => v !== 0)).slice(0, 2);
  card.replaceChildren(el("b", { class: "mono", text: `${sourceName(e.source, split.res)} → ${split.ans.target}` }),
    el("div", { text: `weight ${signed(e.weight)}; carried by` }),
    ...parts.map((b) => el("div", { class: "mono hover-summary", text: `block ${b.layer}: ${headsLine(b)}` })));
}

export function initHeadParts(state, onChange) {
  st = state;
  changed = onChange;
  $("heads-close").addEventListener("click", () => { closeHeadParts(); changed(); });
  $("heads-carried").addEventListener("click", (ev) => {
    const cell = ev.target.closest("button.head-cell");
    if (!cell || !shownFor) return;
    const [layer, head] = cell.dataset.head.split(".").map(Number);
    openHead(shownFor, layer, head);
  });
  const point = (ev) => {
    const li = ev.target.closest?.("li.heads-edge");
    if (!li || !shownFor || $("hover-card").dataset.id === `${li.dataset.source}>${shownFor.id}`) return;
    pointAtEdge(li.dataset.source, shownFor.id);   // (a hover made so emits no event of its own)
    showEdgeHeads(li.dataset.source, shownFor.id, shownFor.res);
  };
  $("heads-edges").addEventListener("mouseover", point);
  $("heads-edges").addEventListener("focusin", point);
}
