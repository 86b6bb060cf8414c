// Tokens panel: the prompt as coloured token pieces; hover shows id, bytes and position.
import { visible } from "./api.js";

export function renderTokens(container, countEl, tokens) {
  container.replaceChildren();
  tokens.forEach((t) => {
    const span = document.createElement("span");
    span.className = `tok tok-${t.index % 5}`;
    span.dataset.id = t.id;
    span.dataset.index = t.index;
    span.title = `position ${t.index} · id ${t.id} · bytes ${t.bytes_hex}${t.valid_utf8 ? "" : " (part of a character)"}`;
    span.textContent = visible(t.text);
    container.appendChild(span);
    if (t.text.endsWith("\n")) container.appendChild(document.createElement("br"));
  });
  countEl.textContent = `${tokens.length} tokens`;
}
