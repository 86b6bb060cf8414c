// The forward page's first screen: the whole loaded model as one diagram (GET /api/v1/architecture,
// drawn by overview_draw.js), painted with this prompt's numbers at the selected position (the trace's
// `overview` part: what each attention, head and MLP wrote, which earlier token each head read most),
// the next token's probabilities under its own temperature / top-k / top-p (POST /api/v1/next-token at
// that position: the API's numbers, none computed here), and a token's path through the diagram when
// the position moves or a token is added. Every node opens its stage (stage_view.js); the walk is walk.js.
import { apiGet, apiPost, isAbort, latest, showError } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, pct, visible } from "../lib/format.js";
import { seqColour } from "../lib/palette.js";
import { renderTokens } from "../lib/tokens.js";
import { drawOverview, fit } from "./overview_draw.js";
import { playPath } from "./overview_path.js";
import { openStage } from "./stage_view.js";
import { initWalk, renderWalk } from "./walk.js";

let page = null;
let arch = null;
let live = null;        // the trace's overview part
let tokens = [];
let shape = null;       // the layout drawn now
let drawnFor = "";      // the width and layer it was drawn for
let probs = null;       // /next-token's answer on show
let animateNext = false;
const probSlot = latest();

const svg = () => $("overview-svg");

function redraw(force = false) {
  const room = $("overview-svg").parentElement.clientWidth;
  if (!arch || !room) return;   // hidden (another panel embedded alone): drawn once it has a width
  const width = Math.max(480, Math.floor(room));
  const key = `${width}:${page.state.layer}`;
  if (!force && key === drawnFor) return;
  drawnFor = key;
  shape = drawOverview(svg(), arch, width, page.state.layer);
  paint();
}

// The live numbers onto the drawn nodes: a box's tint and bar by what it wrote, a head's colour by its
// write (Viridis, over every head), the strongest head of each block outlined with the token it reads.
function paint() {
  const root = svg();
  if (!arch || !root.childElementCount) return;
  for (const b of root.querySelectorAll(".ov-block")) b.classList.toggle("sel", +b.dataset.layer === page.state.layer);
  if (!live) return;
  const most = Math.max(1e-9, ...live.layers.flatMap((l) => [l.attn_write, l.mlp_write]));
  const headMost = Math.max(1e-9, ...live.layers.flatMap((l) => l.heads.map((h) => h.write)));
  for (const l of live.layers) {
    paintBranch(root, `block.${l.layer}.attn`, l.attn_write / most, `attention wrote ${decimal(l.attn_write, 2)}`);
    paintBranch(root, `block.${l.layer}.mlp`, l.mlp_write / most, mlpText(l));
    for (const h of l.heads) paintHead(root, l, h, headMost);
    for (const e of root.querySelectorAll(`[data-node="block.${l.layer}.mlp"] .ov-expert`))
      e.classList.toggle("chosen", (l.experts || []).includes(+e.dataset.expert));
    const strong = l.strongest[0];
    const g = root.querySelector(`[data-node="block.${l.layer}.attn"]`);
    if (g && strong !== undefined) {
      const h = l.heads[strong];
      g.dataset.strongest = String(strong);
      g.dataset.reads = String(h.key);
      const read = g.querySelector(".ov-read");
      if (read) setFitted(read, `h${strong} reads “${label(h.key)}”`, `h${strong} → “${label(h.key)}”`);
    }
  }
  const top = probs?.candidates?.find((c) => c.kept);
  const pn = root.querySelector('[data-node="probs"] .ov-shape');
  if (pn && top) setFitted(pn, `“${visible(top.text)}” ${pct(top.p_final)}`, `“${visible(top.text)}”`);
}

// What the diagram's marks mean, for this model.
function legend(a) {
  const parts = ["Shade and orange bars: how much each attention and MLP wrote into the stream at the selected token",
    "head cells: each head's write (dark to yellow)", "outlined: the head that wrote most in its block"];
  if (a.blocks.some((b) => b.window)) parts.push("dashed blocks see only their last keys (a window)");
  if (a.blocks.some((b) => b.n_kv_head < b.n_head)) parts.push("heads side by side share a key/value head");
  return `${parts.join("; ")}. Click any part to open it.`;
}

const label = (i) => (tokens[i] ? visible(tokens[i].text) : String(i));

// (a mixture of experts: the chosen ones are its filled cells)
const mlpText = (l) => `wrote ${decimal(l.mlp_write, 2)}`;

function setFitted(t, text, short = null) {
  t.textContent = text;
  if (short) t.dataset.short = short;
  fit(t.parentElement);
}

function paintBranch(root, id, share, text) {
  const g = root.querySelector(`[data-node="${id}"]`);
  if (!g) return;
  g.querySelector(".ov-box").style.fill = `rgba(59, 82, 139, ${(0.06 + 0.5 * share).toFixed(3)})`;
  const bar = g.querySelector(".ov-bar");
  if (bar) {
    const box = g.querySelector(".ov-box");
    bar.setAttribute("width", String(Math.max(1, share * (+box.getAttribute("width") - 10))));
  }
  const val = g.querySelector(".ov-val");
  if (val) setFitted(val, text);
  g.dataset.write = String(share);
}

function paintHead(root, l, h, headMost) {
  const cell = root.querySelector(`[data-node="block.${l.layer}.head.${h.head}"]`);
  if (!cell) return;
  cell.style.fill = seqColour(h.write, 0, headMost);
  cell.classList.toggle("strong", l.strongest[0] === h.head);
  cell.querySelector("title").textContent = `head ${l.layer}.${h.head}: wrote ${decimal(h.write, 2)} into the stream here; ` +
    `reads “${label(h.key)}” (position ${h.key}) most, with weight ${decimal(h.weight, 2)}`;
}

// --- the probabilities ---------------------------------------------------------------------------

function samplingBody() {
  const s = page.state;
  const body = { ...page.prompt(), temperature: s.temperature, show: 8 };
  if (s.top_k !== null) body.top_k = s.top_k;
  if (s.top_p !== null) body.top_p = s.top_p;
  if (live && tokens.length && live.position !== tokens.length - 1) body.position = live.position;
  return body;
}

async function fetchProbs(signal) {
  const list = $("overview-probs");
  list.dataset.state = "loading";
  const body = samplingBody();
  try {
    probs = await apiPost("/next-token", body, signal);
    drawProbs(body);
    paint();
  } catch (err) {
    if (isAbort(err)) return;
    list.dataset.state = "error";
    showError(err);
  }
}

function drawProbs(body) {
  const list = $("overview-probs");
  const top = Math.max(1e-9, ...probs.candidates.map((c) => c.p_final));
  list.replaceChildren(...probs.candidates.map((c) => el("li", {
    class: c.kept ? "" : "cut", dataset: { id: c.id, p: c.p_final },
    title: `id ${c.id} · logit ${decimal(c.logit, 3)} · ${pct(c.p_raw, 2)} at temperature 1${c.kept ? "" : " · removed by the filters"}`,
  }, el("span", { class: "ov-tok mono", text: `“${visible(c.text)}”` }),
  el("span", { class: "ov-pbar", style: `width:${(100 * c.p_final) / top}%` }),
  el("span", { class: "ov-p num", text: pct(c.p_final) }))));
  $("ov-kept").textContent = `${probs.n_kept.toLocaleString("en-US")} of ${probs.vocab_size.toLocaleString("en-US")} tokens kept`;
  list.dataset.settings = JSON.stringify({ temperature: body.temperature, top_k: body.top_k ?? null, top_p: body.top_p ?? null,
    position: body.position ?? null });
  list.dataset.state = "ready";
}

// --- the controls ----------------------------------------------------------------------------------

function showControls() {
  const s = page.state;
  $("ov-temperature").value = String(s.temperature);
  $("ov-top-k").value = String(s.top_k ?? 0);
  $("ov-top-p").value = String(s.top_p ?? 1);
  $("ov-temperature-out").textContent = s.temperature.toFixed(2);
  $("ov-top-k-out").textContent = s.top_k === null ? "off" : String(s.top_k);
  $("ov-top-p-out").textContent = s.top_p === null ? "off" : s.top_p.toFixed(2);
}

function wireControls() {
  const changed = () => {
    const k = +$("ov-top-k").value;
    const p = +$("ov-top-p").value;
    page.setSampling({ temperature: +$("ov-temperature").value, top_k: k > 0 ? k : null, top_p: p < 1 ? p : null }, "overview");
  };
  for (const id of ["ov-temperature", "ov-top-k", "ov-top-p"]) $(id).addEventListener("input", changed);
  $("ov-generate").addEventListener("click", addToken);
}

// Draw one token from the filtered distribution after the last token (POST /api/v1/generate/step, the
// page's seed) and add it to the prompt; its path is played once the new trace is here.
async function addToken() {
  const s = page.state;
  const ids = tokens.map((t) => t.id);
  const body = { ids, temperature: s.temperature, seed: s.seed, step: 0, top: 1 };
  if (s.top_k !== null) body.top_k = s.top_k;
  if (s.top_p !== null) body.top_p = s.top_p;
  $("ov-generate").disabled = true;
  try {
    const res = await apiPost("/generate/step", body);
    animateNext = true;
    page.appendText(res.token.text);
  } catch (err) {
    showError(err);
  } finally {
    $("ov-generate").disabled = false;
  }
}

// --- clicks and keys on the diagram ----------------------------------------------------------------

function activate(target) {
  const node = target.closest("[data-node]");
  if (!node) return;
  const layer = node.dataset.layer;
  if (layer !== undefined) {
    const head = node.dataset.head;
    page.selectHead(+layer, head !== undefined ? +head : page.state.head);
    if (node.closest(".ov-block.compact")) return;   // a compact block's first click makes it the whole one
  }
  openStage(node.dataset.stage, node);
}

function wireDiagram() {
  const root = svg();
  root.addEventListener("click", (e) => activate(e.target));
  root.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" && e.key !== " ") return;
    e.preventDefault();
    activate(e.target);
  });
  $("ov-tokens").addEventListener("click", (e) => {
    const span = e.target.closest(".tok");
    if (span) page.selectPosition(+span.dataset.index);
  });
  new ResizeObserver(() => redraw()).observe(root.parentElement);
}

function markToken(p) {
  const strip = $("ov-tokens");
  for (const s of strip.querySelectorAll(".tok")) s.classList.toggle("sel", +s.dataset.index === p);
  const sel = strip.querySelector(".tok.sel");   // kept in the strip's view (it scrolls past three lines)
  if (sel && (sel.offsetTop < strip.scrollTop || sel.offsetTop + sel.offsetHeight > strip.scrollTop + strip.clientHeight))
    strip.scrollTop = sel.offsetTop - strip.clientHeight / 2;
  $("ov-at").textContent = tokens[p] ? `“${visible(tokens[p].text)}” (position ${p})` : "";
}

export const panel = {
  stage: "overview",
  parts: ["overview"],
  async init(p) {
    page = p;
    p.samplingListeners.push(() => { showControls(); probSlot.soon(fetchProbs, 60); });
    showControls();
    wireControls();
    wireDiagram();
    initWalk(p);
    addDownloads(svg(), "overview", () => ({ architecture: arch, overview: live, next_token: probs }));
    arch = await apiGet("/architecture");
    $("ov-legend").textContent = legend(arch);
    redraw(true);
  },
  render(trace, view) {
    tokens = trace.tokens;
    if (view.promptChanged) renderTokens($("ov-tokens"), tokens);
    markToken(trace.position);
    redraw();
    if (view.parts.includes("overview") && trace.overview) {
      live = trace.overview;
      paint();
      renderWalk(live, arch);
      probSlot.soon(fetchProbs, 0);
      if (animateNext) { animateNext = false; playPath(svg(), shape, trace.position); }
      document.body.dataset.overview = "1";
    } else paint();
  },
  position(sel) {
    markToken(sel.position);
    playPath(svg(), shape, sel.position);
  },
  layer() {
    redraw();
  },
};
