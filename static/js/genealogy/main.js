// The /genealogy page: the models the texts narrate, from the 2017 Transformer to InstructGPT.
// One GET /api/v1/genealogy (and /genealogy/worked for the worked examples); every number drawn or written here is one the answer holds.
import { apiGet, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { bindGenealogyPanel, initHistory } from "./history.js";
import { drawLambada, drawNsp, drawParams, drawLossCurve } from "./plots.js";
import { renderTexts } from "./texts.js";
import { renderLambadaSummary, renderTables, renderTree, renderWorked } from "./tree.js";

export async function init() {
  let res = null;
  addDownloads($("lambada-plot"), "gpt2-lambada", () => res && { lambada: res.lambada, lambada_summary: res.lambada_summary, lambada_source: res.lambada_source });
  addDownloads($("params-plot"), "params-by-generation", () => res && { models: res.models.map((m) => ({ key: m.key, name: m.name, params: m.params })) });
  addDownloads($("nsp-plot"), "nsp-ablations", () => res && { tables: res.tables });
  try {
    res = await apiGet("/genealogy");
  } catch (err) {
    showError(err);
    return;
  }
  initHistory();
  renderTree(res.models);
  renderTables(res.tables);
  renderLambadaSummary(res.lambada_summary);
  const plots = { lambada: () => drawLambada(res.lambada, res.lambada_source), params: () => drawParams(res.models), nsp: () => drawNsp(res.tables) };
  await Promise.all(Object.entries(plots).filter(([panel]) => panelShown(panel)).map(([, draw]) => draw()));
  document.body.dataset.ready = "1";
  // the texts' other numbers: one answer, asked for only where its panel is shown
  if (panelShown("texts")) apiGet("/genealogy/texts").then(renderTexts, showError);
  // the worked examples: recomputed by the server at the form's numbers
  bindGenealogyPanel("worked", [["xent-plot", "cross-entropy"]], (w) => {
    renderWorked(w);
    return drawLossCurve(w);
  });
}
