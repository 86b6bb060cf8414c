// Why a head attended (issue #64): a head's cell in the heads table (heads.js) opens it on the
// node's position as the query and, as the key, the source position of the listed edge with the
// largest part through that head; both can be picked among the prompt's positions. POST
// /api/v1/attribution/qk splits the head's pre-softmax score there into one term per (source at the
// query, source at the key): tokens, active features, error nodes and the biases. Shown: the score
// against its terms' sum, the attention weight, the largest sources at each end, the largest pairs and
// the terms summed by kind. `state.head` ("L.H"), `state.query` and `state.key` are the page's, in the
// URL. Every number shown is one of the answer's.
import { apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, int, pct, visible } from "../lib/format.js";
import { divColour, inkOn } from "../lib/palette.js";
import { nodeKey } from "./nodes.js";

const KINDS = ["token", "feature", "error", "constant"];
let st = null;
let changed = () => {};
let ctx = null;   // { res, text }: the graph the panel asks about
const slot = latest();

export const signed = (v) => `${v >= 0 ? "+" : ""}${decimal(v, 3)}`;
const tokenAt = (res, p) => `${p} “${visible(res.tokens[p].text)}”`;

// A source of an answer in words: what it is and where it wrote.
export function sourceName(s, res) {
  if (s.kind === "constant") return s.label;
  return `${s.kind === "token" ? "token" : s.label} @${tokenAt(res, s.position)}`;
}

// The key a head opens on: the source position of the split edge (heads.js's answer `ans`) whose part
// through head `head` of block `layer` is largest, at or before the query (none: the query itself).
function defaultKey(ans, layer, head, query) {
  let best = null;
  for (const e of ans.edges) {
    const b = e.blocks.find((x) => x.layer === layer);
    if (!b || e.source.position > query) continue;
    if (!best || Math.abs(b.heads[head]) > Math.abs(best.part)) best = { part: b.heads[head], key: e.source.position };
  }
  return best ? best.key : query;
}

// The query a head opens on: the position of the node the heads answer `entry` ({ id, res, text, ans })
// splits.
function nodeQuery(entry) {
  const n = entry.res.nodes.find((m) => nodeKey(m) === entry.id);
  return n.kind === "logit" ? entry.res.tokens.length - 1 : n.position;
}

// Open head `layer`.`head` from the heads answer `entry`: the query at the node's position, the key as
// defaultKey says.
export function openHead(entry, layer, head) {
  const query = nodeQuery(entry);
  Object.assign(st, { head: `${layer}.${head}`, query, key: defaultKey(entry.ans, layer, head, query) });
  changed();
  const done = loadQk(entry.res, entry.text);
  $("qk-box").scrollIntoView({ block: "nearest" });
  return done;
}

// Open the state's head (the URL's) once the heads answer `entry` is in: a query or key the URL does
// not give is the one a click on the head's cell chooses.
export function resumeHead(entry) {
  if (st.query === null || st.key === null) {
    const [layer, head] = st.head.split(".").map(Number);
    const query = Math.min(st.query ?? nodeQuery(entry), entry.res.tokens.length - 1);
    Object.assign(st, { query, key: st.key ?? defaultKey(entry.ans, layer, head, query) });
    changed();
  }
  return loadQk(entry.res, entry.text);
}

function fillPositions(res, query, key) {
  const opts = (n, chosen) => Array.from({ length: n }, (_, p) => {
    const o = new Option(tokenAt(res, p), String(p));
    o.selected = p === chosen;
    return o;
  });
  $("qk-query").replaceChildren(...opts(res.tokens.length, query));
  $("qk-key").replaceChildren(...opts(query + 1, key));
}

// Ask about the state's head, query and key in the graph `res` traced from `text`.
export function loadQk(res, text) {
  ctx = { res, text };
  const [layer, head] = st.head.split(".").map(Number);
  const last = res.tokens.length - 1;
  const query = Math.min(st.query ?? last, last);
  const key = Math.min(st.key ?? query, query);
  const box = $("qk-box");
  box.hidden = false;
  delete box.dataset.loaded;
  $("qk-name").textContent = `${layer}.${head}`;
  markHead(st.head);
  fillPositions(res, query, key);
  $("qk-stats").textContent = "splitting its score…";
  setNote($("qk-note"), "");
  return slot.now(async (signal) => {
    try {
      const a = await apiPost("/attribution/qk", { text, transcoders: res.transcoders, layer, head, query, key }, signal);
      renderQk(a, res);
      box.dataset.loaded = `${layer}.${head}:${query}:${key}`;
    } catch (err) {
      if (!isAbort(err)) { $("qk-stats").textContent = ""; setNote($("qk-note"), err.message, "error"); }
    }
  });
}

// The heads table's cell of the head asked about (none: null) outlined.
function markHead(name) {
  for (const b of document.querySelectorAll("#heads-carried .head-cell")) b.classList.toggle("chosen", b.dataset.head === name);
}

export function closeQk() {
  slot.cancel();
  markHead(null);
  Object.assign(st, { head: null, query: null, key: null });
  $("qk-box").hidden = true;
  delete $("qk-box").dataset.loaded;
}

const bar = (v, top) => el("span", { class: `qk-bar ${v >= 0 ? "pos" : "neg"}`, style: `width:${(100 * Math.abs(v)) / top}%` });

function sourceTable(list, res) {
  const top = Math.max(1e-12, ...list.map((s) => Math.abs(s.value)));
  const head = el("tr", {}, el("th", { text: "source" }), el("th", { class: "num", text: "its terms" }), el("th", {}));
  return [el("thead", {}, head), el("tbody", {}, ...list.map((s) => el("tr", {},
    el("td", { class: "mono src", text: sourceName(s.source, res) }), el("td", { class: "num", text: signed(s.value) }),
    el("td", { class: "bar-cell" }, bar(s.value, top)))))];
}

function pairsTable(pairs, res) {
  const top = Math.max(1e-12, ...pairs.map((p) => Math.abs(p.value)));
  const head = el("tr", {}, ...["at the query", "at the key", "term", ""].map((t, i) => el("th", { class: i === 2 ? "num" : null, text: t })));
  return [el("thead", {}, head), el("tbody", {}, ...pairs.map((p) => el("tr", {},
    el("td", { class: "mono src", text: sourceName(p.query, res) }), el("td", { class: "mono src", text: sourceName(p.key, res) }),
    el("td", { class: "num", text: signed(p.value) }), el("td", { class: "bar-cell" }, bar(p.value, top)))))];
}

// The terms added up by kind: the query's source kinds down, the key's across.
function kindsTable(kinds) {
  const at = new Map(kinds.map((k) => [`${k.query_kind}|${k.key_kind}`, k.value]));
  const rows = KINDS.filter((q) => kinds.some((k) => k.query_kind === q));
  const cols = KINDS.filter((c) => kinds.some((k) => k.key_kind === c));
  const lim = Math.max(1e-12, ...kinds.map((k) => Math.abs(k.value)));
  const cell = (v) => {
    if (v === undefined) return el("td", { class: "num muted", text: "—" });
    const bg = divColour(v, lim);
    return el("td", { class: "num", style: `background:${bg};color:${inkOn(bg)}`, text: signed(v) });
  };
  return [el("thead", {}, el("tr", {}, el("th", { text: "query ↓ · key →" }), ...cols.map((c) => el("th", { class: "num", text: c })))),
    el("tbody", {}, ...rows.map((q) => el("tr", {}, el("th", { text: q }), ...cols.map((c) => cell(at.get(`${q}|${c}`))))))];
}

function renderQk(a, res) {
  $("qk-stats").textContent = `from ${tokenAt(res, a.query)} to ${tokenAt(res, a.key)}: score ${decimal(a.score, 4)} ` +
    `(before the softmax, in the real model) · its terms, one per pair of the ${int(a.n_sources)} sources at each end, ` +
    `add up to ${decimal(a.terms_sum, 4)} · attention weight ${decimal(a.attention, 4)} (${pct(a.attention)}) · ` +
    `scale ${decimal(a.scale, 4)} · ${decimal(a.seconds, 2)} s`;
  $("qk-query-sources").replaceChildren(...sourceTable(a.query_sources, res));
  $("qk-key-sources").replaceChildren(...sourceTable(a.key_sources, res));
  $("qk-pairs").replaceChildren(...pairsTable(a.pairs, res));
  $("qk-kinds").replaceChildren(...kindsTable(a.kinds));
}

export function initQk(state, onChange) {
  st = state;
  changed = onChange;
  $("qk-close").addEventListener("click", () => { closeQk(); changed(); });
  $("qk-query").addEventListener("change", () => {
    st.query = +$("qk-query").value;
    st.key = Math.min(st.key ?? st.query, st.query);
    changed();
    loadQk(ctx.res, ctx.text);
  });
  $("qk-key").addEventListener("change", () => {
    st.key = +$("qk-key").value;
    changed();
    loadQk(ctx.res, ctx.text);
  });
}
