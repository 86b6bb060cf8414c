// The /genealogy page's "every other number" panel: GET /api/v1/genealogy/texts as it is, one
// table per seed text (the text's number, the server's own where it computes one), the worked
// examples the server redid, and the papers with the year each text gives. Nothing is computed here.
import { $, el } from "../lib/dom.js";
import { decimal, int, pct, visible } from "../lib/format.js";
import { sourceTag } from "./tree.js";

// As the texts write them: whole numbers under 10,000 (years, 4000 steps) plain, larger ones grouped.
function number(v) {
  if (typeof v !== "number") return v;
  return Number.isInteger(v) && Math.abs(v) >= 10000 ? int(v) : decimal(v, 4).replace(/\.?0+$/, "");
}

function factRow(f) {
  return el("tr", { dataset: { fact: f.name } },
    el("td", { text: f.caption }),
    el("td", { class: "num", text: `${number(f.value)}${f.unit ? ` ${f.unit}` : ""}` }),
    el("td", { class: "num", title: f.how || "the server does not redo this one", text: f.computed === null ? "—" : number(f.computed) }),
    el("td", {}, sourceTag(f.source)));
}

function seedTables(facts, seeds) {
  return seeds.filter((s) => facts.some((f) => f.source.seed === s)).map((seed) => {
    const rows = facts.filter((f) => f.source.seed === seed);
    return el("details", { class: "gen-seed", dataset: { seed }, open: true },
      el("summary", { text: `${seed}: ${rows.length} numbers` }),
      el("table", { class: "gen-numbers" },
        el("tr", {}, ["what it is", "the text", "the server", "source"].map((h) => el("th", { text: h }))),
        rows.map(factRow)));
  });
}

function examples(res) {
  const st = res.sentence_tokens;
  const g2 = res.gpt2_tokens;
  const pad = res.padding;
  const adam = res.adam_scale;
  const box = (id, title, source, ...lines) => el("div", { class: "gen-card", id },
    el("h3", { text: title }), lines.map((t) => el("p", { class: "mono", text: t })), sourceTag(source));
  return [
    box("ex-sentence", "One sentence in tokens and in characters", st.source, `${st.encoding}: ${st.token_count} tokens`,
      st.tokens.map(visible).join(" | "), `${st.characters} characters; attention on characters: ${decimal(st.attention_work_ratio, 1)}× the work`),
    box("ex-gpt2", "GPT-2's walkthrough, tokenized", g2.source, `"${g2.text}" → [${g2.ids.join(", ")}]`,
      `targets → [${g2.target_ids.join(", ")}]`, `vocabulary: ${g2.byte_tokens} + ${int(g2.merges)} + ${g2.special_tokens} = ${int(g2.vocab)}`,
      `"${g2.rare_word}" → ${g2.rare_word_pieces.map((p) => `'${p}'`).join(" ")}`),
    box("ex-padding", "Padding a mixed batch", pad.source, `lengths ${pad.lengths.join(", ")} → all ${pad.padded_to}`,
      `${pad.real_tokens} of ${int(pad.padded_tokens)} tokens are text: ${pct(pad.padding_share)} padding`,
      `${pad.sequences} × ${pad.short_length} = ${int(pad.short_batch_tokens)} tokens; ${pad.sequences} × ${pad.long_length} = ${int(pad.long_batch_tokens)}`),
    box("ex-adam", "Adam on gradients far apart", adam.source,
      `[${adam.small_gradients.join(", ")}]: step ${decimal(adam.small_ratio, 3)} × lr`,
      `[${adam.large_gradients.join(", ")}]: step ${decimal(adam.large_ratio, 3)} × lr`,
      `steady ${adam.small_steady} and ${adam.large_steady} (${decimal(adam.orders_of_magnitude, 1)} orders apart): ` +
        `${decimal(adam.small_steady_ratio, 3)} and ${decimal(adam.large_steady_ratio, 3)} × lr`),
  ];
}

// What the texts argue without a number, run by the server.
function runs(res) {
  const w = res.adamw_l2;
  const sm = res.smoothing;
  const r = res.residual;
  const box = (id, title, source, ...lines) => el("div", { class: "gen-card", id },
    el("h3", { text: title }), lines.map((t) => el("p", { class: "mono", text: t })), sourceTag(source));
  const at = [1, 12, 48, r.depth].filter((l, i, all) => l <= r.depth && all.indexOf(l) === i);
  return [
    box("run-adamw", "Weight decay: L2 penalty or AdamW", w.source,
      `${w.steps} steps, lr ${w.lr}, decay ${w.weight_decay}; gradients ±g with no direction`,
      ...w.rows.map((x) => `g = ${x.gradient}: L2 pulls ${pct(x.pulled_l2)} towards 0, AdamW ${pct(x.pulled_adamw)}`)),
    box("run-smoothing", "Smoothing: a worse perplexity, the same answer", sm.source,
      `eps ${sm.epsilon}, V = ${int(sm.vocab)}: the right token gets at most ${decimal(sm.p_true, 4)}`,
      `right, it still pays ${decimal(sm.nll_true, 3)} nats: perplexity ${decimal(sm.perplexity_true, 3)} (one-hot: 1)`,
      `its top token ${sm.top_token_unchanged ? "is still the right one" : "changes"}; no model beats ${decimal(sm.floor, 2)} nats`),
    box("run-residual", "Gradients through a deep stack", r.source,
      `${r.depth} random layers of width ${r.width}, weights N(0, ${r.gain}²/${r.width})`,
      ...at.map((l) => `after ${l}: plain ${r.plain[l - 1].toExponential(1)}, residual ${decimal(r.residual[l - 1], 2)}`)),
  ];
}

function papers(list) {
  return el("details", { class: "gen-seed" }, el("summary", { text: `${list.length} citations, each with the year its text gives` }),
    el("table", { class: "gen-numbers", id: "texts-papers" },
    el("tr", {}, ["year", "who", "what", "cited for", "source"].map((h) => el("th", { text: h }))),
    list.map((p) => el("tr", {}, el("td", { text: String(p.year) }), el("td", { text: p.who }), el("td", { text: p.title }),
      el("td", { text: p.cited_for }), el("td", {}, sourceTag(p.source))))));
}

export function renderTexts(res) {
  $("texts-examples").replaceChildren(...examples(res), ...runs(res));
  $("texts-facts").replaceChildren(...seedTables(res.facts, res.seeds));
  $("texts-papers-box").replaceChildren(papers(res.papers));
  $("texts-panel").dataset.ready = "1";
}
