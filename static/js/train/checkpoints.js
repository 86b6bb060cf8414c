// Panel 5 · Checkpoints: GET /api/v1/checkpoints grouped by run (final weights + snapshots), which
// one is loaded, "Serve" buttons (POST /api/v1/model) and "export" buttons (POST /api/v1/export/model:
// a Hugging Face folder as a zip, or a GGUF file, downloaded once the job is done). The header's model
// badge follows.
import { apiGet, apiPost } from "../lib/api.js";
import { $, el } from "../lib/dom.js";
import { decimal, int } from "../lib/format.js";
import * as runs from "./runs.js";

let busy = false;

function group(list) {
  const byRun = new Map();
  for (const c of list) {
    const run = c.name.split("/")[0];
    if (!byRun.has(run)) byRun.set(run, { run, final: null, snaps: [] });
    const g = byRun.get(run);
    if (c.name.includes("/")) g.snaps.push(c); else g.final = c;
  }
  return byRun;
}

function serveButton(name, loaded, text = "Serve this") {
  return el("button", {
    type: "button", class: loaded ? "serve loaded" : "serve", "data-checkpoint": name, disabled: loaded || busy,
    title: loaded ? "this checkpoint is the one the app serves now" : `serve ${name} on every page`,
    onclick: () => serve(name), text: loaded ? "✓ serving" : text,
  });
}

// "compare…": /compare with this checkpoint as a and the served one as b.
let served = "builtin";
function compareLink(name) {
  const a = el("a", { class: "compare-link small", "data-checkpoint": name, text: "compare…",
    title: `compare ${name} with the served model on one text` });
  a.href = `/compare?${new URLSearchParams({ a: name, b: served })}`;
  return a;
}

// picked: run -> the snapshot the user chose in its select before a refresh rebuilt the table (a
// refresh comes whenever a run's status or snapshots change, and must not undo the user's choice;
// a select the user never touched follows the served snapshot)
function snapCell(g, picked) {
  if (!g.snaps.length) return el("td", { class: "muted", text: g.run === "builtin" ? "" : "none" });
  const loaded = g.snaps.find((s) => s.loaded);
  const sel = el("select", { "aria-label": `snapshot of ${g.run}`, class: "snap-select", dataset: { run: g.run } },
    g.snaps.map((s) => el("option", { value: s.name, text: `step ${s.step}${s.val_loss === null ? "" : ` · val ${decimal(s.val_loss, 3)}`}` })));
  const before = picked.get(g.run);
  if (before && g.snaps.some((s) => s.name === before)) [sel.value, sel.dataset.picked] = [before, "1"];
  else if (loaded) sel.value = loaded.name;
  const box = el("div", { class: "snap-cell" }, sel);
  const cell = el("td", {}, box);
  const btn = () => serveButton(sel.value, g.snaps.some((s) => s.loaded && s.name === sel.value), "Serve snapshot");
  let b = btn();
  let link = compareLink(sel.value);
  box.append(b, link);
  sel.addEventListener("change", () => {
    sel.dataset.picked = "1";
    const nb = btn();
    const nl = compareLink(sel.value);
    b.replaceWith(nb);
    link.replaceWith(nl);
    [b, link] = [nb, nl];
  });
  return cell;
}

// "HF" / "GGUF": the checkpoint written for transformers or llama.cpp, as a job; the file downloads when done.
function exportButtons(name) {
  return el("span", { class: "export-buttons small" }, ["hf", "gguf"].map((format) => el("button", {
    type: "button", class: "export-model", "data-export": name, "data-format": format,
    title: format === "hf" ? `download ${name} as a Hugging Face folder (zip) for transformers, with its SAEs, transcoders and lenses`
      : `download ${name} as one GGUF file for llama.cpp`,
    text: format === "hf" ? "⤓ HF" : "⤓ GGUF", onclick: () => exportModel(name, format),
  })));
}

async function exportModel(name, format) {
  const msg = $("ckpt-msg");
  msg.className = "start-msg";
  msg.textContent = `Exporting ${name} as ${format === "hf" ? "a Hugging Face folder" : "a GGUF file"}…`;
  try {
    let job = await apiPost("/export/model", { checkpoint: name, format });
    while (!["done", "failed", "cancelled"].includes(job.status)) {
      await new Promise((r) => setTimeout(r, 400));
      job = await apiGet(`/export/model/jobs/${job.id}`);
      msg.textContent = `Exporting ${name}: step ${job.done} of ${job.total}${job.status === "queued" ? " (waiting for memory)" : ""}…`;
    }
    if (job.status !== "done") throw new Error(job.error || job.status);
    const r = job.result;
    const link = el("a", { href: r.download, download: "", text: "download again" });
    msg.className = "start-msg ok";
    msg.replaceChildren(`${name} written as ${r.architecture} (${r.files.length} files). `, link);
    link.click();
  } catch (err) {
    msg.className = "start-msg bad";
    msg.textContent = `Could not export ${name}: ${err.message}`;
  }
}

function row(g, statusById, picked) {
  const c = g.final || g.snaps[0];
  const st = statusById.get(g.run);
  const label = runs.getRun(g.run)?.label;
  const what = g.run === "builtin" ? "the model the app starts with"
    : [label, st && `${st.status}`, st && runs.describeRequest(st.request)].filter(Boolean).join(" · ");
  const loaded = (g.final?.loaded) || g.snaps.some((s) => s.loaded);
  return el("tr", { class: loaded ? "loaded-row" : "", dataset: { run: g.run } },
    el("td", {}, el("code", { text: g.run }), el("div", { class: "muted small", text: what })),
    el("td", { text: c.corpus }),
    el("td", { class: "num", text: g.final ? int(g.final.step) : "—" }),
    el("td", { class: "num", text: int(c.params) }),
    el("td", { class: "num", text: g.final && g.final.val_loss !== null ? decimal(g.final.val_loss, 4) : "—" }),
    el("td", {}, g.final ? [serveButton(g.final.name, g.final.loaded), " ", compareLink(g.final.name), " ", exportButtons(g.final.name)]
      : el("span", { class: "muted small", text: st && st.status === "queued" ? "queued: waiting for memory" : st && st.status === "running" ? "still training" : "no final checkpoint" })),
    snapCell(g, picked));
}

export async function refresh() {
  const [list, status] = await Promise.all([apiGet("/checkpoints"), apiGet("/training")]);
  const order = new Map(status.map((s, i) => [s.id, i]));
  const statusById = new Map(status.map((s) => [s.id, s]));
  const groups = [...new Set(list.map((c) => c.name.split("/")[0]))];
  // builtin first, then the newest run first
  groups.sort((a, b) => (a === "builtin" ? -1 : b === "builtin" ? 1 : (order.get(b) ?? -1) - (order.get(a) ?? -1)));
  served = list.find((c) => c.loaded)?.name || "builtin";
  const byRun = group(list);
  const picked = new Map([...$("ckpt-table").querySelectorAll("select.snap-select[data-picked]")].map((s) => [s.dataset.run, s.value]));
  $("ckpt-table").tBodies[0].replaceChildren(...groups.map((r) => row(byRun.get(r), statusById, picked)));
  $("ckpt-table").dataset.loaded = list.find((c) => c.loaded)?.name || "";
  return list;
}

// The header's model badge, from POST /model's answer (also used by the fine-tune panel).
export function updateBadge(health) {
  const i = health.info;
  const badge = document.querySelector(".model-badge");
  if (!badge) return;
  badge.title = i.command;
  badge.replaceChildren("model: ", el("b", { text: health.model }),
    ` · ${i.n_layer} layers · ${i.n_head} heads · d=${i.d_model} · vocab ${int(i.vocab_size)} · ${int(i.params)} parameters`);
}

async function serve(name) {
  const msg = $("ckpt-msg");
  busy = true;
  msg.className = "start-msg";
  msg.textContent = `Loading ${name}…`;
  try {
    const health = await apiPost("/model", { checkpoint: name });
    updateBadge(health);
    msg.className = "start-msg ok";
    msg.replaceChildren(`Now serving ${name} (“${health.model}”, ${int(health.info.params)} parameters). `,
      el("a", { href: "/", text: "Look inside it on the forward-pass page →" }));
  } catch (err) {
    msg.className = "start-msg bad";
    msg.textContent = `Could not serve ${name}: ${err.message}`;
  } finally {
    busy = false;
    await refresh();
  }
}

export async function init() {
  runs.on("run-finished", refresh);
  // a new snapshot or a new status (done, cancelled) changes what can be served
  const seen = new Map();
  runs.on("run-update", (run) => {
    const sig = `${run.body.status}|${run.body.snapshots.length}`;
    if (seen.get(run.id) !== sig) { seen.set(run.id, sig); refresh(); }
  });
  await refresh();
}
