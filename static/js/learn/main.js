// The /learn page: one panel per lesson, each its own module drawing what its GET /api/v1 endpoint
// returns (GET /api/v1/curves lists them), redrawn whenever its form changes. The fields travel in
// the URL (state.js); in embed mode (?embed=PANEL: a notebook's frame, an exported file) only that
// panel is started. body[data-ready] once every started panel has drawn (or said why not).
import { $ } from "../lib/dom.js";
import * as adam from "./adam.js";
import * as backprop from "./backprop.js";
import * as batch from "./batch.js";
import * as bert from "./bert.js";
import * as dropout from "./dropout.js";
import * as embscale from "./embscale.js";
import * as gelu from "./gelu.js";
import * as kvcache from "./kvcache.js";
import * as loss from "./loss.js";
import * as optimizers from "./optimizers.js";
import * as scaling from "./scaling.js";
import * as schedules from "./schedules.js";
import * as shift from "./shift.js";
import * as sizes from "./sizes.js";
import * as smoothing from "./smoothing.js";
import * as softmax from "./softmax.js";
import { restoreFields } from "./state.js";
import * as weightInit from "./weight_init.js";

// In the page's order, top to bottom: [panel name (section NAME-panel), module, its parts that
// say data-ready of their own].
const PANELS = [["schedule", schedules, ["model-schedule-box"]], ["gelu", gelu], ["loss", loss], ["smoothing", smoothing],
  ["softmax", softmax], ["sizes", sizes], ["kv", kvcache], ["scaling", scaling], ["optimizers", optimizers],
  ["init", weightInit], ["dropout", dropout], ["adam", adam], ["embscale", embscale], ["bert", bert], ["shift", shift],
  ["backprop", backprop], ["batch", batch]];

// Resolves once each of `nodes` has data-ready or data-error (lib/forms.js bindForms sets them).
function allDrawn(nodes) {
  const done = () => nodes.every((n) => n.dataset.ready || n.dataset.error);
  return new Promise((resolve) => {
    if (done()) { resolve(); return; }
    const watch = new MutationObserver(() => { if (done()) { watch.disconnect(); resolve(); } });
    watch.observe(document.querySelector("main"), { subtree: true, attributes: true, attributeFilter: ["data-ready", "data-error"] });
  });
}

export function init() {
  restoreFields();
  const embed = document.body.dataset.embed;
  const started = PANELS.filter(([name]) => !embed || name === embed);
  for (const [, panel] of started) panel.init();
  const nodes = started.flatMap(([name, , parts = []]) => [`${name}-panel`, ...parts].map($));
  allDrawn(nodes).then(() => { document.body.dataset.ready = "1"; });
}
