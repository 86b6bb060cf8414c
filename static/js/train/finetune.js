// Panel 7 · Fine-tune, GPT-1's second stage. The task picker (GET /api/v1/finetune/tasks: labels,
// counts per label, examples, which plays are in each half) and a CSV upload (POST
// /finetune/tasks, a bad row refused by number); the form (defaults from FinetuneRequest's schema)
// starts a job (POST /finetune), which is polled (GET /finetune/{id}) and drawn: test accuracy
// against the number of labelled examples per method with chance dashed, a table of the finished
// cells, λ = 0.5 against λ = 0 in words, and, once the classifier is saved, a button that serves it
// (POST /model). The URL holds the task and the job shown.
import { apiGet, apiPost, apiRequest, formatDetail, latest, openapi } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { panelShown } from "../lib/embed.js";
import { decimal, int, pct } from "../lib/format.js";
import { going } from "../lib/jobs.js";
import { OKABE } from "../lib/palette.js";
import { PROB_TICKS, chart } from "../lib/plot.js";
import { refresh as refreshCheckpoints, updateBadge } from "./checkpoints.js";
import { pageQuery, setPageQuery } from "../lib/query.js";

const METHODS = {
  finetune: { words: "fine-tuned (pretrained, + λ·LM loss)", colour: OKABE.blue, symbol: "circle" },
  finetune_no_lm: { words: "fine-tuned, λ = 0", colour: OKABE.sky, symbol: "diamond" },
  scratch: { words: "from scratch (random weights)", colour: OKABE.vermillion, symbol: "square" },
  probe: { words: "linear probe (frozen)", colour: OKABE.green, symbol: "triangle-up" },
};
const FALLBACK = { sizes: [16, 64, 256, 1024, 0], lm_weight: 0.5, seed: 0 };
const POLL_MS = 600;

let tasks = [];
let jobs = [];
let shown = null;        // the job on show (its latest body)
let pollTimer = null;
const pollSlot = latest();

// --- the URL: ?task=...&job=... (other parameters kept) ------------------------------------------

function urlGet(key) {
  return pageQuery().get(key);
}

function urlSet(key, value) {
  const q = pageQuery();
  if (value === null || value === undefined || value === "") q.delete(key); else q.set(key, value);
  setPageQuery(q);
}

function say(node, text, kind = "") {
  node.replaceChildren(...(Array.isArray(text) ? text : [text]));
  node.className = `start-msg ${kind}`;
}

// --- tasks ----------------------------------------------------------------------------------

function playList(title, plays) {
  if (!plays.length) return null;
  return el("p", { class: "muted small" }, el("b", { text: `${title}: ` }), plays.join(", "));
}

function renderTask(name) {
  const t = tasks.find((x) => x.name === name);
  const box = $("ft-task-info");
  if (!t) { box.replaceChildren(); return; }
  box.dataset.task = t.name;
  const counts = el("table", { id: "ft-counts" },
    el("thead", {}, el("tr", {}, el("th", { text: "label" }), el("th", { class: "num", text: "train" }), el("th", { class: "num", text: "test" }))),
    el("tbody", {}, t.labels.map((l) => el("tr", { dataset: { label: l } }, el("td", {}, el("code", { text: l })),
      el("td", { class: "num", text: int(t.train_counts[l] ?? 0) }), el("td", { class: "num", text: int(t.test_counts[l] ?? 0) })))),
    el("tfoot", {}, el("tr", {}, el("th", { text: "all" }), el("th", { class: "num", text: int(t.n_train) }),
      el("th", { class: "num", text: int(t.n_test) }))));
  const short = (s) => (s.length > 160 ? `${s.slice(0, 160)}…` : s);
  box.replaceChildren(
    el("p", { text: t.description }),
    el("p", { class: "muted small", text: `${t.source === "csv" ? "uploaded CSV" : "built in"} · ${t.labels.length} labels · ` +
      `chance (always the test half's most common label): ${pct(t.chance)}` }),
    counts,
    playList("training half from", t.train_plays),
    playList("test half from", t.test_plays),
    playList("never used for training (the corpus's held-out plays)", t.excluded_plays),
    el("details", {}, el("summary", { text: `${t.examples.length} training example${t.examples.length === 1 ? "" : "s"}` }),
      el("ul", { class: "ft-examples" }, t.examples.map((x) => el("li", {}, el("code", { text: x.label }), " ",
        short(x.text), x.text_b ? el("span", { class: "muted", text: ` ‖ ${short(x.text_b)}` }) : null)))));
}

async function loadTasks(select = null) {
  tasks = (await apiGet("/finetune/tasks")).tasks;
  const sel = $("ft-task");
  const want = select || sel.value || urlGet("task");
  sel.replaceChildren(...tasks.map((t) => el("option", { value: t.name, text: `${t.name} · ${t.labels.join(" / ")}` })));
  if (tasks.some((t) => t.name === want)) sel.value = want;
  renderTask(sel.value);
}

async function upload() {
  const msg = $("ft-upload-msg");
  const file = $("ft-upload-file").files[0];
  const show = (text, kind) => { msg.textContent = text; msg.className = `note ${kind}`; msg.hidden = false; };
  if (!file) { show("Choose a CSV file first.", "bad"); return; }
  const fd = new FormData();
  fd.append("file", file);
  fd.append("name", $("ft-upload-name").value.trim() || file.name.replace(/\.[^.]*$/, ""));
  $("ft-upload-btn").disabled = true;
  try {
    const { status, body } = await apiRequest("POST", "/finetune/tasks", fd);
    if (status !== 201 && status !== 200) { show(`Refused: ${formatDetail(body.detail)}`, "bad"); return; }
    show(`Uploaded “${body.name}”: ${int(body.n_train)} training and ${int(body.n_test)} test examples, ` +
      `labels ${body.labels.join(", ")}.`, "ok");
    await loadTasks(body.name);
    urlSet("task", body.name);
  } finally {
    $("ft-upload-btn").disabled = false;
  }
}

// --- the form -------------------------------------------------------------------------------

async function fillDefaults() {
  let d = FALLBACK;
  let methods = null;
  try {
    const s = (await openapi()).components.schemas.FinetuneRequest;
    if (s) {
      const p = s.properties || {};
      d = { sizes: p.sizes?.default ?? FALLBACK.sizes, lm_weight: p.lm_weight?.default ?? FALLBACK.lm_weight, seed: p.seed?.default ?? FALLBACK.seed };
      methods = p.methods?.default ?? null;
    }
  } catch { /* the schema's defaults are a convenience; the page's own stand in */ }
  $("ft-sizes").value = d.sizes.join(", ");
  $("ft-lambda").value = d.lm_weight;
  $("ft-seed").value = d.seed;
  if (methods) for (const box of document.querySelectorAll('input[name="ft-method"]')) box.checked = methods.includes(box.value);
}

// "16, 64, all" -> [16, 64, 0]; anything else is left for the API to refuse by name.
function parseSizes(text) {
  return text.split(/[\s,;]+/).filter(Boolean).map((s) => (/^all$/i.test(s) ? 0 : Number(s)));
}

function request() {
  const body = {
    task: $("ft-task").value,
    methods: [...document.querySelectorAll('input[name="ft-method"]:checked')].map((b) => b.value),
    sizes: parseSizes($("ft-sizes").value),
    lm_weight: Number($("ft-lambda").value),
    seed: Number($("ft-seed").value),
  };
  if ($("ft-steps").value.trim() !== "") body.steps = Number($("ft-steps").value);
  const save = $("ft-save-as").value.trim();
  if (save) body.save_as = save;
  return body;
}

async function start(e) {
  e.preventDefault();
  const msg = $("ft-msg");
  say(msg, "Starting…");
  $("ft-start").disabled = true;
  try {
    const { status, body } = await apiRequest("POST", "/finetune", request());
    if (status >= 300) {
      say(msg, status === 409 ? `${formatDetail(body.detail)} (cancel the running job first)` : formatDetail(body.detail), "bad");
      return;
    }
    say(msg, `Started job ${body.id}: ${body.total_cells} runs, one after another.`, "ok");
    await loadJobs(body.id);
    show(body);
  } finally {
    syncButtons();
  }
}

async function cancel() {
  if (!shown) return;
  $("ft-cancel").disabled = true;
  try {
    show(await apiPost(`/finetune/${shown.id}/cancel`));
    say($("ft-msg"), `Cancelled job ${shown.id}; its finished runs stay.`);
  } catch (err) {
    say($("ft-msg"), `Could not cancel: ${err.message}`, "bad");
  }
}

function syncButtons() {
  const running = jobs.some(going) || going(shown);
  $("ft-start").disabled = !!running;
  $("ft-cancel").disabled = !going(shown);
}

// --- jobs -----------------------------------------------------------------------------------

const jobText = (j) => `${j.id} · ${j.task} · ${j.methods.join(", ")} · sizes ${j.sizes.map((s) => s || "all").join(", ")} · ${j.status}`;

async function loadJobs(select = null) {
  jobs = await apiGet("/finetune");
  const sel = $("ft-job");
  const want = select || (shown?.id) || urlGet("job");
  sel.replaceChildren(...[...jobs].reverse().map((j) => el("option", { value: j.id, text: jobText(j) })));
  if (jobs.some((j) => j.id === want)) sel.value = want;
  return jobs;
}

function show(job) {
  const changed = !shown || shown.id !== job.id;
  // a job that has just saved its classifier: the checkpoints table (panel 5) lists it now
  if (!changed && going(shown) && !going(job) && job.saved_as) refreshCheckpoints();
  shown = job;
  urlSet("job", job.id);
  const opt = [...$("ft-job").options].find((o) => o.value === job.id);
  if (opt) { opt.textContent = jobText(job); $("ft-job").value = job.id; }
  const i = jobs.findIndex((j) => j.id === job.id);
  if (i >= 0) jobs[i] = job;
  render(job, changed);
  syncButtons();
  clearTimeout(pollTimer);
  if (going(job)) pollTimer = setTimeout(() => poll(job.id), POLL_MS);
}

async function poll(id) {
  try {
    const job = await pollSlot.now((signal) => apiGet(`/finetune/${id}`, signal));
    if (shown && shown.id === id) show(job);
  } catch (err) {
    if (err.name === "AbortError") return;
    if (shown && shown.id === id) pollTimer = setTimeout(() => poll(id), 2 * POLL_MS);
  }
}

function render(job, changed) {
  $("ft-empty").hidden = true;
  $("ft-body").hidden = false;
  const panel = $("finetune-panel");
  panel.dataset.job = job.id;
  panel.dataset.status = job.status;
  panel.dataset.cells = String(job.cells.length);
  $("ft-desc").textContent = `job ${job.id} · task ${job.task} (labels ${job.labels.join(", ")}) · pretrained model ` +
    `${job.checkpoint} · ${job.methods.join(", ")} · sizes ${job.sizes.map((s) => s || "all").join(", ")} · λ ${job.lm_weight} · seed ${job.seed}`;
  $("ft-status").textContent = job.status;
  $("ft-status").dataset.status = job.status;
  $("ft-progress").max = job.total_cells || 1;
  $("ft-progress").value = job.cells.length;
  const c = job.current;
  $("ft-stats").textContent = c
    ? `run ${job.cells.length + 1} of ${job.total_cells}: ${c.method} on ${int(c.n_train)} examples, step ${int(c.step)} of ${int(c.steps)} · ${decimal(job.elapsed, 1)} s`
    : `${job.cells.length} of ${job.total_cells} runs finished · ${decimal(job.elapsed, 1)} s`;
  $("ft-error").hidden = !job.error;
  $("ft-error").textContent = job.error || "";
  if (changed || job.cells.length !== (+$("ft-curve").dataset.points || 0) || !job.cells.length) drawCurve(job);
  table(job);
  lambdaNote(job);
  savedBox(job);
}

// Test accuracy against the labelled examples each run had (log axis), one line per method, chance dashed.
function drawCurve(job) {
  const gd = $("ft-curve");
  const xs = job.cells.map((c) => c.n_train);
  const data = job.methods.map((m) => {
    const cells = job.cells.filter((c) => c.method === m).sort((a, b) => a.n_train - b.n_train);
    const w = METHODS[m] || { words: m, colour: OKABE.grey, symbol: "circle" };
    const name = m === "finetune" ? `${w.words.replace("λ", `${job.lm_weight}`)}` : w.words;
    return {
      type: "scatter", mode: "lines+markers", name, x: cells.map((c) => c.n_train), y: cells.map((c) => c.accuracy),
      line: { color: w.colour, width: 2 }, marker: { color: w.colour, size: 8, symbol: w.symbol },
      customdata: cells.map((c) => [c.test_loss, c.steps, c.cached ? " (cached)" : ""]),
      hovertemplate: `${m}<br>%{x} labelled examples<br>test accuracy %{y:.1%}<br>test loss %{customdata[0]:.4f} · %{customdata[1]} steps%{customdata[2]}<extra></extra>`,
    };
  });
  const lo = xs.length ? Math.min(...xs) : 1;
  const hi = xs.length ? Math.max(...xs) : 1024;
  data.push({
    type: "scatter", mode: "lines", name: `chance (${pct(job.chance)})`, x: [lo, hi], y: [job.chance, job.chance],
    line: { color: OKABE.line, dash: "dash", width: 1.5 }, hovertemplate: `chance: always the most common label, ${pct(job.chance)}<extra></extra>`,
  });
  chart(gd, data, {
    height: 380,
    xaxis: { type: "log", title: { text: "labelled training examples (log scale)" },
      ...(xs.length ? { tickmode: "array", tickvals: [...new Set(xs)].sort((a, b) => a - b) } : {}) },
    yaxis: { title: { text: "test accuracy" }, range: [0, 1.02], tickformat: PROB_TICKS },
  });
  gd.dataset.points = String(job.cells.length);
  gd.dataset.traces = String(job.methods.length);
}

function table(job) {
  $("ft-cells").tBodies[0].replaceChildren(...job.cells.map((c) => el("tr", {
    dataset: { method: c.method, size: c.size, nTrain: c.n_train, accuracy: c.accuracy, cached: String(c.cached) } },
  el("td", {}, el("code", { text: c.method })),
  el("td", { class: "num", text: String(c.lm_weight) }),
  el("td", { class: "num", text: c.size ? int(c.size) : "all" }),
  el("td", { class: "num", text: int(c.n_train) }),
  el("td", { class: "num", text: pct(c.accuracy) }),
  el("td", { class: "num", text: decimal(c.test_loss, 4) }),
  el("td", { class: "num", text: decimal(c.train_loss, 4) }),
  el("td", { class: "num", text: int(c.steps) }),
  el("td", { class: "num", text: decimal(c.seconds, 1) }),
  el("td", { text: c.cached ? "yes" : "no" }))));
}

// finetune (λ as asked) against finetune_no_lm (λ = 0), size by size, where both finished.
function lambdaNote(job) {
  const box = $("ft-lambda-note");
  const withLm = job.cells.filter((c) => c.method === "finetune");
  const noLm = new Map(job.cells.filter((c) => c.method === "finetune_no_lm").map((c) => [c.size, c]));
  const pairs = withLm.filter((c) => noLm.has(c.size)).sort((a, b) => a.n_train - b.n_train);
  box.hidden = !pairs.length;
  if (!pairs.length) return;
  const word = (a, b) => (a > b ? "higher" : a < b ? "lower" : "the same");
  box.replaceChildren(el("b", { text: `Keeping the LM loss (λ = ${pairs[0].lm_weight}) against dropping it (λ = 0): ` }),
    pairs.map((c, i) => {
      const o = noLm.get(c.size);
      return `${i ? "; " : ""}with ${int(c.n_train)} examples, ${pct(c.accuracy)} against ${pct(o.accuracy)} (${word(c.accuracy, o.accuracy)})`;
    }).join(""),
    ". GPT-1 reported that the auxiliary loss helped on its larger datasets and not on its smaller ones.");
}

// saved_as may come as NAME or models/NAME: the checkpoint to serve is models/NAME.
const savedCheckpoint = (name) => (name.startsWith("models/") ? name : `models/${name}`);

function savedBox(job) {
  const box = $("ft-saved");
  box.hidden = !job.saved_as;
  if (!job.saved_as) return;
  const name = savedCheckpoint(job.saved_as);
  box.dataset.checkpoint = name;
  $("ft-saved-text").replaceChildren("The fine-tuned classifier is saved as ", el("code", { text: name }), ".");
}

async function serveSaved() {
  const name = $("ft-saved").dataset.checkpoint;
  const msg = $("ft-serve-msg");
  $("ft-serve").disabled = true;
  say(msg, `Loading ${name}…`);
  try {
    const health = await apiPost("/model", { checkpoint: name });
    updateBadge(health);
    say(msg, [`Now serving ${name}. `, el("a", { id: "ft-forward-link", href: "/", text: "See how it labels a text on the forward-pass page →" })], "ok");
    await refreshCheckpoints();
  } catch (err) {
    say(msg, `Could not serve ${name}: ${err.message}`, "bad");
  } finally {
    $("ft-serve").disabled = false;
  }
}

export async function init() {
  $("ft-task").addEventListener("change", (e) => { renderTask(e.target.value); urlSet("task", e.target.value); });
  $("ft-upload-btn").addEventListener("click", () => upload().catch((err) => {
    const msg = $("ft-upload-msg");
    msg.textContent = err.message; msg.className = "note bad"; msg.hidden = false;
  }));
  $("ft-form").addEventListener("submit", start);
  $("ft-cancel").addEventListener("click", cancel);
  $("ft-serve").addEventListener("click", serveSaved);
  $("ft-job").addEventListener("change", async (e) => show(await apiGet(`/finetune/${e.target.value}`)));
  addDownloads($("ft-curve"), "finetune-accuracy", () => shown);
  if (!panelShown("finetune")) return;
  if (!(await openapi()).paths["/api/v1/finetune/tasks"]) {
    // a server without the fine-tuning endpoints: say so, and the rest of the page still works
    $("ft-form").style.display = "none";
    setNote($("ft-note"), "This server does not offer fine-tuning (/api/v1/finetune).");
    return;
  }
  await Promise.all([loadTasks(), fillDefaults(), loadJobs()]);
  const pick = $("ft-job").value;
  if (pick) show(await apiGet(`/finetune/${pick}`));
  else syncButtons();
}
