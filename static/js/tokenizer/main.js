// The tokenizer page: one text, fetched as /api/v1/tokenize + /tokenize/compare while the reader
// types (debounced, older requests aborted), a merge stepper on /tokenize/merges, and the built-in
// tokenizer's training record from /tokenizer/model/merges.
import { apiGet, apiPost, debounced, showError } from "../lib/api.js";
import { $ } from "../lib/dom.js";
import { addDownloads } from "../lib/downloads.js";
import { grouped, visible } from "../lib/format.js";
import { renderTokens, tokenTitle } from "../lib/tokens.js";
import { renderCompare, renderPretokens } from "./views.js";
import { MergeStepper, TrainingReplay } from "./merges.js";
import { pageQuery, setPageQuery } from "../lib/query.js";
import { snapshotSvg } from "../lib/snapshot_svg.js";
const MAX_URL_TEXT = 4000; // longer texts are not copied into the address bar
const MAX_WORD_CHOICES = 300;
const MAX_COMPARE_TOKENS_TEXT = 20000; // longer texts: the comparison shows counts only, no token lists

const state = {
  encoding: $("encoding").value,
  showIds: false,
  allowSpecial: false,
  encodings: new Map(),
  tok: null,
  compare: null,
  word: null,
  mergesKey: null,
};

function readUrl() {
  const q = pageQuery();
  state.showIds = q.get("ids") === "1";
  state.allowSpecial = q.get("allow_special") === "true";
  $("show-ids").checked = state.showIds;
  $("allow-special").checked = state.allowSpecial;
}

function writeUrl() {
  const text = $("text").value;
  const q = new URLSearchParams();
  if (text.length <= MAX_URL_TEXT) q.set("text", text);
  q.set("encoding", state.encoding);
  if (state.showIds) q.set("ids", "1");
  if (state.allowSpecial) q.set("allow_special", "true");
  setPageQuery(q);
}

function describeEncoding() {
  const e = state.encodings.get(state.encoding);
  if (!e) return;
  const specials = e.special_tokens.map((s) => `${s.text} = ${s.id}`).join(", ");
  $("encoding-info").textContent = `${e.name}: ${e.title}. ${grouped(e.vocab_size)} token ids: ${grouped(e.mergeable_tokens)} ` +
    `built from bytes (256 single bytes and ${grouped(e.merges)} merges), special tokens ${specials}` +
    (e.unassigned_ids ? `, and ${grouped(e.unassigned_ids)} ids left unassigned (no token has them).` : ".") +
    (e.runs_as ? ` How it runs: ${e.runs_as}` : "");
  $("pattern").textContent = e.pattern;
}

function drawTokens() {
  if (!state.tok) return;
  renderTokens($("tokens"), state.tok.tokens, { showIds: state.showIds });
  const c = state.tok.counts;
  $("token-counts").textContent = `${grouped(c.characters)} characters · ${grouped(c.bytes)} bytes (UTF-8) · ` +
    `${grouped(c.tokens)} tokens · ${c.characters_per_token === null ? "–" : grouped(c.characters_per_token)} characters per token`;
}

function drawCompare() {
  if (!state.compare) return;
  renderCompare($("compare-table").tBodies[0], $("compare-tokens"), state.compare, state.encoding, state.showIds);
  if (state.compare.encodings.some((e) => e.tokens === null)) {
    const note = document.createElement("p");
    note.className = "muted";
    note.textContent = `Token lists are left out for texts over ${grouped(MAX_COMPARE_TOKENS_TEXT)} characters; the counts above cover the whole text.`;
    $("compare-tokens").replaceChildren(note);
  }
}

// --- the merge stepper ---------------------------------------------------------------------------

const stepper = new MergeStepper({
  pieces: $("merge-pieces"), steps: $("merge-steps"), status: $("merge-status"), final: $("merge-final"),
  play: $("merge-play"), reset: $("merge-reset"), back: $("merge-back"), step: $("merge-step"),
});

function updateWordChoices() {
  const seen = new Set();
  const words = [];
  for (const p of state.tok.pretokens) {
    if (!seen.has(p.text)) { seen.add(p.text); words.push(p.text); }
    if (words.length >= MAX_WORD_CHOICES) break;
  }
  const sel = $("merge-word");
  sel.replaceChildren(...words.map((w) => new Option(`“${visible(w)}”`, w)));
  if (!words.includes(state.word)) {
    // start with the longest pre-token: it has the most merges to watch
    state.word = words.reduce((a, w) => (w.length > a.length ? w : a), words[0] || null);
  }
  if (state.word !== null) sel.value = state.word;
  renderPretokens($("pretokens"), state.tok.pretokens, state.word);
}

async function loadMerges(signal) {
  const word = state.word;
  if (!word) { stepper.clear("Type some text first."); return; }
  const key = JSON.stringify([state.encoding, state.allowSpecial, word]);
  if (key === state.mergesKey) { document.body.dataset.mergesReady = "1"; return; }
  try {
    const resp = await apiPost("/tokenize/merges", { text: word, encoding: state.encoding, allow_special: state.allowSpecial }, signal);
    state.mergesKey = key;
    stepper.show(resp);
    document.body.dataset.mergesReady = "1";
  } catch (err) {
    if (err.name === "AbortError") return;
    state.mergesKey = null;
    stepper.clear(`Cannot replay this pre-token: ${err.message}`);
  }
}
const loadMergesSoon = debounced(loadMerges, 120);

function chooseWord(word) {
  state.word = word;
  $("merge-word").value = word;
  for (const b of $("pretokens").querySelectorAll(".pre.selected")) b.classList.remove("selected");
  for (const b of $("pretokens").querySelectorAll(".pre")) if (b.dataset.text === word) b.classList.add("selected");
  delete document.body.dataset.mergesReady;
  loadMergesSoon();
}

// --- the main fetch ------------------------------------------------------------------------------

async function refresh(signal) {
  const text = $("text").value;
  const dModel = parseInt($("d-model").value, 10);
  try {
    const [tok, cmp] = await Promise.all([
      apiPost("/tokenize", { text, encoding: state.encoding, allow_special: state.allowSpecial }, signal),
      apiPost("/tokenize/compare", {
        text, d_model: Number.isFinite(dModel) ? dModel : 0, allow_special: state.allowSpecial,
        include_tokens: text.length <= MAX_COMPARE_TOKENS_TEXT,
      }, signal),
    ]);
    showError(null);
    state.tok = tok;
    state.compare = cmp;
    drawTokens();
    drawCompare();
    updateWordChoices();
    writeUrl();
    delete document.body.dataset.mergesReady;
    loadMergesSoon();
    document.body.dataset.ready = "1";
  } catch (err) {
    if (err.name !== "AbortError") showError(err);
  }
}
const refreshSoon = debounced(refresh, 250);

function changed() {
  delete document.body.dataset.ready;
  refreshSoon();
}

// --- wiring ---------------------------------------------------------------------------------------

// The pictures of panels 1-4, each with the answer it was drawn from: the text's tokens and its
// pre-tokens (POST /tokenize), one pre-token's merges (POST /tokenize/merges), every vocabulary's
// tokens (POST /tokenize/compare). Their PNG and SVG are the strips as laid out on the page.
function addFigureDownloads() {
  const strip = (id, name, data) => addDownloads($(id), name, data, { svgEl: () => snapshotSvg($(id)) });
  strip("tokens", "tokens", () => state.tok);
  strip("pretokens", "pretokens", () => state.tok && { encoding: state.tok.encoding, pretokens: state.tok.pretokens });
  strip("merge-pieces", "bpe-merges", () => stepper.answer);
  strip("compare-tokens", "tokens-by-encoding", () => state.compare);
}

export function init() {
  readUrl();
  addFigureDownloads();
  $("text").addEventListener("input", changed);
  $("d-model").addEventListener("input", changed);
  $("encoding").addEventListener("change", (e) => {
    state.encoding = e.target.value;
    describeEncoding();
    changed();
  });
  $("allow-special").addEventListener("change", (e) => { state.allowSpecial = e.target.checked; changed(); });
  $("show-ids").addEventListener("change", (e) => {
    state.showIds = e.target.checked;
    drawTokens();
    drawCompare();
    writeUrl();
  });
  $("merge-word").addEventListener("change", (e) => chooseWord(e.target.value));
  $("pretokens").addEventListener("click", (e) => {
    const b = e.target.closest(".pre");
    if (!b) return;
    chooseWord(b.dataset.text);
    $("merges-panel").scrollIntoView({ behavior: "smooth", block: "start" });
  });
  $("tokens").addEventListener("mouseover", (e) => {
    const span = e.target.closest(".tok");
    if (!span || !state.tok) return;
    const t = state.tok.tokens[+span.dataset.index];
    if (t) $("hover-info").textContent = `“${visible(t.text)}” · ${tokenTitle(t)}`;
  });

  apiGet("/encodings").then((body) => {
    for (const e of body.encodings) state.encodings.set(e.name, e);
    describeEncoding();
  }).catch(showError);

  // Only a tokenizer trained by this app has a training record (the page says which kind the model uses).
  if ($("training-panel").dataset.tokenizer === "bpe") {
    const training = new TrainingReplay({
      tbody: $("train-table").tBodies[0], status: $("train-status"), play: $("train-play"), step: $("train-step"),
      reset: $("train-reset"), all: $("train-all"), more: $("train-more"),
    });
    training.load().then(() => {
      training.reveal(10);
      document.body.dataset.trainReady = "1";
    }).catch((err) => { $("train-status").textContent = `No training record: ${err.message}`; });
  }

  refreshSoon();
}
