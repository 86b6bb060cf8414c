// A token's path through the overview: a dot carrying the token's text runs from the tokens box along
// the stream, up into each block's attention and down into its MLP, to the probabilities, while each
// block lights up as it passes. About a second and a half; a click or a key skips it, and
// prefers-reduced-motion turns it off. body[data-animating="1"] while it runs.
import { STREAM_Y, fullBlock } from "./overview_layout.js";
import { svgEl } from "./overview_draw.js";

const STEP_MS = 70;   // per waypoint
let stop = null;

const centre = (b) => [b.x + b.w / 2, b.y + b.h / 2];

// The waypoints, left to right.
function waypoints(shape) {
  const pts = [];
  const tokens = shape.head.find((b) => b.node.id === "tokens");
  const embed = shape.head.find((b) => b.node.id === "embed");
  if (tokens) pts.push(centre(tokens));
  if (embed) pts.push(centre(embed), [embed.x + embed.w + 10, STREAM_Y]);
  for (const b of shape.blocks) {
    if (b.full) {
      const p = fullBlock(b.block, b.x, b.w);
      pts.push([p.xr1, STREAM_Y], [p.xr1, p.attn.y + p.attn.h / 2], [p.xw1, p.attn.y + p.attn.h / 2], [p.xw1, STREAM_Y]);
      pts.push([p.xr2, STREAM_Y], [p.xr2, p.mlp.y + p.mlp.h / 2], [p.xw2, p.mlp.y + p.mlp.h / 2], [p.xw2, STREAM_Y]);
    } else {
      const cx = b.x + b.w / 2;
      pts.push([cx, STREAM_Y], [cx, 70], [cx, STREAM_Y], [cx, 234], [cx, STREAM_Y]);
    }
  }
  for (const b of shape.tail) if (b.node.id !== "sample") pts.push(centre(b));
  return pts;
}

const reduced = () => matchMedia("(prefers-reduced-motion: reduce)").matches;

export function playPath(svg, shape, position) {
  stop?.();
  if (!shape || reduced() || document.body.dataset.embed) return;
  const pts = waypoints(shape);
  const ms = Math.min(1800, STEP_MS * pts.length);
  const d = `M${pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" L")}`;
  const motion = svgEl("animateMotion", { dur: `${ms}ms`, fill: "freeze", path: d, begin: "indefinite" });
  const tok = document.querySelector(`#ov-tokens .tok[data-index="${position}"]`)?.textContent ?? "";
  const dot = svgEl("g", { class: "ov-dot", "aria-hidden": "true" }, svgEl("circle", { r: 6 }),
    svgEl("text", { x: 9, y: -8, class: "ov-dot-label" }, tok.length > 12 ? `${tok.slice(0, 11)}…` : tok), motion);
  svg.append(dot);
  const blocks = [...svg.querySelectorAll(".ov-block")];
  blocks.forEach((g, i) => {
    g.style.animationDelay = `${Math.round((ms * (i + 1.5)) / (blocks.length + 3))}ms`;
    g.classList.add("ov-pass");
  });
  document.body.dataset.animating = "1";
  const end = () => {
    clearTimeout(timer);
    dot.remove();
    blocks.forEach((g) => { g.classList.remove("ov-pass"); g.style.animationDelay = ""; });
    removeEventListener("pointerdown", end, true);
    removeEventListener("keydown", end, true);
    document.body.dataset.animating = "0";
    stop = null;
  };
  const timer = setTimeout(end, ms + 200);
  addEventListener("pointerdown", end, true);
  addEventListener("keydown", end, true);
  stop = end;
  motion.beginElement();
}
