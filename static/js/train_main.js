// The training page: seven panels, each its own module, sharing the run store in train_runs.js.
import { showError } from "./api.js";
import * as start from "./train_start.js";
import * as progress from "./train_progress.js";
import * as replay from "./train_replay.js";
import * as heads from "./train_heads.js";
import * as checkpoints from "./train_checkpoints.js";
import * as experiments from "./train_experiments.js";
import * as finetune from "./train_finetune.js";
import * as runs from "./train_runs.js";

window.addEventListener("unhandledrejection", (e) => showError(e.reason));

replay.init();
heads.init();
Promise.all([start.init(), checkpoints.init(), experiments.init(), progress.init(), finetune.init()])
  .then(() => {
    const run = new URLSearchParams(location.search).get("run"); // ?run=ID: show that run (as a notebook's embed does)
    return run ? runs.show(run) : undefined;
  })
  .then(() => { document.body.dataset.ready = "1"; })
  .catch((err) => showError(err));
