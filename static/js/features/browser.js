// The /features page's feature browser: a page of the SAE's features (GET /api/v1/saes/NAME/features,
// searched and sorted by the server), and one feature (GET .../features/F): its top held-out
// passages shaded per token, its activation histogram, the tokens its direction promotes and
// suppresses, and a link that steers the forward page's generation stepper with it.
import { apiGet, latest, showError } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, grouped, pct, visible } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { passageLines } from "../lib/passages.js";
import { chart, clearPlot } from "../lib/plot.js";
import { snapshotSvg } from "../lib/snapshot_svg.js";

const PAGE = 50;
let sae = null;
let st = null;           // the page's state: sae, feature, q, sort, order
let offset = 0;
let notify = () => {};
let detail = null;       // the feature shown: GET .../features/F
const listSlot = latest();

export function initFeatureBrowser(state, { onChange }) {
  st = state;
  notify = onChange;
  $("feat-q").value = st.q;
  $("feat-sort").value = st.sort;
  $("feat-order").value = st.order;
  $("feat-q").addEventListener("input", () => { st.q = $("feat-q").value.trim(); offset = 0; notify(); listSlot.soon(loadList, 250); });
  for (const id of ["feat-sort", "feat-order"]) {
    $(id).addEventListener("change", () => { st.sort = $("feat-sort").value; st.order = $("feat-order").value; offset = 0; notify(); listSlot.soon(loadList, 0); });
  }
  $("feat-prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); listSlot.soon(loadList, 0); });
  $("feat-next").addEventListener("click", () => { offset += PAGE; listSlot.soon(loadList, 0); });
  $("feat-table").addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-feature]");
    if (row) openFeature(+row.dataset.feature);
  });
  addDownloads($("feat-passages"), "feature-passages", () => detail && { sae: detail.sae, index: detail.index, passages: detail.passages },
    { svgEl: () => snapshotSvg($("feat-passages")) });
  addDownloads($("feat-hist-plot"), "feature-activations", () => detail && { sae: detail.sae, index: detail.index,
    histogram_edges: detail.histogram_edges, histogram_counts: detail.histogram_counts, zeros: detail.zeros });
}

export function showFeatureList(chosen, state) {
  sae = chosen;
  st = state;
  offset = 0;
  if (!sae) {
    $("feat-table").replaceChildren();
    $("feat-count").textContent = "";
    $("feature-panel").hidden = true;
    return;
  }
  listSlot.soon(loadList, 0);
  openFeature(st.feature ?? null);
}

async function loadList(signal) {
  if (!sae) return;
  const q = new URLSearchParams({ q: st.q, sort: st.sort, descending: String(st.order === "desc"), offset, limit: PAGE });
  try {
    const res = await apiGet(`/saes/${encodeURIComponent(sae.name)}/features?${q}`, signal);
    renderList(res);
    if (st.feature === null && res.features.length) openFeature(res.features[0].index);
  } catch (err) {
    if (err.name !== "AbortError") showError(err);
  }
}

function renderList(res) {
  const head = el("tr", {}, ...["feature", "density", "mean", "max", "fires hardest on", "promotes"].map((t) => el("th", { text: t })));
  const rows = res.features.map((f) => el("tr", { "data-feature": f.index, class: f.index === st.feature ? "sel" : "" },
    el("td", { class: "num", text: String(f.index) }),
    el("td", { class: "num", text: pct(f.density, 2) }),
    el("td", { class: "num", text: decimal(f.mean_act, 2) }),
    el("td", { class: "num", text: decimal(f.max_act, 2) }),
    el("td", { class: "mono", text: f.top_tokens.map((t) => `“${visible(t)}”`).join(" ") }),
    el("td", { class: "mono", text: f.promotes.map((t) => `“${visible(t)}”`).join(" ") })));
  $("feat-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  const last = res.offset + res.features.length;
  $("feat-count").textContent = res.total ? `${res.offset + 1}–${last} of ${grouped(res.total)} features` : "no feature matches";
  $("feat-prev").disabled = res.offset === 0;
  $("feat-next").disabled = last >= res.total;
  $("list-panel").dataset.rows = String(res.features.length);
}

async function openFeature(f) {
  const panel = $("feature-panel");
  if (f === null || !sae) { panel.hidden = true; return; }
  st.feature = f;
  notify();
  for (const row of document.querySelectorAll("#feat-table tr[data-feature]")) row.classList.toggle("sel", +row.dataset.feature === f);
  try {
    const d = await apiGet(`/saes/${encodeURIComponent(sae.name)}/features/${f}`);
    panel.hidden = false;
    renderFeature(d);
  } catch (err) {
    showError(err);
  }
}

function renderFeature(d) {
  detail = d;
  $("feat-id").textContent = `${d.index} of ${d.sae}`;
  $("feat-summary").textContent = `fires on ${pct(d.density, 3)} of ${grouped(d.tokens_measured)} held-out tokens` +
    ` (mean ${decimal(d.mean_act, 3)} where it fires, largest ${decimal(d.max_act, 3)}); its direction lives in ${d.hook_name}.`;
  $("feat-steer").href = `/?steer_sae=${encodeURIComponent(d.sae)}&steer_feature=${d.index}#generate-panel`;
  $("feat-passages").replaceChildren(...passageLines(d.passages, d.max_act));
  if (!d.passages.length) setNote($("feat-passages"), "It never fired on the held-out tokens: a dead feature.");
  drawHistogram(d);
  const head = el("tr", {}, el("th", { text: "promotes" }), el("th", { text: "logit / unit" }), el("th", { text: "suppresses" }), el("th", { text: "logit / unit" }));
  $("feat-effects").replaceChildren(el("thead", {}, head), el("tbody", {}, ...d.promoted.map((u, i) => el("tr", {},
    el("td", { class: "mono", text: `“${visible(u.text)}”` }), el("td", { class: "num", text: decimal(u.effect, 3) }),
    el("td", { class: "mono", text: `“${visible(d.suppressed[i].text)}”` }), el("td", { class: "num", text: decimal(d.suppressed[i].effect, 3) })))));
  $("feature-panel").dataset.feature = String(d.index);
}

function drawHistogram(d) {
  const gd = $("feat-hist-plot");
  if (!d.histogram_counts.some((c) => c > 0)) { clearPlot(gd); return; }
  // each bin a bar from its lower edge to its upper edge on a plain activation axis (the API's edges)
  const e = d.histogram_edges;
  const bins = d.histogram_counts.map((_, i) => `${decimal(e[i], 2)}–${decimal(e[i + 1], 2)}`);
  chart(gd, [{ type: "bar", x: e.slice(0, -1), y: d.histogram_counts, width: e.slice(1).map((v, i) => v - e[i]), offset: 0,
    marker: { color: OKABE.vermillion, line: { color: "#fff", width: 1 } }, customdata: bins,
    hovertemplate: "%{customdata}: %{y} tokens<extra></extra>" }],
  { height: 260, xaxis: { title: { text: "activation" } }, yaxis: { title: { text: "tokens" }, type: "log" },
    title: { text: `and ${grouped(d.zeros)} tokens where it is 0`, font: { size: 12 }, x: 0, xanchor: "left" } });
}
