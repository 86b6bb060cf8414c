// The intervention panel: the pinned features, each with a scale at its own position (0 takes it
// out, 1 leaves it, 2 doubles it), run on the real model through POST /api/v1/attribution/intervene;
// its answer drawn: the probabilities of the union of both top-10 lists before and after, the
// target's logit before and after, and the KL divergence. `state.scales` ({id: scale}) holds the
// scales typed; the ones run go to the URL. Every number drawn is the answer's.
import { apiPost } from "../lib/api.js";
import { addDownloads } from "../lib/downloads.js";
import { $, el, setNote } from "../lib/dom.js";
import { decimal, pct, visible } from "../lib/format.js";
import { OKABE } from "../lib/palette.js";
import { chart } from "../lib/plot.js";
import { nodeKey } from "./nodes.js";

let answer = null;   // the last intervention's answer, as drawn

export function initIvPanel() {
  addDownloads($("iv-plot"), "attribution-intervention", () => answer);
}

// The pinned features of `res` (nodes of the answer), in the order pinned.
export function pinnedFeatures(res, pins) {
  const byId = new Map(res.nodes.filter((n) => n.kind === "feature").map((n) => [nodeKey(n), n]));
  return pins.filter((id) => byId.has(id)).map((id) => byId.get(id));
}

export function renderIvTable(res, state) {
  const feats = pinnedFeatures(res, state.pins);
  const head = el("tr", {}, ...["feature", "block", "position", "activation", "scale"].map((t) => el("th", { text: t })));
  const rows = feats.map((n) => {
    const id = nodeKey(n);
    const input = el("input", { type: "number", step: "0.5", min: "-10", max: "10", value: String(state.scales[id] ?? 0),
      class: "iv-scale", "data-id": id, "aria-label": `scale of ${n.label}` });
    input.addEventListener("input", () => { state.scales[id] = input.value; });
    return el("tr", {}, el("td", { class: "mono", text: n.label }), el("td", { class: "num", text: String(n.layer) }),
      el("td", { class: "mono", text: `${n.position} “${visible(res.tokens[n.position].text)}”` }),
      el("td", { class: "num", text: decimal(n.activation, 3) }), el("td", {}, input));
  });
  $("iv-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  $("iv-run").disabled = !feats.length;
  setNote($("iv-note"), feats.length ? "" : "Pin a feature in the graph above to intervene on it.");
}

// The request: every pinned feature at its scale (a scale that is not a number goes as typed, for the
// API to refuse by name).
export function ivBody(res, text, state) {
  const num = (v) => (v === "" || !Number.isFinite(+v) ? v : +v);
  const interventions = pinnedFeatures(res, state.pins).map((n) => ({ layer: n.layer, position: n.position, feature: n.feature,
    scale: num(state.scales[nodeKey(n)] ?? 0) }));
  return { text, transcoders: res.transcoders, interventions, token: res.target.id, top_k: 10 };
}

export async function runIntervention(body, res) {
  answer = await apiPost("/attribution/intervene", body);
  $("iv-result").hidden = false;
  const a = answer;
  const what = body.interventions.map((iv) => `L${iv.layer} #${iv.feature} at ${iv.position} ×${iv.scale}`).join(", ");
  $("iv-stats").textContent = `${what} · target “${visible(res.target.text)}”: logit ${decimal(a.logit_before, 3)} → ` +
    `${decimal(a.logit_after, 3)}, probability ${pct(a.compared.find((c) => c.id === res.target.id)?.before)} → ` +
    `${pct(a.compared.find((c) => c.id === res.target.id)?.after)} · KL(before ‖ after) = ${decimal(a.kl_divergence, 4)} nats`;
  const labels = a.compared.map((c) => `“${visible(c.text)}”`);
  const bar = (name, key, color) => ({ type: "bar", name, x: labels.map((_, i) => i), y: a.compared.map((c) => c[key]),
    customdata: labels, marker: { color }, hovertemplate: `%{customdata} ${name}: %{y:.2%}<extra></extra>` });
  return chart($("iv-plot"), [bar("before", "before", OKABE.grey), bar("after", "after", OKABE.blue)], {
    height: 340, barmode: "group",
    xaxis: { tickmode: "array", tickvals: labels.map((_, i) => i), ticktext: labels, tickangle: -40, title: { text: "next token (both top-10 lists)" } },
    yaxis: { title: { text: "probability" }, tickformat: ".0%", rangemode: "tozero" },
  });
}
