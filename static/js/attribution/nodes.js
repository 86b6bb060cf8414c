// The attribution graph's nodes as the page names and places them, and its edges as drawn once
// supernodes merge some nodes. A node's id names it across answers and in the URL: "logit", "t5"
// (the token at position 5), "f3.31.402" (feature 402 of block 3 at position 31), "e3.31" (block 3's
// error node at position 31); a supernode is "s:NAME". The places are drawing only: x is the
// column (the tokens 0, block l at l + 1, the logit last), y the position, and the nodes that share a
// cell are spread across it. Summing a supernode's member edges is drawing too: every weight summed
// is one of POST /api/v1/attribution's edges.

const ROW = 8;          // nodes side by side in a cell, at most
const SPREAD = 0.78;    // the width a cell's nodes spread over (a column is 1)
const ROW_GAP = 0.3;    // between the rows of a crowded cell (a position is 1)

export function nodeKey(n) {
  if (n.kind === "logit") return "logit";
  if (n.kind === "token") return `t${n.position}`;
  if (n.kind === "error") return `e${n.layer}.${n.position}`;
  return `f${n.layer}.${n.position}.${n.feature}`;
}

// A node's column: the tokens first, block l's MLP at l + 1, the logit after the last block.
const column = (n, blocks) => (n.kind === "token" ? 0 : n.kind === "logit" ? blocks + 1 : n.layer + 1);

// Each node's place {x, y} by id: a cell's error node first, then its features by influence.
export function places(res, blocks) {
  const cells = new Map();
  for (const n of res.nodes) {
    const key = `${column(n, blocks)}:${n.position}`;
    if (!cells.has(key)) cells.set(key, []);
    cells.get(key).push(n);
  }
  const at = new Map();
  for (const list of cells.values()) {
    list.sort((a, b) => (b.kind === "error") - (a.kind === "error") || b.influence - a.influence);
    const rows = Math.ceil(list.length / ROW);
    list.forEach((n, i) => {
      const r = Math.floor(i / ROW);
      const inRow = Math.min(ROW, list.length - r * ROW);
      const dx = inRow > 1 ? SPREAD / (ROW - 1) : 0;
      at.set(nodeKey(n), { x: column(n, blocks) + (i % ROW - (inRow - 1) / 2) * dx, y: n.position + (r - (rows - 1) / 2) * ROW_GAP });
    });
  }
  return at;
}

// The nodes and edges to draw with `groups` ([{name, members: [id]}]) merged: every node not in a
// group, one node per group at its members' middle, and the answer's edges with each end taken to its
// group, summed where they meet, the ones inside one group left out. An edge ranks as its best-ranked
// member (the answer lists them by influence); the first `limit` are drawn.
export function graphView(res, blocks, groups, limit) {
  const at = places(res, blocks);
  const ids = res.nodes.map(nodeKey);
  const groupOf = new Map();
  for (const g of groups) for (const m of g.members) groupOf.set(m, `s:${g.name}`);
  const nodes = [];
  res.nodes.forEach((n, i) => { if (!groupOf.has(ids[i])) nodes.push({ id: ids[i], kind: n.kind, node: n, ...at.get(ids[i]) }); });
  for (const g of groups) {
    const members = res.nodes.filter((_, i) => groupOf.get(ids[i]) === `s:${g.name}`);
    if (!members.length) continue;
    const mean = (k) => members.reduce((s, m) => s + at.get(nodeKey(m))[k], 0) / members.length;
    nodes.push({ id: `s:${g.name}`, kind: "supernode", name: g.name, members, x: mean("x"), y: mean("y") });
  }
  const merged = new Map();
  res.edges.forEach((e, rank) => {
    const s = groupOf.get(ids[e.source]) ?? ids[e.source];
    const t = groupOf.get(ids[e.target]) ?? ids[e.target];
    if (s === t) return;
    const m = merged.get(`${s}>${t}`);
    if (m) { m.weight += e.weight; m.count += 1; } else merged.set(`${s}>${t}`, { source: s, target: t, weight: e.weight, rank, count: 1 });
  });
  const edges = [...merged.values()].filter((m) => m.rank < limit);
  return { nodes, edges, byId: new Map(nodes.map((n) => [n.id, n])) };
}
