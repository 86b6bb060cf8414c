// /compare panel 1: the text as three strips of characters, one cell per character, coloured by
// the bits model a and model b pay for it and by their difference (char_bits_a, char_bits_b and
// char_bits_diff of POST /api/v1/compare). Characters are code points, as the API counts them.
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, visible } from "../lib/format.js";
import { MONO, divColour, inkOn, seqColour } from "../lib/palette.js";
import { signedLimit } from "../lib/plot.js";

let res = null;
let scale = { bits: 1, diff: 1 };
const STRIPS = [["strip-a", "a"], ["strip-b", "b"], ["strip-diff", "diff"]];

export function initStrips({ onPickChar }) {
  for (const [id] of STRIPS) {
    $(id).addEventListener("click", (e) => {
      const cell = e.target.closest(".cc");
      if (cell) onPickChar(+cell.dataset.i);
    });
  }
  addDownloads($("strips"), "bits-per-character", () => res && {
    text: res.text, char_bits_a: res.char_bits_a, char_bits_b: res.char_bits_b, char_bits_diff: res.char_bits_diff,
    a: { checkpoint: res.a.checkpoint, tokens: res.a.tokens }, b: { checkpoint: res.b.checkpoint, tokens: res.b.tokens },
  }, { svgEl: stripsSvg });
}

const values = (which) => (which === "a" ? res.char_bits_a : which === "b" ? res.char_bits_b : res.char_bits_diff);

function colourOf(which, v) {
  return which === "diff" ? divColour(v, scale.diff) : seqColour(v, 0, scale.bits);
}

function cellTitle(which, i, ch, v) {
  const head = `character ${i} “${visible(ch)}”`;
  if (v === null) return `${head} · not scored (part of the first token${which === "diff" ? " of a or b" : ""})`;
  if (which !== "diff") return `${head} · ${decimal(v, 3)} bits`;
  return `${head} · b − a ${v > 0 ? "+" : ""}${decimal(v, 3)} bits (a ${decimal(res.char_bits_a[i], 3)}, b ${decimal(res.char_bits_b[i], 3)})`;
}

function starts(side) {
  return new Set(side.tokens.filter((t) => t.end > t.start).map((t) => t.start));
}

function fillStrip(id, which, chars) {
  const vals = values(which);
  const begin = which === "diff" ? new Set() : starts(res[which]);
  const cells = [];
  chars.forEach((ch, i) => {
    const v = vals[i];
    const bg = v === null ? null : colourOf(which, v);
    cells.push(el("span", {
      class: `cc${v === null ? " na" : ""}${begin.has(i) && i > 0 ? " ts" : ""}`, title: cellTitle(which, i, ch, v),
      style: bg ? `background:${bg};color:${inkOn(bg)}` : null, dataset: { i, v: v === null ? "" : v },
      text: visible(ch),
    }));
    if (ch === "\n") cells.push(el("br"));
  });
  $(id).replaceChildren(...cells);
  $(id).dataset.cells = String(chars.length);
}

function legend() {
  const ramp = (f) => Array.from({ length: 11 }, (_, k) => `${f(k / 10)} ${k * 10}%`).join(", ");
  const seq = ramp((t) => seqColour(t, 0, 1));
  const div = ramp((t) => divColour(2 * t - 1, 1));
  $("strip-legend").replaceChildren(
    el("span", { text: "bits" }), el("span", { class: "mono", text: "0" }),
    el("span", { class: "ramp", style: `background:linear-gradient(to right, ${seq})` }),
    el("span", { class: "mono", text: `≥ ${decimal(scale.bits, 2)}` }),
    el("span", { class: "gap", text: "b − a" }), el("span", { class: "mono", text: `≤ −${decimal(scale.diff, 2)}` }),
    el("span", { class: "ramp", style: `background:linear-gradient(to right, ${div})` }),
    el("span", { class: "mono", text: `≥ +${decimal(scale.diff, 2)}` }),
    el("span", { class: "gap na key", text: "" }), el("span", { text: "not scored" }));
}

export function renderStrips(r) {
  res = r;
  // one colour scale for a and b (so equal bits look equal), one for the difference; both robust
  // to a single outlier (the 99th percentile), the title of each cell gives its exact value
  scale = { bits: signedLimit([r.char_bits_a, r.char_bits_b]), diff: signedLimit([r.char_bits_diff]) };
  const chars = [...r.text];
  for (const [id, which] of STRIPS) fillStrip(id, which, chars);
  $("strip-a-name").textContent = r.a.checkpoint;
  $("strip-b-name").textContent = r.b.checkpoint;
  legend();
  markChar(r.char, r);
}

// Outline the chosen character, and in each model's strip the token that holds it.
export function markChar(i, r = res) {
  if (!r) return;
  for (const [id, which] of STRIPS) {
    const tok = which === "diff" ? null : r[which].tokens[r[which].position];
    $(id).querySelectorAll(".cc").forEach((c) => {
      const k = +c.dataset.i;
      c.classList.toggle("sel", k === i);
      c.classList.toggle("cur", !!tok && k >= tok.start && k < Math.max(tok.end, tok.start + 1));
    });
  }
}

// --- the strips as one SVG (the download bar's PNG and SVG) -------------------------------------

const SVGNS = "http://www.w3.org/2000/svg";
const COLS = 80;
const CW = 10;
const CH = 18;

function svgNode(tag, attrs, text) {
  const n = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

function stripsSvg() {
  if (!res) return null;
  const chars = [...res.text];
  const svg = svgNode("svg", { "font-family": MONO, "font-size": "11" });
  let y = 0;
  const names = { a: `a: ${res.a.checkpoint}`, b: `b: ${res.b.checkpoint}`, diff: "b − a (bits)" };
  for (const [, which] of STRIPS) {
    y += 22;
    svg.append(svgNode("text", { x: 0, y: y - 6, "font-size": "12" }, names[which]));
    let col = 0;
    chars.forEach((ch, i) => {
      const v = values(which)[i];
      const bg = v === null ? "#e9e9e9" : colourOf(which, v);
      svg.append(svgNode("rect", { x: col * CW, y, width: CW, height: CH, fill: bg }));
      svg.append(svgNode("text", { x: col * CW + 1, y: y + 13, fill: inkOn(v === null ? "rgb(233, 233, 233)" : bg) }, visible(ch)));
      col += 1;
      if (ch === "\n" || col === COLS) { col = 0; y += CH; }
    });
    y += CH + 8;
  }
  svg.setAttribute("width", COLS * CW);
  svg.setAttribute("height", y);
  svg.setAttribute("viewBox", `0 0 ${COLS * CW} ${y}`);
  const box = $("strips-svg-box");
  box.replaceChildren(svg);   // laid out off screen, so its size can be read for the PNG
  return svg;
}
