// Small multiples on <canvas>: many small maps (every layer x head) as one grid of <canvas> elements,
// one pixel per cell of a map: 144 maps of 128 x 128 weights cost a few hundred DOM nodes, and a
// map is painted only when it scrolls into view (IntersectionObserver). Plotly would build one
// subplot and 16k hover entries per map and freeze the tab for seconds.
import { el } from "./dom.js";
import { decimal } from "./format.js";
import { MASKED, MONO, VIRIDIS, hexRgb, viridis } from "./palette.js";
import { outsideWindow } from "./plot.js";

// Paint one map (rows of values; a missing or null value is a masked cell, and so is a key outside
// a sliding window of `window` keys) into a canvas.
function paintMap(canvas, rows, n, zmin, zmax, window = 0) {
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  const lut = viridis();
  const masked = hexRgb(MASKED);
  const span = zmax - zmin || 1;
  for (let q = 0; q < n; q++) {
    const row = rows[q] || [];
    for (let k = 0; k < n; k++) {
      const v = row[k];
      const o = 4 * (q * n + k);
      if (v === null || v === undefined || outsideWindow(window, q, k)) {
        img.data[o] = masked[0]; img.data[o + 1] = masked[1]; img.data[o + 2] = masked[2];
      } else {
        const i = 3 * Math.max(0, Math.min(255, Math.round((255 * (v - zmin)) / span)));
        img.data[o] = lut[i]; img.data[o + 1] = lut[i + 1]; img.data[o + 2] = lut[i + 2];
      }
      img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

// A colour bar for the grid: Viridis from zmin to zmax, with its title.
function gridColorbar(zmin, zmax, title, maskedName) {
  const stops = VIRIDIS.map(([i, c]) => `${c} ${((100 * i) / 255).toFixed(1)}%`).join(", ");
  return el("div", { class: "hg-bar", "aria-hidden": "true" },
    el("span", { text: title || "" }), el("span", { class: "mono", text: decimal(zmin, 2) }),
    el("span", { class: "hg-ramp", style: `background: linear-gradient(to right, ${stops})` }),
    el("span", { class: "mono", text: decimal(zmax, 2) }),
    maskedName ? el("span", { class: "hg-key", style: `background: ${MASKED}` }) : null,
    maskedName ? el("span", { text: maskedName }) : null);
}

// The grid's cells: the column groups and headers, then per row its header and one canvas (with
// its div.hg-marks) per column.
function gridCells(maps, n, opts) {
  const nR = maps.length;
  const nC = nR ? maps[0].length : 0;
  const cells = [];
  if (opts.colGroups?.length) {
    cells.push(el("span", {}));
    for (const g of opts.colGroups) {
      cells.push(el("span", { class: "hg-group", style: `grid-column: span ${g.to - g.from + 1}`, title: g.title || null,
        dataset: { from: g.from, to: g.to }, text: g.label }));
    }
  }
  cells.push(el("span", {}));
  for (let c = 0; c < nC; c++) cells.push(el("span", { class: "hg-col", text: (opts.colNames || [])[c] ?? String(c) }));
  const canvases = [];
  const overlays = [];
  for (let r = 0; r < nR; r++) {
    cells.push(el("span", { class: "hg-row", text: (opts.rowNames || [])[r] ?? String(r) }));
    overlays.push([]);
    for (let c = 0; c < nC; c++) {
      const cv = el("canvas", { class: "hg-map", width: n, height: n, tabindex: 0, role: "button",
        "aria-label": opts.cellName ? opts.cellName(r, c) : `row ${r}, column ${c}`, dataset: { row: r, col: c } });
      const marks = el("div", { class: "hg-marks" });
      canvases.push(cv);
      overlays[r].push(marks);
      cells.push(el("div", { class: "hg-cell" }, cv, marks));
    }
  }
  return { cells, canvases, overlays };
}

// Hover (the tooltip names the cell under the pointer), click, Enter and Space (opts.onSelect).
function gridEvents(box, grid, tip, maps, n, opts) {
  const at = (ev) => {
    const cv = ev.target.closest?.("canvas.hg-map");
    return cv && box.contains(cv) ? cv : null;
  };
  grid.addEventListener("mousemove", (ev) => {
    const cv = at(ev);
    if (!cv || !opts.hoverText) { tip.hidden = true; return; }
    const r = +cv.dataset.row;
    const c = +cv.dataset.col;
    const rect = cv.getBoundingClientRect();
    const k = Math.min(n - 1, Math.max(0, Math.floor(((ev.clientX - rect.left) / rect.width) * n)));
    const q = Math.min(n - 1, Math.max(0, Math.floor(((ev.clientY - rect.top) / rect.height) * n)));
    const row = maps[r][c][q] || [];
    tip.textContent = opts.hoverText(r, c, q, k, row[k] ?? null);
    tip.hidden = false;
    tip.style.left = `${Math.min(ev.clientX + 14, innerWidth - tip.offsetWidth - 8)}px`;
    tip.style.top = `${ev.clientY + 14}px`;
  });
  grid.addEventListener("mouseleave", () => { tip.hidden = true; });
  const choose = (ev) => {
    const cv = at(ev);
    if (cv && opts.onSelect) opts.onSelect(+cv.dataset.row, +cv.dataset.col);
  };
  grid.addEventListener("click", choose);
  grid.addEventListener("keydown", (ev) => {   // a mark inside a cell is a button: it keeps its own keys
    if ((ev.key === "Enter" || ev.key === " ") && at(ev)) { ev.preventDefault(); choose(ev); }
  });
}

// The grid: maps[r][c] is a T x T map (rows may stop short: a causal model's masked keys).
// opts: rowNames, colNames (the headers), cellName(r, c) (its accessible name), zmin/zmax,
//   colorTitle, maskedName (the colour key's name for masked cells; none without it),
//   hoverText(r, c, q, k, value) (the tooltip's text), onSelect(r, c) (click, Enter or Space),
//   maxCell (the widest a map is drawn, 200 px), window (a sliding window: keys it hides are
//   painted as masked), colGroups ([{ label, title, from, to }]: a bracket over columns from..to,
//   e.g. the query heads sharing one key/value head).
// The box gets data-grid "RxC", data-drawn (+1 per build) and data-painted (maps painted so far);
// each canvas data-row, data-col and data-painted="1" once painted; each sits in a div.hg-cell
// whose div.hg-marks holds small marks a panel adds (marks(r, c)). Returns { select(r, c), marks(r, c) }.
export function heatGrid(box, maps, n, opts = {}) {
  if (box._grid) box._grid.observer.disconnect();
  const nR = maps.length;
  const nC = nR ? maps[0].length : 0;
  const zmin = opts.zmin ?? 0;
  const zmax = opts.zmax ?? 1;
  let painted = 0;
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      const c = e.target;
      observer.unobserve(c);
      paintMap(c, maps[+c.dataset.row][+c.dataset.col], n, zmin, zmax, opts.window || 0);
      c.dataset.painted = "1";
      painted += 1;
    }
    box.dataset.painted = String(painted);
  }, { rootMargin: "300px 0px" });
  const { cells, canvases, overlays } = gridCells(maps, n, opts);
  const grid = el("div", { class: "hg-grid",   // maps at most maxCell (200) px wide
    style: `grid-template-columns: auto repeat(${nC}, minmax(0, 1fr)); max-width: ${nC * ((opts.maxCell || 200) + 6) + 40}px` }, cells);
  const tip = el("div", { class: "hg-tip mono", role: "tooltip", hidden: true });
  box.replaceChildren(gridColorbar(zmin, zmax, opts.colorTitle, opts.maskedName), grid, tip);
  gridEvents(box, grid, tip, maps, n, opts);
  // a map shown at least as large as its cells: crisp pixels; smaller: smoothed
  requestAnimationFrame(() => {
    const w = canvases.length ? canvases[0].clientWidth : 0;
    box.classList.toggle("hg-crisp", w >= n);
  });
  for (const cv of canvases) observer.observe(cv);
  box._grid = { observer };
  box.dataset.grid = `${nR}x${nC}`;
  box.dataset.painted = "0";
  box.dataset.drawn = String((+box.dataset.drawn || 0) + 1);
  return {
    select(r, c) {
      for (const cv of canvases) cv.classList.toggle("sel", +cv.dataset.row === r && +cv.dataset.col === c);
    },
    marks(r, c) {
      return (overlays[r] || [])[c] || null;
    },
  };
}

// The whole grid as one PNG-ready canvas (every map painted, headers written), for the download bar.
export function heatGridImage(maps, n, opts = {}) {
  const nR = maps.length;
  const nC = nR ? maps[0].length : 0;
  const cell = Math.max(n, 48);
  const gap = 6;
  const left = 44;
  const top = 22;
  const out = document.createElement("canvas");
  out.width = left + nC * (cell + gap);
  out.height = top + nR * (cell + gap);
  const ctx = out.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.fillStyle = "#1d1d1f";
  ctx.font = `12px ${MONO}`;
  const one = document.createElement("canvas");
  for (let c = 0; c < nC; c++) ctx.fillText((opts.colNames || [])[c] ?? String(c), left + c * (cell + gap), 14);
  for (let r = 0; r < nR; r++) {
    ctx.fillText((opts.rowNames || [])[r] ?? String(r), 2, top + r * (cell + gap) + cell / 2);
    for (let c = 0; c < nC; c++) {
      paintMap(one, maps[r][c], n, opts.zmin ?? 0, opts.zmax ?? 1, opts.window || 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(one, left + c * (cell + gap), top + r * (cell + gap), cell, cell);
    }
  }
  return out;
}
