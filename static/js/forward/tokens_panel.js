// Tokens panel: the prompt as coloured token pieces (lib/tokens.js), written as the axes write
// them; hover shows position, id and bytes.
import { visible } from "../lib/format.js";
import { renderTokens } from "../lib/tokens.js";

const title = (t) => `position ${t.index} · id ${t.id} · bytes ${t.bytes_hex}${t.valid_utf8 ? "" : " (part of a character)"}`;

export function showPromptTokens(container, countEl, tokens) {
  renderTokens(container, tokens, { label: (t) => visible(t.text), title });
  countEl.textContent = `${tokens.length} tokens`;
}
