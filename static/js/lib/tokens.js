// A text's tokens as coloured pieces (the prompt on /, the text on /tokenizer): one span per token,
// coloured in turn; a line break in the text also breaks the line here, and a line too long for its
// box breaks between two tokens (a <wbr> after each), not inside one ("·fo" | "rward").
import { visible } from "./format.js";

const hexPairs = (hex) => (hex.match(/../g) || []).join(" ");

// How a token (or any {id, text, bytes_hex, valid_utf8}) is written on the page.
export function tokenLabel(t, showIds = false) {
  if (showIds) return String(t.id);
  if (t.valid_utf8 === false) return hexPairs(t.bytes_hex);
  return visible(t.text);
}

// A token's tooltip: its position, id, bytes and the characters it covers.
export function tokenTitle(t) {
  return `token #${t.index} · id ${t.id} · bytes ${hexPairs(t.bytes_hex)}` +
    ` · characters ${t.start} up to ${t.end}${t.valid_utf8 ? "" : " · only part of a character"}${t.special ? " · special token" : ""}`;
}

// The spans (each with data-id and data-index) replace what `container` held. opts: showIds (ids
// instead of texts), label(t) (the text; tokenLabel unless given), title(t) (the tooltip; tokenTitle
// unless given).
export function renderTokens(container, tokens, { showIds = false, label = null, title = tokenTitle } = {}) {
  const frag = document.createDocumentFragment();
  for (const t of tokens) {
    const span = document.createElement("span");
    span.className = `tok tok-${t.index % 5}${t.valid_utf8 ? "" : " partial"}${t.special ? " special" : ""}`;
    span.dataset.id = t.id;
    span.dataset.index = t.index;
    span.title = title(t);
    span.textContent = label ? label(t) : tokenLabel(t, showIds);
    frag.appendChild(span);
    frag.appendChild(document.createElement(t.text.endsWith("\n") ? "br" : "wbr"));
  }
  container.replaceChildren(frag);
  container.classList.toggle("ids", !!showIds);
}
