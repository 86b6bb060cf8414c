// Supernodes proposed by a measured signal (POST /api/v1/attribution/supernodes, the graph's own
// request plus the signal): the signals' scores, and each proposed group with its members (their own
// effects when taken out of the real model alone, their influence) and the group's effect when taken
// out together. A proposal is accepted as one of the page's supernodes under its name (typed over it
// to rename it), or only its ticked members are (a split: the rest can be accepted under another
// name); "take them out" pins its ticked members and runs them at scale 0 in the intervention panel.
// Every number shown is the answer's.
import { apiPost } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, int, pct, visible } from "../lib/format.js";
import { nodeKey } from "./nodes.js";

let st = null;
let hooks = { accept: () => {}, check: () => {}, propose: () => {} };
let answer = null;   // the proposals shown
let graph = null;    // the graph they are for

const SIGNAL_WHAT = {
  decoder: "the features write the same direction (cosine of their decoder rows)",
  coactivation: "they fire on the same held-out tokens (Jaccard overlap)",
  targets: "they feed the same nodes of the graph (cosine of their outgoing edges)",
};

// A proposed member's node id (nodes.js's nodeKey of the feature).
export const sourceKey = (s) => nodeKey({ kind: "feature", ...s });

// `accept()`: supernodes were added to state.groups; `check(ids)`: take those features out in panel 2;
// `propose()`: the button was pressed (the page knows the graph's request).
export function initProposals(state, { accept, check, propose: ask }) {
  st = state;
  hooks = { accept, check, propose: ask };
  $("propose").addEventListener("click", () => hooks.propose());
  $("propose-accept-all").addEventListener("click", acceptAll);
  $("propose-groups").addEventListener("click", (e) => {
    const li = e.target.closest("li.proposal");
    if (!li) return;
    if (e.target.classList.contains("accept")) { if (acceptOne(li) !== null) hooks.accept(); }
    else if (e.target.classList.contains("take-out")) hooks.check(ticked(li));
  });
}

// Proposals for an older graph are dropped.
export function clearProposals() {
  answer = null;
  graph = null;
  $("propose-box").hidden = true;
  $("propose-groups").replaceChildren();
  setNote($("propose-note"), "");
  delete $("propose-box").dataset.loaded;
}

export async function propose(res, body, signal) {
  $("propose").disabled = true;
  setNote($("propose-note"), "grouping the graph's most influential features and taking each group out of the real model…");
  $("propose-box").hidden = false;
  try {
    answer = await apiPost("/attribution/supernodes", { ...body, signal });
    graph = res;
    setNote($("propose-note"), "");
    renderProposals();
    $("propose-box").dataset.loaded = signal;
  } catch (err) {
    setNote($("propose-note"), err.message, "error");
    throw err;
  } finally {
    $("propose").disabled = false;
  }
}

function signalsTable(a) {
  const head = el("tr", {}, ...["signal", "what it measures", "link at", "groups", "score", "agreement", "coverage", ""]
    .map((t) => el("th", { text: t })));
  const rows = a.signals.map((s) => {
    const chosen = s.signal === a.signal;
    const cells = s.available
      ? [int(s.groups), pct(s.score), pct(s.agreement), pct(s.coverage)].map((t) => el("td", { class: "num", text: t }))
      : [el("td", { colspan: "4", class: "muted", text: `unavailable: ${s.reason}` })];
    return el("tr", { "data-signal": s.signal, class: chosen ? "chosen" : null },
      el("td", { class: "mono", text: s.signal }), el("td", { class: "muted", text: SIGNAL_WHAT[s.signal] ?? "" }),
      el("td", { class: "num", text: decimal(s.threshold, 2) }), ...cells,
      el("td", { text: chosen ? "✓ proposed" : "" }));
  });
  $("propose-signals").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

function memberRow(m) {
  const id = sourceKey(m.source);
  const tok = graph.tokens[m.source.position];
  return el("tr", { "data-id": id },
    el("td", {}, el("input", { type: "checkbox", class: "member-tick", checked: true, "aria-label": `keep ${m.source.label} at ${m.source.position}` })),
    el("td", { class: "mono", text: m.source.label }),
    el("td", { class: "mono", text: `${m.source.position} “${tok ? visible(tok.text) : ""}”` }),
    el("td", { class: "num", text: decimal(m.effect, 3) }), el("td", { class: "num", text: pct(m.influence, 2) }));
}

function proposalItem(g, i) {
  const head = el("tr", {}, ...["", "feature", "position", "its own effect", "influence"].map((t) => el("th", { text: t })));
  return el("li", { class: "proposal", "data-index": String(i), "data-name": g.name },
    el("div", { class: "proposal-head" },
      el("input", { type: "text", class: "proposal-name", value: g.name, maxlength: "40", spellcheck: "false", "aria-label": `name of the proposed supernode ${g.name}` }),
      el("button", { type: "button", class: "accept", text: "Accept the ticked", title: "make the ticked members one supernode under this name" }),
      el("button", { type: "button", class: "secondary take-out", text: "take them out (panel 2)",
        title: "pin the ticked members only and run them at scale 0 on the real model in the intervention panel" })),
    el("p", { class: "proposal-effect" },
      el("span", { text: `${g.members.length} features · taken out together the target changes by ` }),
      el("b", { class: "group-effect", text: decimal(g.effect, 3) }),
      el("span", { text: "; their own effects added up: " }),
      el("b", { class: "members-effect", text: decimal(g.members_effect, 3) })),
    el("table", { class: "lens-table proposal-members" }, el("thead", {}, head), el("tbody", {}, ...g.members.map(memberRow))),
    el("p", { class: "muted accepted-as", hidden: true }));
}

function renderProposals() {
  const a = answer;
  $("propose-stats").textContent = `${a.signal} proposes ${int(a.groups.length)} groups among the graph's ${int(a.candidates)} ` +
    `most influential features · target ${a.target} = ${decimal(a.target_value, 3)} in the real model · computed in ${decimal(a.seconds, 2)} s`;
  signalsTable(a);
  $("propose-groups").replaceChildren(...a.groups.map(proposalItem));
  // a proposal accepted before (a reload: its supernode came back from the URL) is marked so
  const grouped = new Map(st.groups.flatMap((g) => g.members.map((m) => [m, g.name])));
  for (const li of $("propose-groups").querySelectorAll("li.proposal")) {
    const names = new Set([...li.querySelectorAll("tr[data-id]")].map((tr) => grouped.get(tr.dataset.id)));
    if (names.size !== 1 || names.has(undefined)) continue;
    li.classList.add("accepted");
    Object.assign(li.querySelector(".accepted-as"), { hidden: false, textContent: `accepted as the supernode “${[...names][0]}”` });
  }
  $("propose-accept-all").disabled = !a.groups.length;
  if (!a.groups.length) setNote($("propose-note"), "No two of the candidates are alike enough under this signal: try another, or group by hand.");
}

const ticked = (li) => [...li.querySelectorAll("tr[data-id]")].filter((tr) => tr.querySelector(".member-tick").checked).map((tr) => tr.dataset.id);

// Accept proposal `li`'s ticked members (two or more, those in the graph) under its name.
function acceptOne(li) {
  const ids = new Set(graph.nodes.map(nodeKey));
  const members = ticked(li).filter((id) => ids.has(id));
  const box = li.querySelector(".accepted-as");
  if (members.length < 2) {
    box.hidden = false;
    box.textContent = "Tick two or more members to make a supernode.";
    return null;
  }
  let name = li.querySelector(".proposal-name").value.trim() || li.dataset.name;
  while (st.groups.some((g) => g.name === name)) name += "′";
  for (const g of st.groups) g.members = g.members.filter((m) => !members.includes(m));
  st.groups = [...st.groups.filter((g) => g.members.length), { name, members }];
  box.hidden = false;
  box.textContent = `accepted as the supernode “${name}” (${members.length} members)`;
  li.classList.add("accepted");
  return name;
}

function acceptAll() {
  const done = [...$("propose-groups").querySelectorAll("li.proposal:not(.accepted)")].map(acceptOne);
  if (done.some((n) => n !== null)) hooks.accept();
}
