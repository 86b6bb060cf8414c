// The overview's SVG: every node of GET /api/v1/architecture as a box (a <g class="ov-node"> with its
// data-node id and the data-stage it opens), the residual stream through them, each block's
// branches and adds, and a cell per head. Where things go is overview_layout.js; the live numbers
// are painted onto these elements by panel_overview.js (paint), so a new position redraws nothing.
import { STREAM_Y, fullBlock, headCells, layout } from "./overview_layout.js";

const NS = "http://www.w3.org/2000/svg";

export function svgEl(tag, attrs = {}, ...children) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) e.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

const line = (x1, y1, x2, y2, cls = "ov-wire") => svgEl("path", { d: `M${x1},${y1} L${x2},${y2}`, class: cls });

// A text that never runs past `max` px: once it is in the document (fit()), `short` stands in for it
// where it is too long, then it is shortened with "…".
function label(x, y, text, cls, max, anchor = "start", short = null) {
  return svgEl("text", { x, y, class: cls, "data-max": Math.max(4, Math.floor(max)), "text-anchor": anchor,
    "data-short": short }, text);
}

// A clickable node: its box, its name and (where there is room) its shape.
function nodeBox(node, box, extra = {}) {
  const g = svgEl("g", {
    class: `ov-node ov-${node.kind}${extra.cls ? ` ${extra.cls}` : ""}`, "data-node": node.id, "data-stage": node.stage,
    tabindex: "0", role: "button", "aria-label": `${node.label} (${node.shape}): ${node.note}`,
  });
  g.append(svgEl("title", {}, `${node.label} · ${node.shape}\n${node.note}`));
  g.append(svgEl("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 5, class: "ov-box" }));
  const cx = box.x + box.w / 2;
  if (box.h >= 34) {
    g.append(label(cx, box.y + 16, extra.text ?? node.label, "ov-label", box.w - 6, "middle"));
    g.append(label(cx, box.y + 30, node.shape, "ov-shape", box.w - 6, "middle"));
  } else {
    g.append(label(cx, box.y + box.h / 2 + 4, extra.text ?? shortName(node), "ov-label small", box.w - 4, "middle"));
  }
  return g;
}

// What a small box says: LN / RMS for a norm, the label's first word otherwise.
function shortName(node) {
  if (node.kind === "norm") return node.label.startsWith("RMS") ? "RMS" : "LN";
  if (node.kind === "softcap") return "cap";
  return node.label.split(/\s+/)[0];
}

const plus = (x, y) => svgEl("g", { class: "ov-add" }, svgEl("circle", { cx: x, cy: y, r: 7 }),
  line(x - 4, y, x + 4, y, "ov-plus"), line(x, y - 4, x, y + 4, "ov-plus"));

function drawHead(svg, boxes) {
  for (const b of boxes) {
    svg.append(nodeBox(b.node, b));
    if (b.node.id === "tokens") svg.append(line(b.x + b.w / 2, b.y + b.h, b.x + b.w / 2, STREAM_Y - 20, "ov-wire"));
    if (b.node.id === "pos") {
      const ax = b.joins ? b.x + b.w + 8 : b.x + b.w / 2;
      if (b.joins) {
        svg.append(line(b.x + b.w, b.y + b.h / 2, ax, b.y + b.h / 2), line(ax, b.y + b.h / 2, ax, STREAM_Y + 7, "ov-wire"));
        svg.append(plus(ax, STREAM_Y));
      } else svg.append(line(b.x + b.w / 2, b.y, b.x + b.w / 2, STREAM_Y + 20, "ov-wire ov-dashed"));
    }
  }
}

// A whole block: its frame and title, the attention branch above the stream (its norms, a cell per
// head), the MLP branch below, and the adds on the stream (overview_layout.js: fullBlock says where).
function drawFullBlock(svg, { block, x, w }) {
  const p = fullBlock(block, x, w);
  const g = svgEl("g", { class: `ov-block full${block.window ? " windowed" : ""}`, "data-layer": block.layer, "data-block": block.id });
  g.append(svgEl("rect", { ...rect(p.frame), rx: 8, class: "ov-frame" }));
  const title = `block ${block.layer}${block.window ? ` · window ${block.window}` : ""}${block.parallel ? " · parallel" : ""}`;
  g.append(label(p.title.x, p.title.y, title, "ov-title", p.frame.w - 12, "start", `block ${block.layer}`));
  const top = p.attn.y + p.attn.h;
  g.append(line(p.xr1, STREAM_Y, p.xr1, top), line(p.xw1, top, p.xw1, STREAM_Y - 7, "ov-wire"));
  g.append(line(p.xr2, STREAM_Y, p.xr2, p.mlp.y), line(p.xw2, p.mlp.y, p.xw2, STREAM_Y + 7, "ov-wire"));
  g.append(branchNode(block.attention.op, p.attn, block, true));
  g.append(branchNode(block.mlp.op, p.mlp, block, false));
  const norms = [[block.attention.norm_in, p.attnNormIn], [block.attention.norm_out, p.attnNormOut],
    [block.attention.norm_after, p.attnAfter], [block.mlp.norm_in, p.mlpNormIn], [block.mlp.norm_out, p.mlpNormOut],
    [block.mlp.norm_after, p.mlpAfter], [block.mix, p.mix]];
  for (const [node, box] of norms) if (node && box) g.append(nodeBox(node, box));
  if (!block.parallel) g.append(plus(p.xw1, STREAM_Y));
  g.append(plus(p.xw2, STREAM_Y));
  svg.append(g);
}

const rect = (b) => ({ x: b.x, y: b.y, width: b.w, height: b.h });

// The attention box (a cell per head, the strongest head's reading below them) or the MLP box
// (a bar of what it wrote); their live texts are filled in by paint().
function branchNode(node, box, block, attention) {
  const g = svgEl("g", {
    class: `ov-node ov-${node.kind} ov-op`, "data-node": node.id, "data-stage": node.stage, "data-layer": block.layer,
    tabindex: "0", role: "button", "aria-label": `${node.label} of block ${block.layer} (${node.shape}): ${node.note}`,
  });
  g.append(svgEl("title", {}, `${node.label} · ${node.shape}\n${node.note}`));
  g.append(svgEl("rect", { ...rect(box), rx: 6, class: "ov-box" }));
  g.append(label(box.x + 5, box.y + 14, node.label, "ov-label", box.w - 10, "start", node.label.split(" (")[0]));
  if (attention) {
    for (const c of headCells(block, box, true)) g.append(headCell(block, c));
    g.append(label(box.x + 5, box.y + box.h - 6, "", "ov-read", box.w - 10));
  } else {
    g.append(label(box.x + 5, box.y + 28, node.shape, "ov-shape", box.w - 10, "start", `${block.d_mlp} wide`));
    g.append(svgEl("rect", { x: box.x + 5, y: box.y + 36, width: 0, height: 7, class: "ov-bar" }));
    if (block.n_expert) g.append(...expertCells(block, box));
    g.append(label(box.x + 5, box.y + box.h - 8, "", "ov-val", box.w - 10));
  }
  return g;
}

// A mixture of experts: a cell per expert under the bar (the chosen ones filled by paint()).
function expertCells(block, box) {
  const n = block.n_expert;
  const size = Math.min(10, (box.w - 10) / n);
  return Array.from({ length: n }, (_, e) => svgEl("rect", { x: box.x + 5 + e * size, y: box.y + 47, width: Math.max(1.5, size - 1.5),
    height: 8, class: "ov-expert", "data-expert": e, rx: 1 }, svgEl("title", {}, `expert ${e}`)));
}

function headCell(block, c) {
  const id = `block.${block.layer}.head.${c.head}`;
  return svgEl("rect", { x: c.x, y: c.y, width: c.w, height: c.h, class: "ov-head-cell", "data-node": id,
    "data-stage": "block", "data-layer": block.layer, "data-head": c.head, rx: 1.5, tabindex: "-1" },
  svgEl("title", {}, `head ${block.layer}.${c.head}`));
}

// A block among many: a column of head cells above the stream, an MLP bar below, its number on top.
function drawCompactBlock(svg, { block, x, w }, showNumber) {
  const g = svgEl("g", { class: `ov-block compact${block.window ? " windowed" : ""}`, "data-layer": block.layer, "data-block": block.id });
  const attn = { x: x + 1, y: 30, w: w - 2, h: 80 };
  const mlp = { x: x + 2, y: 196, w: Math.max(2, w - 4), h: 76 };
  g.append(svgEl("rect", { x: x + 0.5, y: 24, width: Math.max(1, w - 1), height: 256, rx: 3, class: "ov-frame" }));
  if (showNumber) g.append(label(x + w / 2, 18, String(block.layer), "ov-title small", w + 6, "middle"));
  const an = block.attention.op;
  const ga = svgEl("g", { class: `ov-node ov-${an.kind} ov-op`, "data-node": an.id, "data-stage": an.stage, "data-layer": block.layer,
    tabindex: "0", role: "button", "aria-label": `${an.label} of block ${block.layer} (${an.shape})` },
  svgEl("title", {}, `block ${block.layer}: ${an.label} · ${an.shape}`), svgEl("rect", { ...rect(attn), rx: 2, class: "ov-box" }));
  for (const c of headCells(block, attn, false)) ga.append(headCell(block, c));
  const mn = block.mlp.op;
  const gm = svgEl("g", { class: `ov-node ov-${mn.kind} ov-op`, "data-node": mn.id, "data-stage": mn.stage, "data-layer": block.layer,
    tabindex: "0", role: "button", "aria-label": `${mn.label} of block ${block.layer} (${mn.shape})` },
  svgEl("title", {}, `block ${block.layer}: ${mn.label} · ${mn.shape}`), svgEl("rect", { ...rect(mlp), rx: 2, class: "ov-box" }));
  g.append(line(x + w / 2, attn.y + attn.h, x + w / 2, STREAM_Y - 4), line(x + w / 2, mlp.y, x + w / 2, STREAM_Y + 4));
  g.append(ga, gm);
  svg.append(g);
}

function drawTail(svg, boxes) {
  for (const b of boxes) {
    svg.append(nodeBox(b.node, b, { cls: b.node.id === "probs" ? "ov-probs-node" : "" }));
    if (b.node.id === "sample") svg.append(line(b.x + b.w / 2, STREAM_Y + 20, b.x + b.w / 2, b.y, "ov-wire"));
  }
}

// The page's analyses that are no step of the pass, as a row of chips under the diagram.
function drawTools(svg, tools, width) {
  let x = 4;
  const y = 296;
  svg.append(label(x, y + 14, "more:", "ov-shape", 40));
  x += 42;
  for (const t of tools) {
    const w = Math.min(150, 14 + 6.6 * t.label.length);
    if (x + w > width) break;
    svg.append(nodeBox(t, { x, y, w, h: 20 }, { cls: "ov-tool-chip", text: t.label }));
    x += w + 8;
  }
}

// Which compact blocks carry their number: every one where there is room, else every k-th.
function numbered(cols) {
  const narrow = Math.min(...cols.map((c) => c.w));
  const every = Math.max(1, Math.ceil(16 / Math.max(1, narrow)));
  return (i) => i % every === 0 || i === cols.length - 1 && every === 1;
}

// Build the whole diagram into `svg` for its width; returns the layout (for the path animation).
export function drawOverview(svg, arch, width, layer) {
  const L = layout(arch, width, layer);
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${L.width} ${L.height}`);
  svg.setAttribute("width", L.width);
  svg.setAttribute("height", L.height);
  const last = L.tail[0];
  svg.append(svgEl("path", { d: `M${L.head[1].x + L.head[1].w},${STREAM_Y} L${last.x},${STREAM_Y}`, class: "ov-stream" }));
  drawHead(svg, L.head);
  const show = numbered(L.blocks.filter((b) => !b.full));
  let k = 0;
  for (const b of L.blocks) {
    if (b.full) drawFullBlock(svg, b);
    else drawCompactBlock(svg, b, show(k++));
  }
  drawTail(svg, L.tail);
  drawTools(svg, arch.tools, L.width);
  fit(svg);
  return L;
}

// Shorten every text with a data-max until it fits its box.
export function fit(root) {
  for (const t of root.querySelectorAll("text[data-max]")) {
    const max = +t.dataset.max;
    if (!t.textContent || t.getComputedTextLength() <= max) continue;
    if (t.dataset.short) t.textContent = t.dataset.short;
    else t.textContent = t.textContent.replace(/ ([→×]) /g, "$1");   // "192 → 768" as "192→768" first
    const full = t.textContent;
    if (t.getComputedTextLength() <= max) continue;
    let n = full.length;
    while (n > 1 && t.getComputedTextLength() > max) t.textContent = `${full.slice(0, --n)}…`;
    if (t.getComputedTextLength() > max) t.textContent = "";
  }
}
