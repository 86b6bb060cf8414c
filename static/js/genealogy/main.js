// The /genealogy page: the models the texts narrate, from the 2017 Transformer to InstructGPT.
// One GET /api/v1/genealogy (and /genealogy/worked for the worked examples); every number drawn or written here is one the answer holds.
import { apiGet, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { bindForms, formQuery } from "../lib/forms.js";
import { initHistory } from "./history.js";
import { drawLambada, drawNsp, drawParams, drawLossCurve } from "./plots.js";
import { renderTables, renderTree, renderWorked } from "./tree.js";

export async function init() {
  let res;
  try {
    res = await apiGet("/genealogy");
  } catch (err) {
    showError(err);
    return;
  }
  initHistory();
  renderTree(res.models);
  renderTables(res.tables);
  await Promise.all([drawLambada(res.lambada, res.lambada_source), drawParams(res.models), drawNsp(res.tables)]);
  document.body.dataset.ready = "1";
  // the worked examples: recomputed by the server at the form's numbers
  bindForms($("worked-panel"), $("worked-form"), async (signal) => {
    const w = await apiGet(`/genealogy/worked?${formQuery($("worked-form"))}`, signal);
    if (signal.aborted) return;
    renderWorked(w);
    await drawLossCurve(w);
  });
}
