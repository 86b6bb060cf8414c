// Tokenizer page views: pre-token chips and the comparison table (the token spans are lib/tokens.js).
// They only lay out what the API returned; every number shown is a field of an /api/v1 response.
import { grouped, visible } from "../lib/format.js";
import { renderTokens } from "../lib/tokens.js";

export function renderPretokens(container, pretokens, selectedText) {
  const frag = document.createDocumentFragment();
  pretokens.forEach((p, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = `pre tok-${i % 5}${p.text === selectedText ? " selected" : ""}`;
    b.dataset.index = i;
    b.dataset.text = p.text;
    b.title = `pre-token #${i} · characters ${p.start} up to ${p.end} · click to replay its merges`;
    b.textContent = visible(p.text);
    frag.appendChild(b);
    if (p.text.endsWith("\n")) frag.appendChild(document.createElement("br"));
  });
  container.replaceChildren(frag);
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

// The character "encoding": one position per character, so the most attention scores of all.
function characterRow(cmp) {
  const tr = document.createElement("tr");
  tr.dataset.encoding = "characters";
  const b = document.createElement("b");
  b.textContent = "characters";
  const small = document.createElement("div");
  small.className = "muted small";
  small.textContent = "character level: one position per character";
  cell(tr, "").append(b, small);
  cell(tr, "–", "num vocab");
  cell(tr, grouped(cmp.character_level.positions), "num ntokens");
  cell(tr, "–", "num");
  cell(tr, "–", "num");
  cell(tr, "–", "num params");
  cell(tr, grouped(cmp.character_level.attention_scores), "num");
  cell(tr, "–", "num char-ratio");
  return tr;
}

export function renderCompare(tbody, blocks, cmp, current, showIds) {
  const rows = document.createDocumentFragment();
  const grids = document.createDocumentFragment();
  for (const e of cmp.encodings) {
    const tr = document.createElement("tr");
    tr.dataset.encoding = e.encoding;
    if (e.encoding === current) tr.className = "current";
    const name = cell(tr, "");
    const b = document.createElement("b");
    b.textContent = e.encoding;
    const small = document.createElement("div");
    small.className = "muted small";
    small.textContent = e.title;
    name.append(b, small);
    cell(tr, grouped(e.vocab_size), "num vocab");
    cell(tr, grouped(e.counts.tokens), "num ntokens");
    cell(tr, grouped(e.counts.characters_per_token), "num");
    cell(tr, e.tokens_vs_fewest === null ? "–" : `× ${e.tokens_vs_fewest.toFixed(2)}`, "num");
    cell(tr, grouped(e.embedding_params), "num params");
    cell(tr, grouped(e.attention_scores), "num");
    cell(tr, e.character_attention_ratio === null ? "–" : `× ${e.character_attention_ratio.toFixed(1)}`, "num char-ratio");
    rows.appendChild(tr);

    if (e.tokens) {
      const box = document.createElement("div");
      box.className = `compare-block${e.encoding === current ? " current" : ""}`;
      box.dataset.encoding = e.encoding;
      const h = document.createElement("h3");
      h.textContent = `${e.encoding} · ${grouped(e.counts.tokens)} tokens`;
      const toks = document.createElement("div");
      toks.className = "tokens tk-tokens";
      renderTokens(toks, e.tokens, { showIds });
      box.append(h, toks);
      grids.appendChild(box);
    }
  }
  if (cmp.character_level) rows.prepend(characterRow(cmp));
  tbody.replaceChildren(rows);
  blocks.replaceChildren(grids);
}
