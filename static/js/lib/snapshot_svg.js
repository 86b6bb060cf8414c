// An HTML figure (a text's coloured tokens, pre-token chips, a merge's pieces, passages shaded per
// token) as one SVG of what the page laid out: each box with its background and outline, each text
// where it sits, in its font and colour. The download bar's PNG and SVG of such a figure
// (addDownloads' `svgEl`). It reads positions and colours from the page and computes nothing else.
const SVGNS = "http://www.w3.org/2000/svg";
const CLEAR = new Set(["transparent", "rgba(0, 0, 0, 0)"]);

function svgNode(tag, attrs, text) {
  const n = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

// Whether `node` lies outside a scrolled box between it and `root` (a token strip inside a block
// that scrolls): drawn, it would cover what follows that box.
function clipped(node, root) {
  const r = node.getBoundingClientRect();
  for (let p = node.parentElement; p && p !== root; p = p.parentElement) {
    if (getComputedStyle(p).overflowY === "visible") continue;
    const c = p.getBoundingClientRect();
    if (r.bottom <= c.top || r.top >= c.bottom || r.right <= c.left || r.left >= c.right) return true;
  }
  return false;
}

// A box's background and its border or outline (a dashed one stays dashed), or null if it has none.
function boxRect(cs, x, y, width, height) {
  const border = parseFloat(cs.borderTopWidth) > 0 && cs.borderTopStyle !== "none" && !CLEAR.has(cs.borderTopColor);
  const outline = parseFloat(cs.outlineWidth) > 0 && cs.outlineStyle !== "none";
  const fill = CLEAR.has(cs.backgroundColor) ? null : cs.backgroundColor;
  if (!fill && !border && !outline) return null;
  const line = outline ? [cs.outlineColor, cs.outlineWidth, cs.outlineStyle] : border ? [cs.borderTopColor, cs.borderTopWidth, cs.borderTopStyle] : null;
  return svgNode("rect", { x, y, width, height, rx: parseFloat(cs.borderTopLeftRadius) || null, fill: fill || "none",
    stroke: line ? line[0] : null, "stroke-width": line ? line[1] : null, "stroke-dasharray": line && line[2] === "dashed" ? "3 2" : null });
}

// A text node's pieces, one per line box it lies on (tokens written with no space between them
// break anywhere, so one token's text may wrap): [text, rect] each.
function lines(t) {
  const range = document.createRange();
  range.selectNodeContents(t);
  const rects = [...range.getClientRects()].filter((r) => r.width > 0);
  if (rects.length <= 1) return rects.map((r) => [t.textContent, r]);
  const out = [];
  for (let i = 0; i < t.length;) {
    const n = t.textContent.codePointAt(i) > 0xffff ? 2 : 1;
    range.setStart(t, i);
    range.setEnd(t, i + n);
    const r = range.getBoundingClientRect();
    const last = out[out.length - 1];
    if (last && Math.abs(last[1].top - r.top) < 1) last[0] += t.textContent.slice(i, i + n);
    else out.push([t.textContent.slice(i, i + n), r]);
    i += n;
  }
  return out;
}

// Each of an element's own texts where it sits, in its font and colour.
function texts(el, at) {
  const out = [];
  const cs = getComputedStyle(el);
  for (const t of el.childNodes) {
    if (t.nodeType !== Node.TEXT_NODE || !t.textContent.trim()) continue;
    for (const [text, r] of lines(t)) {
      const [x, y] = at(r);
      out.push(svgNode("text", { x, y: y + r.height / 2, "dominant-baseline": "central", fill: cs.color, "font-family": cs.fontFamily,
        "font-size": cs.fontSize, "font-weight": cs.fontWeight }, text));
    }
  }
  return out;
}

let stage = null;   // off screen: where the SVG is laid out, so that its size can be read for the PNG

// `root` and everything in it as one <svg> (its whole scrolled content), laid out off screen.
export function snapshotSvg(root) {
  if (!root?.getClientRects().length) return null;
  const r0 = root.getBoundingClientRect();
  const at = (r) => [r.left - r0.left + root.scrollLeft, r.top - r0.top + root.scrollTop];
  const width = Math.ceil(root.scrollWidth);
  const height = Math.ceil(root.scrollHeight);
  const svg = svgNode("svg", { xmlns: SVGNS, width, height, viewBox: `0 0 ${width} ${height}`, style: "white-space:pre" });
  svg.append(svgNode("rect", { x: 0, y: 0, width, height, fill: "#fff" }));
  for (const el of [root, ...root.querySelectorAll("*")]) {
    if (el !== root && clipped(el, root)) continue;
    if (el !== root) {   // an inline box broken over lines: one rectangle per line
      const cs = getComputedStyle(el);
      for (const r of el.getClientRects()) {
        const box = r.width && r.height ? boxRect(cs, ...at(r), r.width, r.height) : null;
        if (box) svg.append(box);
      }
    }
    svg.append(...texts(el, at));
  }
  if (!stage) {
    stage = document.createElement("div");
    stage.setAttribute("aria-hidden", "true");
    stage.style.cssText = "position:absolute; left:-100000px; top:0";
    document.body.append(stage);
  }
  stage.replaceChildren(svg);
  return svg;
}
