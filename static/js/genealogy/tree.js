// The model cards, the NSP tables and the worked examples of /genealogy: written from the API's
// answer as it is (lib/format.js only formats).
import { $, el } from "../lib/dom.js";
import { fixed, int, pct } from "../lib/format.js";

// A source as a small label: the seed file; the cited paper and the passage quoted in its tooltip.
export function sourceTag(source) {
  const title = `${source.paper || "no paper cited here"}${source.quote ? ` · the text: “${source.quote}”` : ""}`;
  return el("span", { class: "gen-src", title, dataset: { seed: source.seed } },
    ` [${source.seed}${source.paper ? " · paper" : ""}]`);
}

function value(v) {
  return typeof v === "number" ? (Number.isInteger(v) ? int(v) : String(v)) : v;
}

function configTable(config) {
  return el("table", { class: "gen-config" }, config.map((c) => el("tr", {},
    el("th", { text: c.name }),
    el("td", { class: c.from_text ? "num" : "num paper-value", text: int(c.value) }),
    el("td", {}, sourceTag(c.source)))));
}

function paramsBlock(p) {
  const rows = [
    ["counted, every parameter", p.total === null ? "—" : int(p.total)],
    ["counted, weights only", int(p.weights_only)],
    ["token embedding", `${int(p.token_embedding)} (${pct(p.embedding_share)})`],
  ];
  if (p.quoted !== null) rows.push(["the text quotes", int(p.quoted)]);
  return [
    el("table", { class: "gen-params" }, rows.map(([k, v]) => el("tr", {}, el("th", { text: k }),
      el("td", { class: "num", text: v })))),
    el("p", { class: "gen-note" }, p.note, p.quoted_source ? sourceTag(p.quoted_source) : null),
  ];
}

function card(m) {
  return el("article", { class: "gen-card", id: `gen-${m.key}`, dataset: { key: m.key } },
    el("h3", {}, `${m.name} `, el("span", { class: "gen-shape", text: `${m.year} · ${m.shape}` })),
    el("ul", { class: "gen-changes" }, m.changes.map((c) => el("li", {},
      el("span", { class: `gen-tag ${c.kind === "architecture" ? "architecture" : "training"}`, text: c.kind }),
      c.what, sourceTag(c.source)))),
    configTable(m.config),
    paramsBlock(m.params),
    el("ul", { class: "gen-facts" }, m.facts.map((f) => el("li", { dataset: { fact: f.name } },
      `${f.caption}: `, el("b", { text: `${value(f.value)}${f.unit ? ` ${f.unit}` : ""}` }), sourceTag(f.source),
      (f.also || []).map(sourceTag)))));
}

export function renderTree(models) {
  $("tree").replaceChildren(...models.map(card));
}

// What the LAMBADA table shows, in the numbers the API computed from it (lambada_summary).
export function renderLambadaSummary(s) {
  const steps = s.step_gains.map((g) => `+${fixed(g, 1)}`).join(", ");
  $("lambada-summary").textContent =
    `From ${s.smallest} to ${s.largest} the quoted size grows ${fixed(s.size_ratio, 1)}×, ` +
    `${fixed(s.tenfold_steps, 2)} tenfold steps, and accuracy rises ${fixed(s.accuracy_gain, 1)} points ` +
    `(${fixed(s.points_per_tenfold, 1)} per tenfold step). ` +
    (s.every_step_gained ? `Each larger size scored higher than the one before it (${steps} points).`
      : `Not every larger size scored higher (${steps} points).`);
}

export function renderTables(tables) {
  $("nsp-tables").replaceChildren(...tables.map((t) => el("table", { id: `table-${t.name}` },
    el("caption", {}, t.caption, sourceTag(t.source)),
    el("tr", {}, el("th", { text: "" }), t.columns.map((c) => el("th", { text: c }))),
    t.rows.map((r) => el("tr", {}, el("th", { text: r.label }), r.values.map((v) => el("td", { text: v.toFixed(1) })))))));
}

export function renderWorked(w) {
  const d = w.perplexity_drop;
  const u = w.underflow;
  const ln = w.layernorm;
  const box = (id, title, source, ...lines) => el("div", { class: "gen-card", id },
    el("h3", { text: title }), lines.map((t) => el("p", { class: "mono", text: t })), sourceTag(source));
  $("worked").replaceChildren(
    box("worked-drop", "Uniform guess to GPT-1", d.source, `ln ${int(d.vocab)} = ${fixed(d.uniform_loss)} nats`,
      `ln ${d.perplexity} = ${fixed(d.pretrained_loss)} nats`, `drop: ${fixed(d.drop)} nats`),
    box("worked-underflow", "Multiplying probabilities", u.source, `${u.p} multiplied ${u.n} times in float32: ${u.product_float32}`,
      `sum of ln ${u.p}: ${fixed(u.log_sum, 2)}`, `so the product is 10^${fixed(u.log10_product, 1)}`),
    box("worked-layernorm", "One LayerNorm entry", ln.source, `x = ${ln.x}, mean = ${ln.mean}, var = ${ln.var}`,
      `std = sqrt(var + ${ln.eps}) = ${fixed(ln.std)}`, `(x - mean) / std = ${fixed(ln.normalised)}`),
    box("worked-losses", "Loss at a probability", w.losses[0].source,
      ...w.losses.map((x) => `-ln ${x.p} = ${fixed(x.loss)} nats (${x.source.seed})`)),
  );
}
