// Stage navigation by keyboard, shared by / and /compare: j / k go to the next / previous
// section.stage, a digit jumps to the stage of that #stage-nav link (0 is the tenth; a page without a
// stage bar: the section.stage of that number), and a page adds its own keys (h / l step the position
// or the character). The stage lands just under the sticky #selection-bar and is kept there while the
// panels near it draw; its #stage-nav link gets aria-current="step" and body[data-stage] the link's
// number (1-based; a stage without a link, such as an imported family's block, "0").
import { $ } from "./dom.js";
import { drawNearby } from "./draw_queue.js";

export const stages = () => [...document.querySelectorAll("section.stage")];
const navLinks = () => [...document.querySelectorAll("#stage-nav a")];

function currentStage() {
  const list = stages();
  const active = document.activeElement?.closest ? document.activeElement.closest("section.stage") : null;
  if (active) {
    const r = active.getBoundingClientRect();
    if (r.bottom > 0 && r.top < innerHeight) return list.indexOf(active);
  }
  if (scrollY < 4) return -1;          // at the very top the prompt is the current place
  const barBottom = $("selection-bar").getBoundingClientRect().bottom;
  let idx = -1;
  list.forEach((s, i) => { if (s.getBoundingClientRect().top <= barBottom + 12) idx = i; });
  return idx;
}

// Put the stage just under the sticky bar, and keep it there for a moment: drawing the panels
// near it (drawNearby) can make a panel above it taller and push it down the screen. Any other
// scroll (the user's wheel, keys or scrollbar; a script's scrollIntoView) or a click ends that.
let settling = null;
export function alignStage(s) {
  settling?.();
  let at = scrollY;
  const align = () => {
    scrollTo({ top: Math.max(0, s.getBoundingClientRect().top + scrollY - $("selection-bar").offsetHeight - 8), behavior: "instant" });
    at = scrollY;
  };
  const onScroll = () => { if (Math.abs(scrollY - at) > 2) stop(); };
  const ro = new ResizeObserver(align);
  const stop = () => {
    ro.disconnect(); clearTimeout(timer);
    removeEventListener("scroll", onScroll); removeEventListener("pointerdown", stop);
    settling = null;
  };
  const timer = setTimeout(stop, 2000);
  align();
  ro.observe(document.body);
  addEventListener("scroll", onScroll, { passive: true });
  addEventListener("pointerdown", stop, { passive: true });
  settling = stop;
}

// Mark stage `sec` (a section.stage, or null: none) as the current one in the stage bar.
export function markNav(sec) {
  const links = navLinks();
  const k = sec ? links.findIndex((a) => a.getAttribute("href") === `#${sec.id}`) : -1;
  links.forEach((a, j) => {
    if (j === k) a.setAttribute("aria-current", "step"); else a.removeAttribute("aria-current");
  });
  document.body.dataset.stage = String(links.length || !sec ? k + 1 : stages().indexOf(sec) + 1);
}

// The stage a digit names: its stage-bar link's section, or (no bar) the section of that number.
function numbered(digit) {
  const links = navLinks();
  if (!links.length) return stages()[digit] || null;
  return links[digit] ? document.querySelector(links[digit].getAttribute("href")) : null;
}

function goToStage(s) {
  alignStage(s);
  s.focus({ preventScroll: true });
  markNav(s);
  drawNearby();
}

// `keys`: the page's own keys, { key: handler } (e.g. { h: back, l: forward }). `opener`: a page that
// shows one stage at a time (the forward page) opens them itself while opener.active() is true:
// opener.current() is the open section.stage (null: none), opener.open(section) opens one.
export function stageNavigation(keys = {}, opener = null) {
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    const k = e.key;
    const digit = /^[0-9]$/.test(k) ? (k === "0" ? 9 : +k - 1) : null;
    const one = opener?.active();
    const list = stages();
    const go = (s) => (s ? (one ? opener.open(s) : goToStage(s)) : undefined);
    const at = one ? list.indexOf(opener.current()) : currentStage();
    if (k === "j" || k === "J") go(list[Math.min(list.length - 1, at + 1)]);
    else if (k === "k" || k === "K") go(list[Math.max(0, at - 1)]);
    else if (digit !== null && numbered(digit)) go(numbered(digit));
    else if (Object.hasOwn(keys, k)) keys[k]();
    else return;
    e.preventDefault();
  });
  let frame = 0;
  addEventListener("scroll", () => {
    if (opener?.active()) return;   // one stage at a time: the page marks the open one itself
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => markNav(stages()[currentStage()] || null));
  }, { passive: true });
}
