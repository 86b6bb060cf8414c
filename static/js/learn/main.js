// The /learn page: one panel per lesson, each its own module drawing what its GET /api/v1 endpoint
// returns (GET /api/v1/curves lists them), redrawn whenever its form changes.
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
import * as weightInit from "./weight_init.js";

// In the page's order, top to bottom.
const PANELS = [schedules, gelu, loss, smoothing, softmax, sizes, kvcache, scaling, optimizers, weightInit, dropout,
  adam, embscale, bert, shift, backprop, batch];

export function init() {
  for (const panel of PANELS) panel.init();
}
