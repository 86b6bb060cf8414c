// "Walk me through it": the steps of the trace's overview part (the API writes each caption, with this
// prompt's numbers and in the words of the model's own block), one at a time: its node highlighted in
// the diagram and its stage opened below, without leaving the overview. Next / back buttons, the
// arrow keys, Esc to close. The URL's `walk` keeps the step; body[data-walk-step] is it (1-based).
import { $ } from "../lib/dom.js";
import { closeStage, openStage } from "./stage_view.js";

let page = null;
let steps = [];
let at = null;   // the step on show (0-based), null while the walk is closed

function highlight(id) {
  const root = $("overview-svg");
  for (const e of root.querySelectorAll(".walk-on")) e.classList.remove("walk-on");
  // a node a compact block does not draw (its norms, say) lights up its block instead
  const parts = id.split(".");
  for (let n = parts.length; n > 0; n--) {
    const key = parts.slice(0, n).join(".");
    const node = root.querySelector(`[data-node="${key}"]`) || root.querySelector(`[data-block="${key}"]`);
    if (node) {
      node.classList.add("walk-on");
      return;
    }
  }
}

function show() {
  const box = $("walk");
  if (at === null || !steps.length) {
    box.hidden = true;
    document.body.dataset.walkStep = "";
    return;
  }
  at = Math.max(0, Math.min(steps.length - 1, at));
  const s = steps[at];
  box.hidden = false;
  $("walk-step").textContent = `step ${at + 1} of ${steps.length}`;
  $("walk-title").textContent = s.title;
  $("walk-caption").textContent = s.caption;
  $("walk-back").disabled = at === 0;
  $("walk-next").textContent = at === steps.length - 1 ? "finish" : "next →";
  highlight(s.node);
  box.dataset.stage = s.stage;   // the stage this step opens (the API's)
  openStage(s.stage, null, { scroll: false });
  document.body.dataset.walkStep = String(at + 1);
}

// The diagram and the walk's card together, just under the sticky bar.
function inView() {
  const top = $("overview-panel").getBoundingClientRect().top + scrollY - $("selection-bar").offsetHeight - 8;
  scrollTo({ top: Math.max(0, top), behavior: "instant" });
}

function go(i) {
  at = i;
  page.state.walk = at === null ? null : at + 1;
  page.writeUrl();
  show();
}

function close() {
  go(null);
  for (const e of $("overview-svg").querySelectorAll(".walk-on")) e.classList.remove("walk-on");
  if (document.body.dataset.openStage) closeStage();
}

export function initWalk(p) {
  page = p;
  $("walk-start").addEventListener("click", () => {
    go(0);
    inView();
  });
  $("walk-back").addEventListener("click", () => go(Math.max(0, at - 1)));
  $("walk-next").addEventListener("click", () => (at >= steps.length - 1 ? close() : go(at + 1)));
  $("walk-close").addEventListener("click", close);
  document.addEventListener("keydown", (e) => {
    if (at === null || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (e.key === "ArrowRight") go(Math.min(steps.length - 1, at + 1));
    else if (e.key === "ArrowLeft") go(Math.max(0, at - 1));
    else if (e.key === "Escape") close();
    else return;
    e.preventDefault();
    e.stopImmediatePropagation();
  });
  at = p.state.walk ? p.state.walk - 1 : null;
}

// A new trace (a new prompt or position): the same step, with the new numbers.
export function renderWalk(overview) {
  const first = !steps.length;
  steps = overview.walk || [];
  show();
  if (first && at !== null && $("walk").getBoundingClientRect().bottom > innerHeight) inView();   // opened from the URL
}
