// The /features page: the served model's SAEs (GET /api/v1/saes), the chosen one's quality figures
// beside their baselines, a form that trains a new one in the background, the feature browser
// (list and one feature), the linear probes per layer (probes.js) and steering four ways (steering.js).
// The URL carries the SAE, the feature, the list's search and sort, and the steering form (steer_*).
import { apiGet, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { pageQuery, setPageQuery, whole } from "../lib/query.js";
import { initFeatureBrowser, showFeatureList } from "./browser.js";
import { initProbes } from "./probes.js";
import { initSaeTraining, renderSaeQuality } from "./quality.js";
import { initSteering, markSteeringLayers, steeringQuery } from "./steering.js";

const state = { sae: null, feature: null, q: "", sort: "density", order: "desc" };
let saes = [];

function writeUrl() {
  const q = new URLSearchParams();
  if (state.sae) q.set("sae", state.sae);
  if (state.feature !== null) q.set("feature", state.feature);
  if (state.q) q.set("q", state.q);
  if (state.sort !== "density") q.set("sort", state.sort);
  if (state.order !== "desc") q.set("order", state.order);
  steeringQuery(q);
  setPageQuery(q);
}

function readUrl() {
  const q = pageQuery();
  state.sae = q.get("sae");
  state.feature = whole(q.get("feature"));
  state.q = q.get("q") || "";
  if (["density", "max_act", "mean_act", "index"].includes(q.get("sort"))) state.sort = q.get("sort");
  if (q.get("order") === "asc") state.order = "asc";
}

async function loadSaes(pick = null) {
  ({ saes } = await apiGet("/saes"));
  markSteeringLayers(saes);
  const sel = $("sae-select");
  sel.replaceChildren(...saes.map((s) => new Option(`${s.name} (blocks.${s.layer}, ${s.d_sae.toLocaleString()} features)`, s.name)));
  if (pick) state.sae = pick;
  if (!saes.some((s) => s.name === state.sae)) state.sae = saes.length ? saes[0].name : null;
  sel.value = state.sae || "";
  showSae();
}

function showSae() {
  const sae = saes.find((s) => s.name === state.sae) || null;
  renderSaeQuality(sae);
  document.body.dataset.sae = sae ? sae.name : "";
  showFeatureList(sae, state);
  writeUrl();
}

export async function init() {
  readUrl();
  initSteering({ onUrl: writeUrl });
  initSaeTraining({ onTrained: (name) => loadSaes(name).catch(showError) });
  initFeatureBrowser(state, { onChange: writeUrl });
  initProbes();
  $("sae-select").addEventListener("change", (e) => { state.sae = e.target.value; state.feature = null; showSae(); });
  try {
    await loadSaes();
  } catch (err) {
    showError(err);
  }
  document.body.dataset.ready = "1";
}
