// The download bars of a /learn panel (lib/downloads.js): one right above each of its figures,
// whose JSON is the API answer that figure was last drawn from, or the part of it `part` picks.
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";

// figures: [[figure id, file name, part?]]. Returns keep(answer), which the panel calls with each
// answer it draws from and which returns that answer: `const b = keep(await apiGet(...))`.
export function figureBars(figures) {
  let answer = null;
  for (const [id, name, part] of figures) addDownloads($(id), name, () => (answer && part ? part(answer) : answer));
  return (b) => {
    answer = b;
    return b;
  };
}
