// A fact of the seed texts where a panel teaches it: the app's caption, then the text's own words as
// the API serves them (GET /api/v1/genealogy/texts, a model card's fact, or a field of the panel's answer),
// with the seed they come from and the paper it credits. Nothing here is a text's number.
import { el } from "./dom.js";

// One fact as a small block: "caption: value", the quote in quotation marks, and "seed · paper".
export function textFactBlock(fact, id) {
  const src = fact.source;
  const value = `${fact.value}${fact.unit ? ` ${fact.unit}` : ""}`;
  return el("div", { class: "text-fact", id, dataset: { fact: fact.name } },
    el("p", {}, `${fact.caption}: `, el("b", { text: value })),
    el("blockquote", { class: "text-quote", text: `“${src.quote}”` }),
    el("p", { class: "muted", text: `${src.seed}${src.paper ? ` · ${src.paper}` : " · no paper cited for it"}` }));
}

// The texts' fact named `name` from a list of them (the facts of /genealogy/texts, or a panel's `texts`).
export function findTextFact(facts, name) {
  return facts.find((f) => f.name === name) || null;
}
