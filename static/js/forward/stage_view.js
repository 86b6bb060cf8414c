// One stage at a time under the overview: a node of the diagram (or the stage bar, or j / k and the
// digits) opens its stage, zooming from the node to the stage, and "back to the overview" (or Esc)
// zooms back and closes it. The URL's `stage` keeps which one is open; `stage=all` shows every stage,
// one after the other, as a long page to read through (the "show every stage" link switches).
// body[data-open-stage] is the open stage's name ("" for none).
import { $ } from "../lib/dom.js";
import { drawNearby } from "../lib/draw_queue.js";
import { resizePlots } from "../lib/plot.js";
import { alignStage, markNav, stages } from "../lib/stages.js";

let page = null;
let from = null;   // the node the open stage was opened from: where "back" returns

const nameOf = (sec) => sec.id.replace(/-panel$/, "");
export const allStages = () => document.body.classList.contains("all-stages");
const reduced = () => matchMedia("(prefers-reduced-motion: reduce)").matches;

// A box flying from one rectangle to another: the zoom between a node and its stage.
function zoom(a, b) {
  if (!a || !b || reduced()) return;
  const box = document.createElement("div");
  box.className = "ov-zoom";
  document.body.append(box);
  const frame = (r, o) => ({ left: `${r.left}px`, top: `${r.top}px`, width: `${r.width}px`, height: `${r.height}px`, opacity: o });
  const anim = box.animate([frame(a, 0.9), frame(b, 0.15)], { duration: 380, easing: "cubic-bezier(.2,.7,.2,1)" });
  anim.onfinish = () => box.remove();
  anim.oncancel = () => box.remove();
}

// Open stage `name` (its section #<name>-panel); `node`: where the zoom starts. scroll false: open it
// without moving the page (the walk keeps the overview in view).
export function openStage(name, node = null, { scroll = true } = {}) {
  const sec = document.getElementById(`${name}-panel`);
  if (!sec?.classList.contains("stage")) return;
  if (allStages()) {
    alignStage(sec);
    sec.focus({ preventScroll: true });
    markNav(sec);
    drawNearby();
    return;
  }
  for (const s of stages()) s.classList.toggle("open", s === sec);
  document.body.dataset.openStage = name;
  from = node || from;
  page.state.stage = name;
  page.writeUrl();
  markNav(sec);
  resizePlots(sec);
  if (scroll) {
    const start = node?.getBoundingClientRect();
    alignStage(sec);   // and kept there while its plots draw
    zoom(start, sec.getBoundingClientRect());
    sec.focus({ preventScroll: true });
  }
  drawNearby();
}

// Back to the overview: the stage closes, the page scrolls up to the diagram, the node it was opened
// from gets the focus again.
export function closeStage() {
  const name = document.body.dataset.openStage;
  const sec = name && document.getElementById(`${name}-panel`);
  const back = from?.isConnected ? from : document.querySelector(`#overview-svg [data-stage="${name}"]`);
  const start = sec?.getBoundingClientRect();
  if (!allStages()) {
    for (const s of stages()) s.classList.remove("open");
    document.body.dataset.openStage = "";
    page.state.stage = null;
    page.writeUrl();
  }
  scrollTo({ top: 0, behavior: "instant" });
  $("overview-panel").scrollIntoView({ block: "nearest" });
  if (back) {
    zoom(start, back.getBoundingClientRect());
    back.focus({ preventScroll: true });
  } else $("overview-panel").focus({ preventScroll: true });
  from = null;
  markNav(null);
}

// For lib/stages.js's keys: the open section.stage (null: none), and opening one.
export const openSection = () => document.getElementById(`${document.body.dataset.openStage}-panel`);
export const openThis = (sec) => openStage(nameOf(sec));

function setAll(on) {
  document.body.classList.toggle("all-stages", on);
  $("all-stages").textContent = on ? "one stage at a time" : "show every stage";
  page.state.stage = on ? "all" : document.body.dataset.openStage || null;
  page.writeUrl();
  drawNearby();
}

export function initStageView(p) {
  page = p;
  for (const sec of stages()) {
    const back = document.createElement("button");
    back.type = "button";
    back.className = "stage-back plain";
    back.textContent = "← back to the overview";
    back.addEventListener("click", closeStage);
    sec.prepend(back);
  }
  document.body.dataset.openStage = "";
  $("stage-nav").addEventListener("click", (e) => {
    const a = e.target.closest('a[href$="-panel"]');
    if (!a) return;
    e.preventDefault();
    openStage(a.getAttribute("href").slice(1).replace(/-panel$/, ""), a);
  });
  $("all-stages").addEventListener("click", (e) => { e.preventDefault(); setAll(!allStages()); });
  if (p.state.stage === "all") setAll(true);
  else if (p.state.stage) openStage(p.state.stage, null);
}
