// The /genealogy page: the models the texts narrate, from the 2017 Transformer to InstructGPT.
// One GET /api/v1/genealogy; every number drawn or written here is one the answer holds.
import { apiGet, showError } from "../lib/api.js";
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
  renderTree(res.models);
  renderTables(res.tables);
  renderWorked(res.worked);
  await Promise.all([drawLambada(res.lambada, res.lambada_source), drawParams(res.models), drawNsp(res.tables),
    drawLossCurve(res.worked)]);
  document.body.dataset.ready = "1";
}
