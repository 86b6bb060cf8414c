// The overview's geometry: where each node of GET /api/v1/architecture goes in the diagram, from left
// to right along the residual stream (the head's nodes, the blocks, the tail's), for a given width.
// Pure layout: no DOM and no model numbers (overview_draw.js draws it, panel_overview.js colours it).
//
// A block is drawn whole ("full": its norms, its attention with a cell per head, its MLP, its adds)
// when every block fits FULL_MIN px; otherwise the selected block stays whole and the others are
// drawn "compact" (a column of head cells and an MLP bar), each one click from being the whole one.

export const H = 318;           // the diagram's height, tools row included
export const STREAM_Y = 150;    // the residual stream's line
const FULL_MIN = 84;            // the narrowest whole block
const FULL_MAX = 170;
const FOCUS_W = 128;            // the selected block, whole, among compact ones
const GAP = 12;
const NODE_H = 40;

// Boxes for the nodes before the blocks: tokens above the embedding, positions below it.
function headBoxes(arch) {
  const boxes = [];
  let x = 4;
  const find = (id) => arch.head.find((n) => n.id === id);
  const tokens = find("tokens");
  const embed = find("embed");
  const pos = find("pos");
  boxes.push({ node: tokens, x, y: 28, w: 80, h: NODE_H });
  boxes.push({ node: embed, x, y: STREAM_Y - NODE_H / 2, w: 80, h: NODE_H });
  if (pos) boxes.push({ node: pos, x, y: STREAM_Y + 48, w: 80, h: NODE_H, joins: pos.kind === "pos" && pos.label !== "RoPE" });
  x += 80 + GAP + (pos && pos.label !== "RoPE" ? 14 : 0);
  for (const n of arch.head) {
    if (["tokens", "embed", "pos"].includes(n.id)) continue;
    boxes.push({ node: n, x, y: STREAM_Y - 14, w: 44, h: 28 });
    x += 44 + GAP;
  }
  return { boxes, end: x };
}

// Boxes for the nodes after the blocks; `sample` hangs under the probabilities.
function tailBoxes(arch, x0) {
  const boxes = [];
  let x = x0;
  let probs = null;
  for (const n of arch.tail) {
    if (n.id === "sample") continue;
    const small = n.kind === "norm" || n.kind === "softcap" || n.kind === "backout";
    const w = small ? 44 : 92;
    const h = small ? 28 : NODE_H;
    const box = { node: n, x, y: STREAM_Y - h / 2, w, h };
    boxes.push(box);
    if (n.id === "probs") probs = box;
    x += w + GAP;
  }
  const sample = arch.tail.find((n) => n.id === "sample");
  if (sample && probs) boxes.push({ node: sample, x: probs.x, y: STREAM_Y + 48, w: probs.w, h: NODE_H });
  return { boxes, end: x - GAP };
}

function tailWidth(arch) {
  return tailBoxes(arch, 0).end;
}

// Each block's x and width, and whether it is drawn whole.
function blockColumns(n, x0, avail, layer) {
  const each = avail / n;
  if (each >= FULL_MIN) {
    const w = Math.min(FULL_MAX, each);
    return Array.from({ length: n }, (_, i) => ({ x: x0 + i * w, w, full: true }));
  }
  const rest = Math.max(6, (avail - FOCUS_W) / Math.max(1, n - 1));
  let x = x0;
  return Array.from({ length: n }, (_, i) => {
    const col = { x, w: i === layer ? FOCUS_W : rest, full: i === layer };
    x += col.w;
    return col;
  });
}

// Where a whole block's parts go (x: the block's left edge, w: its width). On the stream, in order:
// nanochat's mix, attention's read (xr1) and add (xw1), a post-norm's norm after it, the MLP's read
// (xr2) and add (xw2). A parallel block reads both at xr1 and adds once at xw2. A norm on a
// branch's way in or out sits on that wire.
export function fullBlock(block, x, w) {
  const small = (cx, y) => ({ x: cx - 13, y, w: 26, h: 18 });
  const onStream = (x0) => ({ x: x0, y: STREAM_Y - 8, w: 22, h: 16 });
  const xr1 = x + (block.mix ? 34 : 16);
  const xw2 = x + w - (block.mlp.norm_after ? 38 : 16);
  const xw1 = block.parallel ? xw2 : x + Math.round(0.45 * w);
  const xr2 = block.parallel ? xr1 : xw1 + (block.attention.norm_after ? 40 : 14);
  return {
    frame: { x: x + 2, y: 6, w: w - 4, h: 282 },
    title: { x: x + 8, y: 20 },
    attn: { x: x + 6, y: 30, w: w - 12, h: 72 },
    mlp: { x: x + 6, y: 200, w: w - 12, h: 72 },
    xr1, xw1, xr2, xw2,
    attnNormIn: block.attention.norm_in ? small(xr1, 110) : null,
    attnNormOut: block.attention.norm_out ? small(xw1, 110) : null,
    attnAfter: block.attention.norm_after ? onStream(xw1 + 10) : null,
    mlpNormIn: block.mlp.norm_in ? small(xr2, 172) : null,
    mlpNormOut: block.mlp.norm_out ? small(xw2, 172) : null,
    mlpAfter: block.mlp.norm_after ? onStream(xw2 + 10) : null,
    mix: block.mix ? onStream(x + 6) : null,
  };
}

// The head cells of an attention box: key/value groups side by side (a gap between groups), each
// group in the columns that make its square cells largest (at most 16 px).
export function headCells(block, box, full) {
  const nh = block.n_head;
  const groups = block.n_kv_head < nh ? block.n_kv_head : 1;
  const per = nh / groups;
  const top = full ? box.y + 22 : box.y + 2;
  const height = full ? 32 : box.h - 4;
  const gap = groups > 1 ? 3 : 0;
  const room = box.w - 6 - gap * (groups - 1);
  let cols = 1;
  let size = 0;
  for (let c = 1; c <= per; c++) {
    const s = Math.min(16, room / (groups * c), height / Math.ceil(per / c));
    if (s > size + 0.01) { size = s; cols = c; }
  }
  const width = groups * cols * size + gap * (groups - 1);
  const x0 = box.x + (box.w - width) / 2;
  return Array.from({ length: nh }, (_, h) => {
    const g = Math.floor(h / per);
    const k = h % per;
    return { head: h, x: x0 + (g * cols + (k % cols)) * size + g * gap, y: top + Math.floor(k / cols) * size,
      w: Math.max(1.5, size - 1), h: Math.max(1.5, size - 1) };
  });
}

// The whole diagram for `width` px: { head, blocks: [{ block, x, w, full }], tail, tools, width }.
export function layout(arch, width, layer) {
  const head = headBoxes(arch);
  const tw = tailWidth(arch);
  const x0 = head.end;
  const avail = Math.max(arch.n_layer * 14, width - x0 - tw - GAP - 4);
  const cols = blockColumns(arch.n_layer, x0, avail, Math.min(layer, arch.n_layer - 1));
  const blocks = arch.blocks.map((b, i) => ({ block: b, ...cols[i] }));
  const tail = tailBoxes(arch, x0 + avail + GAP);
  return { head: head.boxes, blocks, tail: tail.boxes, width: Math.max(width, tail.end + 4), height: H };
}
