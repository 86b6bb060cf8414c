// Tokenizer page views: token spans, pre-token chips, the comparison table. They only lay out
// what the API returned; every number shown is a field of an /api/v1 response.
import { visible } from "./api.js";

export const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const hexPairs = (hex) => (hex.match(/../g) || []).join(" ");

// How a token (or any {id, text, bytes_hex, valid_utf8}) is written on the page.
export function tokenLabel(t, showIds = false) {
  if (showIds) return String(t.id);
  if (t.valid_utf8 === false) return hexPairs(t.bytes_hex);
  return visible(t.text);
}

export function tokenTitle(t) {
  return `token #${t.index} · id ${t.id} · bytes ${hexPairs(t.bytes_hex)}` +
    ` · characters ${t.start} up to ${t.end}` + (t.valid_utf8 ? "" : " · only part of a character") +
    (t.special ? " · special token" : "");
}

// One span per token, coloured in turn; a line break in the text also breaks the line here.
export function renderTokens(container, tokens, showIds) {
  const frag = document.createDocumentFragment();
  for (const t of tokens) {
    const span = document.createElement("span");
    span.className = `tok tok-${t.index % 5}${t.valid_utf8 ? "" : " partial"}${t.special ? " special" : ""}`;
    span.dataset.id = t.id;
    span.dataset.index = t.index;
    span.title = tokenTitle(t);
    span.textContent = tokenLabel(t, showIds);
    frag.appendChild(span);
    if (t.text.endsWith("\n")) frag.appendChild(document.createElement("br"));
  }
  container.replaceChildren(frag);
  container.classList.toggle("ids", !!showIds);
}

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
  cell(tr, fmt(cmp.character_level.positions), "num ntokens");
  cell(tr, "–", "num");
  cell(tr, "–", "num");
  cell(tr, "–", "num params");
  cell(tr, fmt(cmp.character_level.attention_scores), "num");
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
    cell(tr, fmt(e.vocab_size), "num vocab");
    cell(tr, fmt(e.counts.tokens), "num ntokens");
    cell(tr, fmt(e.counts.characters_per_token), "num");
    cell(tr, e.tokens_vs_fewest === null ? "–" : `× ${e.tokens_vs_fewest.toFixed(2)}`, "num");
    cell(tr, fmt(e.embedding_params), "num params");
    cell(tr, fmt(e.attention_scores), "num");
    cell(tr, e.character_attention_ratio === null ? "–" : `× ${e.character_attention_ratio.toFixed(1)}`, "num char-ratio");
    rows.appendChild(tr);

    if (e.tokens) {
      const box = document.createElement("div");
      box.className = `compare-block${e.encoding === current ? " current" : ""}`;
      box.dataset.encoding = e.encoding;
      const h = document.createElement("h3");
      h.textContent = `${e.encoding} · ${fmt(e.counts.tokens)} tokens`;
      const toks = document.createElement("div");
      toks.className = "tokens tk-tokens";
      renderTokens(toks, e.tokens, showIds);
      box.append(h, toks);
      grids.appendChild(box);
    }
  }
  if (cmp.character_level) rows.prepend(characterRow(cmp));
  tbody.replaceChildren(rows);
  blocks.replaceChildren(grids);
}
