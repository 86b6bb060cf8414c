// Beside the graph: the hovered node (a feature with the tokens it fires on most and the tokens it
// promotes, from GET /api/v1/transcoders/NAME/features/L/F), the pinned nodes (a feature with its
// full detail: its top held-out passages shaded per token, the tokens it promotes and suppresses),
// and the supernodes: pinned nodes ticked and grouped under a name (or proposals accepted:
// supernodes.js), each with its ungroup button and a rename to the name typed.
// `state.pins` (ids), `state.groups` ([{name, members}]) and `state.ticked` are the page's; a change
// calls onChange(). Every number shown is one of the API's answers.
import { apiGet } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { decimal, grouped, pct, visible } from "../lib/format.js";
import { passageLines } from "../lib/passages.js";
import { nodeKey } from "./nodes.js";

const details = new Map();   // "set/layer/feature" -> the feature's detail (a promise)
let st = null;
let changed = () => {};
let shown = null;            // the answer beside which the list is drawn

// A feature node's detail (once per feature and set).
export function featureDetail(set, n) {
  const key = `${set}/${n.layer}/${n.feature}`;
  if (!details.has(key)) {
    const p = apiGet(`/transcoders/${encodeURIComponent(set)}/features/${n.layer}/${n.feature}`);
    p.catch(() => details.delete(key));   // a failed fetch may be tried again
    details.set(key, p);
  }
  return details.get(key);
}

const quoted = (list) => list.map((t) => `“${visible(t)}”`).join(" ");
const effects = (list) => list.map((u) => `“${visible(u.text)}” ${decimal(u.effect, 3)}`).join(" · ");

function where(n, res) {
  const tok = `“${visible(res.tokens[n.position].text)}”`;
  const parts = [n.layer === null ? `position ${n.position} ${tok}` : `block ${n.layer} · position ${n.position} ${tok}`];
  if (n.activation !== null) parts.push(`activation ${decimal(n.activation, 3)}`);
  parts.push(`influence ${pct(n.influence, 2)}`);
  return parts.join(" · ");
}

// The hovered node `id` of the graph's `view` in the hover card.
export function showHovered(id, res, view) {
  const card = $("hover-card");
  const v = view.byId.get(id);
  if (!v) return;
  card.classList.remove("muted");
  card.dataset.id = id;
  if (v.kind === "supernode") {
    card.replaceChildren(el("b", { text: `${v.name}: a supernode of ${v.members.length}` }),
      ...v.members.map((m) => el("div", { class: "mono", text: `${m.label} · influence ${pct(m.influence, 2)}` })));
    return;
  }
  const n = v.node;
  const summary = el("div", { class: "hover-summary" });
  card.replaceChildren(el("b", { class: "mono", text: n.label }), el("div", { text: where(n, res) }), summary);
  if (n.kind !== "feature") return;
  summary.textContent = "loading its summary…";
  featureDetail(res.transcoders, n).then((d) => {
    if (card.dataset.id !== id) return;
    summary.replaceChildren(el("div", { text: `fires most on ${quoted(d.top_tokens)}` }),
      el("div", { text: `promotes ${quoted(d.promotes)}` }));
  }, (err) => { if (card.dataset.id === id) summary.textContent = err.message; });
}

function featurePart(res, n) {
  const box = el("div", { class: "pin-detail muted", text: "loading its top passages…" });
  featureDetail(res.transcoders, n).then((d) => {
    box.classList.remove("muted");
    box.replaceChildren(
      el("p", { text: `fires on ${pct(d.density, 2)} of ${grouped(d.tokens_measured)} held-out tokens (largest ${decimal(d.max_act, 3)})` }),
      el("p", { class: "mono", text: `promotes ${effects(d.promoted.slice(0, 5))}` }),
      el("p", { class: "mono", text: `suppresses ${effects(d.suppressed.slice(0, 5))}` }),
      el("div", { class: "feat-passages" }, ...passageLines(d.passages, d.max_act)));
    if (!d.passages.length) box.append(el("p", { text: "It never fired on the held-out tokens." }));
  }, (err) => { box.textContent = err.message; });
  return box;
}

function pinItem(res, n, groupName) {
  const id = nodeKey(n);
  return el("li", { class: "pin", "data-id": id },
    el("div", { class: "pin-head" },
      el("label", {}, el("input", { type: "checkbox", class: "pin-tick", "aria-label": `tick ${n.label}`, checked: st.ticked.has(id) }),
        el("b", { class: "mono", text: n.label })),
      el("button", { type: "button", class: "secondary unpin", text: "unpin", title: "unpin this node" })),
    el("div", { class: "muted", text: where(n, res) + (groupName ? ` · in the supernode “${groupName}”` : "") }),
    n.kind === "feature" ? featurePart(res, n) : null);
}

// The pinned nodes and the supernodes of `res` as the state has them.
export function renderSide(res) {
  shown = res;
  const byId = new Map(res.nodes.map((n) => [nodeKey(n), n]));
  const groupOf = new Map(st.groups.flatMap((g) => g.members.map((m) => [m, g.name])));
  $("pinned").replaceChildren(...st.pins.filter((id) => byId.has(id)).map((id) => pinItem(res, byId.get(id), groupOf.get(id))));
  $("supernodes").replaceChildren(...st.groups.map((g) => el("li", { "data-name": g.name },
    el("button", { type: "button", class: "secondary ungroup", text: "ungroup" }),
    el("button", { type: "button", class: "secondary rename", text: "rename", title: "rename it to the name typed above" }),
    el("b", { text: g.name }),
    el("span", { class: "muted", text: ` · ${g.members.length} nodes: ${g.members.map((m) => byId.get(m)?.label ?? m).join(", ")}` }))));
  $("pin-count").textContent = st.pins.length ? `${st.pins.length} pinned · tick two or more to group them` : "click a node to pin it";
  $("group").disabled = st.ticked.size < 2;
}

// Rename the supernode `name` to the name typed in the group form (one no other supernode has);
// false where no new name is typed.
function rename(name) {
  let to = $("group-name").value.trim();
  if (!to || to === name) { $("group-name").focus(); return false; }
  while (st.groups.some((g) => g.name === to)) to += "′";
  st.groups = st.groups.map((g) => (g.name === name ? { ...g, name: to } : g));
  $("group-name").value = "";
  return true;
}

// Group the ticked nodes under the name typed (a node leaves any group it was in).
function group() {
  const members = st.pins.filter((id) => st.ticked.has(id));
  if (members.length < 2) return;
  let name = $("group-name").value.trim() || `supernode ${st.groups.length + 1}`;
  while (st.groups.some((g) => g.name === name)) name += "′";
  for (const g of st.groups) g.members = g.members.filter((m) => !members.includes(m));
  st.groups = [...st.groups.filter((g) => g.members.length), { name, members }];
  st.ticked.clear();
  $("group-name").value = "";
  changed();
}

export function initSide(state, onChange) {
  st = state;
  changed = onChange;
  $("group").addEventListener("click", group);
  $("pinned").addEventListener("change", (e) => {
    const li = e.target.closest("li.pin");
    if (!li || !e.target.classList.contains("pin-tick")) return;
    if (e.target.checked) st.ticked.add(li.dataset.id); else st.ticked.delete(li.dataset.id);
    $("group").disabled = st.ticked.size < 2;
  });
  $("pinned").addEventListener("click", (e) => {
    const li = e.target.closest("li.pin");
    if (li && e.target.classList.contains("unpin")) { togglePin(li.dataset.id); }
  });
  $("supernodes").addEventListener("click", (e) => {
    const li = e.target.closest("li[data-name]");
    if (!li) return;
    if (e.target.classList.contains("ungroup")) st.groups = st.groups.filter((g) => g.name !== li.dataset.name);
    else if (!e.target.classList.contains("rename") || !rename(li.dataset.name)) return;
    changed();
  });
}

// Pin a node, or unpin it if pinned (a supernode is not pinned: its hover lists its members).
export function togglePin(id) {
  if (id.startsWith("s:") || !shown) return;
  if (st.pins.includes(id)) { st.pins = st.pins.filter((p) => p !== id); st.ticked.delete(id); } else st.pins = [...st.pins, id];
  changed();
}
