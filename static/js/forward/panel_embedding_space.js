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

function drawProjection() {
  const toks = projection.tokens;
  const byId = new Map(toks.map((t) => [t.id, t]));
  const evr = projection.explained_variance_ratio || [];
  const mark = (ids, name, color, size, withText) => {
    const pts = [...new Set(ids)].map((i) => byId.get(i)).filter(Boolean);
    return {
      type: "scatter", mode: withText ? "markers+text" : "markers", name,
      x: pts.map((t) => t.x), y: pts.map((t) => t.y), text: pts.map((t) => visible(t.text)),
      customdata: pts.map((t) => t.id), textposition: "top center", textfont: { size: 12, color },
      marker: { size, color, line: { width: 1, color: "#fff" } },
      hovertemplate: `“%{text}” id %{customdata}<br>PC1 %{x}, PC2 %{y}<extra>${name}</extra>`,
    };
  };
  const data = [{
    type: "scatter", mode: "markers", name: "vocabulary",
    x: toks.map((t) => t.x), y: toks.map((t) => t.y), text: toks.map((t) => visible(t.text)),
    customdata: toks.map((t) => t.id),
    marker: { size: 5, color: "#9aa3b5", opacity: 0.55 },
    hovertemplate: "“%{text}” id %{customdata}<br>PC1 %{x}, PC2 %{y}<extra></extra>",
  }, mark(promptIds, "your prompt", OKABE.vermillion, 9, true)];
  if (neighbours) {
    data.push(mark(neighbours.neighbours.map((n) => n.id), "neighbours", OKABE.blue, 9, false));
    data.push(mark([neighbours.id], "searched", OKABE.black, 12, true));
  }
  const pc = (i) => (evr[i] !== undefined ? ` (${(100 * evr[i]).toFixed(1)}% of the variance)` : "");
  draw($("proj-plot"), data, {
    height: 520, showlegend: true, legend: { orientation: "h", y: -0.12 },
    xaxis: { title: { text: `PC1${pc(0)}` }, zeroline: false },
    yaxis: { title: { text: `PC2${pc(1)}` }, zeroline: false },
    margin: { l: 60, r: 10, t: 20, b: 70 },
  }, "embedding-pca");
  const gd = $("proj-plot");
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
