// The drawing queue: plots are drawn one per task, the one nearest the viewport first, yielding
// to the browser in between, so a new prompt never freezes the page. Plots far below or above the
// viewport wait until the reader scrolls near them. A task with the same key replaces a stale one.
// body[data-drawn="1"] once nothing near the viewport is waiting.
const tasks = new Map();
let draining = false;
const near = () => innerHeight * 1.5;

export function later(key, node, fn) {
  tasks.set(key, { node, fn });
  document.body.dataset.drawn = "0";
  if (!draining) { draining = true; setTimeout(drain, 0); }
}

// In embed mode (?embed=PANEL: a notebook's frame, an exported panel) the other panels are never
// shown, so their plots never come near.
function distance(node) {
  const embed = document.body.dataset.embed;
  if (embed && !node.closest(`#${embed}-panel`)) return Infinity;
  const stage = node.closest("section.stage");   // a closed stage (the forward page shows one at a time)
  if (stage && !stage.checkVisibility()) return Infinity;
  const r = node.getBoundingClientRect();
  if (r.bottom < 0) return -r.bottom;
  if (r.top > innerHeight) return r.top - innerHeight;
  return 0;
}

function drain() {
  let best = null;
  let bestD = Infinity;
  for (const [k, t] of tasks) {
    const d = distance(t.node);
    if (d < bestD) { best = k; bestD = d; }
  }
  if (best === null || bestD > near()) {
    draining = false;
    document.body.dataset.drawn = "1";
    document.body.dataset.deferred = String(tasks.size);
    return;
  }
  const t = tasks.get(best);
  tasks.delete(best);
  const start = performance.now();
  try { t.fn(); } catch (err) { console.error(err); }
  // a User Timing entry per drawing ("draw <key>", the latest one kept), for a profiler or a test
  performance.clearMeasures(`draw ${best}`);
  performance.measure(`draw ${best}`, { start, end: performance.now() });
  setTimeout(drain, 0);
}

// After a scroll: draw what came near. Called by the page's keyboard navigation right after it
// scrolls, so body[data-drawn] turns "0" at once when something is waiting there.
export function drawNearby() {
  if (draining || !tasks.size) return;
  for (const t of tasks.values()) {
    if (distance(t.node) <= near()) {
      document.body.dataset.drawn = "0";
      draining = true;
      setTimeout(drain, 0);
      return;
    }
  }
}
addEventListener("scroll", drawNearby, { passive: true });
addEventListener("resize", drawNearby);
