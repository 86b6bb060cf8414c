// The form: the transcoder sets (GET /api/v1/transcoders) in #transcoders, the model's most likely
// next tokens (POST /api/v1/next-token) as buttons that fill the target or the wrong token, and the
// graph's request as the fields say it. A field the API would refuse is sent as typed, so that its
// 422 names it.
import { apiGet, apiPost, isAbort } from "../lib/api.js";
import { $, el, setNote } from "../lib/dom.js";
import { pct, visible } from "../lib/format.js";

const SHOWN = 10;   // next tokens offered

// Fill #transcoders with the served model's sets, `wanted` chosen if it is one; resolves to the sets.
export async function loadSets(wanted) {
  const { sets } = await apiGet("/transcoders");
  const sel = $("transcoders");
  sel.replaceChildren(...sets.map((s) => new Option(`${s.name} (${s.d_transcoder.toLocaleString("en-US")} features per block)`, s.name)));
  sel.value = sets.some((s) => s.name === wanted) ? wanted : (sets[0]?.name ?? "");
  $("run").disabled = !sets.length;
  if (!sets.length) setNote($("form-note"), "The served model has no transcoder set yet: train one with `gptscope transcoders` and reload.");
  return sets;
}

const asNumber = (v) => (Number.isFinite(+v) ? +v : v);

// The graph's request from the form (an empty token: the model's top one; an empty wrong: none).
export function graphBody() {
  const b = { text: $("text").value, transcoders: $("transcoders").value, node_threshold: asNumber($("node-threshold").value) };
  for (const [k, id] of [["token", "token"], ["wrong", "wrong"]]) if ($(id).value.trim() !== "") b[k] = asNumber($(id).value);
  return b;
}

// The choice buttons pressed as the token and wrong fields say.
function markChoices() {
  for (const b of $("choices").querySelectorAll("button")) {
    b.setAttribute("aria-pressed", String(b.dataset.id === $("token").value));
    b.classList.toggle("wrong", b.dataset.id === $("wrong").value);
  }
}

function pick(id) {
  const field = $(document.querySelector("input[name=pick]:checked").value);
  field.value = field.value === String(id) ? "" : String(id);
  markChoices();
}

// The prompt's most likely next tokens as buttons.
export async function loadChoices(signal) {
  try {
    const res = await apiPost("/next-token", { text: $("text").value, show: SHOWN }, signal);
    $("choices").replaceChildren(...res.candidates.map((c) => el("button", { type: "button", class: "secondary", "data-id": c.id,
      title: `id ${c.id} · p ${pct(c.p_raw, 2)} · logit ${c.logit}`, onclick: () => pick(c.id), text: `${visible(c.text)} ${pct(c.p_raw)}` })));
    markChoices();
  } catch (err) {
    if (!isAbort(err)) $("choices").replaceChildren(el("span", { class: "muted", text: err.message }));
  }
}

export function initForm() {
  for (const id of ["token", "wrong"]) $(id).addEventListener("input", markChoices);
}
