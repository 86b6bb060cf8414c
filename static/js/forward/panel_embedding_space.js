// Stage 2: the token-embedding matrix as a 2-D PCA scatter, nearest neighbours by cosine, and the
// learned vs sinusoidal position-similarity matrices. Data: GET /api/v1/embeddings/{projection,neighbours,positions}.
import { apiGet, apiPost, isAbort, latest } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { later } from "../lib/draw_queue.js";
import { decimal, visible } from "../lib/format.js";
import { squareHeatmap } from "../lib/heatmaps.js";
import { OKABE } from "../lib/palette.js";
import { draw } from "../lib/plot.js";

let projection = null;
let positions = null;
let neighbours = null;
let promptIds = [];
const nbSlot = latest();   // one neighbour search at a time: a newer one aborts the older

export function initEmbeddingSpace() {
  $("nb-search").addEventListener("input", () => nbSlot.soon((signal) => findNeighbours($("nb-search").value, null, signal), 250));
  addDownloads($("proj-plot"), "embedding-pca", () => projection);
  if (!$("pos-learned-plot")) return;   // no learned position table (RoPE): the page says so instead
  addDownloads($("pos-learned-plot"), "position-similarity-learned", () => positions);
  addDownloads($("pos-sin-plot"), "position-similarity-sinusoidal", () => positions);
}

export async function loadEmbeddingSpace() {
  const panel = $("embedding-space-panel");
  panel.dataset.state = "loading";
  try {
    if (!projection) projection = await apiGet("/embeddings/projection");
    later("projection", $("proj-plot"), drawProjection);
    if (!$("pos-learned-plot")) { setNote($("space-note"), ""); panel.dataset.state = "ready"; return; }
    if (!positions) positions = await apiGet("/embeddings/positions");
    later("pos-learned", $("pos-learned-plot"), () => drawPositions("learned"));
    later("pos-sin", $("pos-sin-plot"), () => drawPositions("sin"));
    setNote($("space-note"), "");
    panel.dataset.state = "ready";
  } catch (err) {
    setNote($("space-note"), `Could not load the embedding space: ${err.message}`, "error");
    panel.dataset.state = "error";
  }
}

// The prompt's token ids: marked on the scatter.
export function setPromptTokens(tokens) {
  promptIds = tokens.map((t) => t.id);
  if (projection) later("projection", $("proj-plot"), drawProjection);
}

const PROJ = { height: 520, margin: { l: 60, r: 24, t: 20, b: 70 }, font: "12px system-ui, -apple-system, Segoe UI, sans-serif" };
const PLACES = ["top center", "bottom center", "middle right", "middle left"];

// An axis range with Plotly's autorange padding (5% each side), set by hand so that the labels can
// be placed in pixels before the plot is drawn.
function padded(values) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
  const pad = (hi - lo || 1) * 0.05;
  return [lo - pad, hi + pad];
}

// Where each marked token's label goes: the first of PLACES where it overlaps no label placed
// before it (the searched token's first, then the prompt's in order), or none: it is still marked,
// and its hover names it. marks: [{ x, y, text, size }]; returns a place or null for each.
function placeLabels(marks, xr, yr, gd) {
  const w = (gd.clientWidth || 900) - PROJ.margin.l - PROJ.margin.r;
  const h = PROJ.height - PROJ.margin.t - PROJ.margin.b;
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = PROJ.font;
  const taken = [];
  const hits = (b) => taken.some((o) => b.l < o.r + 2 && o.l < b.r + 2 && b.t < o.b + 2 && o.t < b.b + 2);
  return marks.map((m) => {
    const cx = ((m.x - xr[0]) / (xr[1] - xr[0])) * w;
    const cy = ((yr[1] - m.y) / (yr[1] - yr[0])) * h;
    const tw = ctx.measureText(m.text).width + 4;
    const th = 16;
    const r = m.size / 2 + 3;
    const boxes = [[cx - tw / 2, cy - r - th], [cx - tw / 2, cy + r], [cx + r, cy - th / 2], [cx - r - tw, cy - th / 2]]
      .map(([l, t]) => ({ l, t, r: l + tw, b: t + th }));
    const i = boxes.findIndex((b) => b.l >= 0 && b.r <= w && b.t >= 0 && b.b <= h && !hits(b));
    if (i < 0) return null;
    taken.push(boxes[i]);
    return PLACES[i];
  });
}

// A trace of marked tokens; `places` (from placeLabels) labels some of them, the rest by hover alone.
function markTrace(pts, name, color, size, places = null) {
  return {
    type: "scatter", mode: places ? "markers+text" : "markers", name,
    x: pts.map((t) => t.x), y: pts.map((t) => t.y), text: pts.map((t) => visible(t.text)),
    customdata: pts.map((t) => t.id), textfont: { size: 12, color },
    ...(places ? { textposition: places.map((p) => p || "top center"), texttemplate: places.map((p) => (p ? "%{text}" : "")) } : {}),
    marker: { size, color, line: { width: 1, color: "#fff" } },
    hovertemplate: `“%{text}” id %{customdata}<br>PC1 %{x}, PC2 %{y}<extra>${name}</extra>`,
  };
}

function drawProjection() {
  const toks = projection.tokens;
  const byId = new Map(toks.map((t) => [t.id, t]));
  const evr = projection.explained_variance_ratio || [];
  const gd = $("proj-plot");
  const pick = (ids) => [...new Set(ids)].map((i) => byId.get(i)).filter(Boolean);
  const searched = neighbours ? pick([neighbours.id]) : [];
  // the prompt's tokens, the searched one left out (it is labelled in black on its own)
  const prompt = pick(promptIds).filter((t) => !searched.includes(t));
  const xr = padded(toks.map((t) => t.x));
  const yr = padded(toks.map((t) => t.y));
  const places = placeLabels([...searched.map((t) => ({ ...t, size: 12 })), ...prompt.map((t) => ({ ...t, size: 9 }))]
    .map((t) => ({ ...t, text: visible(t.text) })), xr, yr, gd);
  const data = [{
    type: "scatter", mode: "markers", name: "vocabulary",
    x: toks.map((t) => t.x), y: toks.map((t) => t.y), text: toks.map((t) => visible(t.text)),
    customdata: toks.map((t) => t.id),
    marker: { size: 5, color: "#9aa3b5", opacity: 0.55 },
    hovertemplate: "“%{text}” id %{customdata}<br>PC1 %{x}, PC2 %{y}<extra></extra>",
  }, markTrace(prompt, "your prompt", OKABE.vermillion, 9, places.slice(searched.length))];
  if (neighbours) {
    data.push(markTrace(pick(neighbours.neighbours.map((n) => n.id)), "neighbours", OKABE.blue, 9));
    data.push(markTrace(searched, "searched", OKABE.black, 12, places.slice(0, searched.length)));
  }
  const pc = (i) => (evr[i] !== undefined ? ` (${(100 * evr[i]).toFixed(1)}% of the variance)` : "");
  draw(gd, data, {
    height: PROJ.height, showlegend: true, legend: { orientation: "h", y: -0.12 },
    xaxis: { title: { text: `PC1${pc(0)}` }, zeroline: false, range: xr },
    yaxis: { title: { text: `PC2${pc(1)}` }, zeroline: false, range: yr },
    margin: PROJ.margin,
  }, "embedding-pca");
  if (!gd.dataset.clickBound) {
    gd.dataset.clickBound = "1";
    gd.on("plotly_click", (ev) => {
      const p = ev.points?.[0];
      if (p && p.customdata !== undefined) {
        const t = byId.get(p.customdata);
        if (t) { $("nb-search").value = t.text; searchNeighbours(t.text, t.id); }
      }
    });
  }
}

function drawPositions(which) {
  const labels = positions.positions.map(String);
  const opts = { signed: true, limit: 1, colorTitle: "cosine", hoverName: "cosine", maxSide: 460, cell: 3, tickangle: 0, xTitle: "position", yTitle: "position", plain: true };
  if (which === "learned") squareHeatmap($("pos-learned-plot"), positions.learned_similarity, labels, { ...opts, name: "position-similarity-learned" });
  else squareHeatmap($("pos-sin-plot"), positions.sinusoidal_similarity, labels, { ...opts, name: "position-similarity-sinusoidal" });
}

function searchNeighbours(query, byId = null) {
  return nbSlot.now((signal) => findNeighbours(query, byId, signal));
}

// Find the token first (POST /tokenize with the model's own tokenizer), so a word that is not a
// single token gets a friendly choice instead of a refused request; then GET .../neighbours?id=.
async function findNeighbours(query, byId, signal) {
  const status = $("nb-status");
  const list = $("nb-list");
  if (!query && byId === null) { neighbours = null; list.replaceChildren(); status.textContent = ""; if (projection) drawProjection(); return; }
  try {
    let id = byId;
    let pieces = [];
    if (id === null) {
      const tok = await apiPost("/tokenize", { text: query, encoding: "model" }, signal);
      pieces = tok.tokens;
      if (tok.tokens.length === 1) id = tok.tokens[0].id;
      else if (!query.startsWith(" ")) {     // most words are stored with their leading space
        const spaced = await apiPost("/tokenize", { text: ` ${query}`, encoding: "model" }, signal);
        if (spaced.tokens.length === 1) id = spaced.tokens[0].id;
      }
    }
    if (id === null) {
      neighbours = null;
      status.textContent = `“${visible(query)}” is ${pieces.length} tokens in this vocabulary; pick one:`;
      list.replaceChildren(...pieces.map((t) => el("li", {}, el("button", { type: "button", class: "chip", "data-id": t.id,
        onclick: () => { $("nb-search").value = t.text; searchNeighbours(t.text, t.id); } },
      el("span", { class: "mono", text: `“${visible(t.text)}”` }), ` id ${t.id}`))));
      if (projection) drawProjection();
      return;
    }
    const res = await apiGet(`/embeddings/neighbours?id=${id}`, signal);
    neighbours = res;
    status.textContent = `“${visible(res.text)}” (id ${res.id}); closest rows of W_E by cosine:`;
    list.replaceChildren(...res.neighbours.map((n) => el("li", {},
      el("button", { type: "button", class: "chip", "data-id": n.id, title: `id ${n.id}`,
        onclick: () => { $("nb-search").value = n.text; searchNeighbours(n.text, n.id); } },
      el("span", { class: "mono", text: `“${visible(n.text)}”` }), ` ${decimal(n.cosine, 3)}`))));
    $("embedding-space-panel").dataset.neighbours = String(res.id);
    if (projection) drawProjection();
  } catch (err) {
    if (isAbort(err)) return;
    neighbours = null;
    list.replaceChildren();
    status.textContent = err.message;
  }
}

// Stage 2, for main.js's table: its own GET /api/v1/embeddings/* answers, loaded after the first
// prompt's trace; each new prompt's tokens are marked on it.
let loaded = false;
export const panel = {
  stage: "embedding-space",
  parts: [],
  init: () => initEmbeddingSpace(),
  render: (trace, view) => {
    if (!view.promptChanged) return;
    if (!loaded) { loaded = true; loadEmbeddingSpace().then(() => setPromptTokens(trace.tokens)); }
    else setPromptTokens(trace.tokens);
  },
};
