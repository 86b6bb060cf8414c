// The summary panel: the API's findings in words and each series' largest jump, the row of the
// slider's step marked.
import { $, el } from "../lib/dom.js";
import { decimal, int, pct } from "../lib/format.js";

export const summaryView = {
  figures: [],
  render(t, i) {
    const step = t.snapshots[i].step;
    $("summary-text").textContent = t.summary || "The API has no findings in words for this timeline yet.";
    const rows = t.jumps.map((j) => el("tr", { class: j.step === step ? "at" : null },
      el("td", { text: j.series }),
      el("td", { class: "num", text: int(j.from_step) }),
      el("td", { class: "num", text: int(j.step) }),
      el("td", { class: "num", text: decimal(j.before, 4) }),
      el("td", { class: "num", text: decimal(j.after, 4) }),
      el("td", { class: "num", text: pct(j.share) })));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 6, text: "No series rose or fell between two snapshots." })));
    $("jumps-table").querySelector("tbody").replaceChildren(...rows);
  },
};
