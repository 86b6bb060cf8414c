// Stage 11: the SAE features active at the selected position (the trace's sae_features part, for
// the SAE picked here from GET /api/v1/saes), how many fire at every position, and links that open
// a feature on /features or steer the generation stepper (stage 8) with it.
import { apiGet } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { decimal, pct, visible } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart, clearPlot, tokenAxis } from "../lib/plot.js";
import { setSteerFeature } from "./panel_generate.js";

let onPick = () => {};
let onSteer = () => {};
let shown = null;   // the trace's sae_features part on show

export async function initSaeStage({ sae, onSaeChange, onSteerWith }) {
  onPick = onSaeChange;
  onSteer = onSteerWith;
  addDownloads($("sae-active-plot"), "sae-active-features", () => shown);
  addDownloads($("sae-l0-plot"), "sae-features-per-position", () => shown &&
    { sae: shown.sae, hook_name: shown.hook_name, per_position_l0: shown.per_position_l0 });
  const { saes } = await apiGet("/saes");
  const pick = $("sae-pick");
  pick.replaceChildren(...saes.map((s) => new Option(`${s.name} (blocks.${s.layer})`, s.name)));
  const chosen = saes.some((s) => s.name === sae) ? sae : saes[0]?.name ?? null;
  pick.value = chosen || "";
  pick.disabled = !saes.length;
  if (!saes.length) {   // the note alone: no empty figures (the CSS hides them while the panel is "empty")
    setNote($("sae-stage-note"), "The served model has no SAE: train one on /features, then its features show here.");
    $("sae-features-panel").dataset.state = "empty";
  }
  pick.addEventListener("change", () => onPick(pick.value));
  $("sae-active").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-feature]");
    if (b) onSteer(+b.dataset.feature);
  });
  return chosen;
}

export function renderSaeStage(trace, labels) {
  const b = trace.sae_features;
  const panel = $("sae-features-panel");
  shown = b || null;
  if (!b) { panel.dataset.state = "empty"; return; }
  $("sae-tag").textContent = `${b.hook_name} · position ${b.position} “${visible(b.token.text)}”`;
  $("sae-stage-stats").textContent = `${b.l0} features fire at “${visible(b.token.text)}” (position ${b.position}); ` +
    `the stream there has length ${decimal(b.stream_norm, 3)}, and what the SAE leaves unexplained ${decimal(b.error_norm, 3)}.`;
  const names = b.features.map((f) => `#${f.index} ${f.top_tokens.map((t) => visible(t)).join(" ")}`);
  chart($("sae-active-plot"), [{
    type: "bar", orientation: "h", y: names, x: b.features.map((f) => f.activation), marker: { color: OKABE.vermillion },
    customdata: b.features.map((f) => [pct(f.density, 2), decimal(f.max_act, 2), f.promotes.map(visible).join(" ")]),
    hovertemplate: "%{y}<br>activation %{x:.3f} (largest %{customdata[1]})<br>fires on %{customdata[0]} of tokens<br>promotes %{customdata[2]}<extra></extra>",
  }], { height: 120 + 18 * names.length, yaxis: { autorange: "reversed", tickfont: { size: 10 } }, xaxis: { title: { text: "activation" } }, showlegend: false });
  const gd = $("sae-l0-plot");
  if (!labels.length) clearPlot(gd);
  else chart(gd, [{ type: "bar", x: labels.map((_, i) => i), y: b.per_position_l0,
    marker: { color: labels.map((_, i) => (i === b.position ? OKABE.vermillion : OKABE.blue)) },
    customdata: labels, hovertemplate: "position %{x} “%{customdata}”: %{y} features<extra></extra>" }],
  { height: 260, xaxis: tokenAxis(labels, (gd.clientWidth || 600) - 80), yaxis: { title: { text: "L0" }, rangemode: "tozero" }, showlegend: false });
  renderSaeTable(b);
  panel.dataset.state = "ready";
  panel.dataset.features = String(b.features.length);
}

function renderSaeTable(b) {
  const head = el("tr", {}, ...["feature", "activation", "largest", "density", "fires hardest on", "promotes", ""].map((t) => el("th", { text: t })));
  $("sae-active").replaceChildren(el("thead", {}, head), el("tbody", {}, ...b.features.map((f) => el("tr", {},
    el("td", {}, el("a", { href: `/features?sae=${encodeURIComponent(b.sae)}&feature=${f.index}`, text: `#${f.index}` })),
    el("td", { class: "num", text: decimal(f.activation, 3) }),
    el("td", { class: "num", text: decimal(f.max_act, 3) }),
    el("td", { class: "num", text: pct(f.density, 2) }),
    el("td", { class: "mono", text: f.top_tokens.map((t) => `“${visible(t)}”`).join(" ") }),
    el("td", { class: "mono", text: f.promotes.map((t) => `“${visible(t)}”`).join(" ") }),
    el("td", {}, el("button", { type: "button", class: "secondary", "data-feature": f.index, text: "steer with it" }))))));
}

// Stage 11, for main.js's table.
export const panel = {
  stage: "sae-features",
  parts: ["sae_features"],
  init: (page) => initSaeStage({ sae: page.state.sae,
    onSaeChange: (name) => { page.state.sae = name; page.writeUrl(); page.requestForward(["sae_features"], 0); },
    onSteerWith: (f) => { setSteerFeature(f); $("generate-panel").scrollIntoView({ block: "start" }); } }),
  render: (trace, view) => { if (view.parts.includes("sae_features")) renderSaeStage(trace, view.labels); },
};
