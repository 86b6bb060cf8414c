// The training page: seven panels, each its own module, sharing the run store in runs.js.
import { showError } from "../lib/api.js";
import * as start from "./start.js";
import * as progress from "./progress.js";
import * as replay from "./replay.js";
import * as heads from "./heads.js";
import * as checkpoints from "./checkpoints.js";
import * as experiments from "./experiments.js";
import * as finetune from "./finetune.js";
import * as runs from "./runs.js";
import { pageQuery } from "../lib/query.js";

export function init() {
  window.addEventListener("unhandledrejection", (e) => showError(e.reason));

  replay.init();
  heads.init();
  Promise.all([start.init(), checkpoints.init(), experiments.init(), progress.init(), finetune.init()])
    .then(() => {
      const run = pageQuery().get("run"); // ?run=ID: show that run (as a notebook's embed does)
      return run ? runs.show(run) : undefined;
    })
    .then(() => { document.body.dataset.ready = "1"; })
    .catch((err) => showError(err));
}
