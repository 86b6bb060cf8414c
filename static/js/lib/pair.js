// A clean/corrupted prompt pair as /patch and /circuits show it: the ready-made pairs
// (GET /api/v1/patch/pairs) in the form's #pair select, the two prompts' tokens with the positions
// where they differ outlined, the metric in words, and the two runs' most likely next tokens, a click
// on one choosing the answer (clean) or the wrong token (corrupted). Every number is the answer's.
import { ApiError, apiGet } from "./api.js";
import { $, el } from "./dom.js";
import { pct, visible } from "./format.js";
import { renderTokens } from "./tokens.js";

// The two prompts are one text: a model with no ready-made pair starts so, and the page asks for a
// corrupted prompt (#pair-note) where the API refuses the pair for that alone (a model whose block
// the analysis cannot run at all is refused first, and that refusal is shown as any error is).
const samePrompts = () => $("clean").value === $("corrupted").value;
export const askedForPair = (err) => err instanceof ApiError && err.status === 422 && samePrompts()
  && Array.isArray(err.detail) && err.detail.every((d) => (d.loc || []).at(-1) === "corrupted");
const ASK = "No ready-made pair fits this model's tokenizer: change a token or two of the corrupted prompt, keeping " +
  "as many tokens as the clean one, and the sweep starts as you type.";

// Fill #pair with the ready-made pairs (the one the #clean and #corrupted prompts hold selected) and
// its description in #pair-note (or, while the prompts are one text, what to do); choosing one puts
// its prompts in the form and calls onPick(pair).
export async function loadPairs(onPick) {
  const pairs = await apiGet("/patch/pairs");
  const sel = $("pair");
  sel.append(...pairs.map((p) => new Option(`${p.name} (${p.tokens} tokens)`, p.name)));
  const same = pairs.find((p) => p.clean === $("clean").value && p.corrupted === $("corrupted").value);
  sel.value = same ? same.name : "";
  const note = () => {
    const p = pairs.find((x) => x.name === sel.value);
    $("pair-note").textContent = p ? p.description : samePrompts() ? ASK : "";
  };
  note();
  for (const id of ["clean", "corrupted"]) $(id).addEventListener("input", note);
  sel.addEventListener("change", () => {
    const p = pairs.find((x) => x.name === sel.value);
    note();
    if (!p) return;
    $("clean").value = p.clean;
    $("corrupted").value = p.corrupted;
    onPick(p);
  });
}

// The metric of an answer (`metric`: PatchMetric) in words: logit(“·Caesar”) − logit(“·Edward”).
export function metricWords(m) {
  return m.kind === "logit_diff" ? `logit(“${visible(m.answer.text)}”) − logit(“${visible(m.wrong.text)}”)` : `log p(“${visible(m.answer.text)}”)`;
}

// The answer's two prompts in #clean-tokens and #corrupted-tokens, the differing positions outlined,
// and its runs' next tokens in #clean-top and #corrupted-top as buttons (the chosen ones pressed).
export function renderPair(res, { onAnswer, onWrong }) {
  const differs = new Set(res.differs);
  const mark = (box, tokens) => {
    renderTokens(box, tokens);
    for (const span of box.querySelectorAll(".tok")) {
      if (differs.has(+span.dataset.index)) { span.classList.add("differs"); span.title += " · differs between the prompts"; }
    }
  };
  mark($("clean-tokens"), res.clean_tokens);
  mark($("corrupted-tokens"), res.corrupted_tokens);
  const choices = (box, top, chosen, pick) => box.replaceChildren(...top.map((t) => el("button", {
    type: "button", class: "secondary", "aria-pressed": String(t.id === chosen), "data-id": t.id,
    title: `id ${t.id} · p ${pct(t.prob, 2)} · logit ${t.logit}`, onclick: () => pick(t.id), text: `${visible(t.text)} ${pct(t.prob)}`,
  })));
  choices($("clean-top"), res.clean_top, res.metric.answer.id, onAnswer);
  choices($("corrupted-top"), res.corrupted_top, res.metric.wrong ? res.metric.wrong.id : null, onWrong);
}
