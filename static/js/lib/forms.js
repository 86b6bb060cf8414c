// Forms whose inputs are an endpoint's query (the /learn panels): the query they make, and the
// panel redrawn whenever one of them changes.
import { isAbort, latest, showError } from "./api.js";

// Every input/select with a data-q attribute becomes a query field (empty inputs are left out so
// the API's defaults apply). A prefix picks the fields named "prefix:x" and strips the prefix;
// without one, such fields are skipped.
export function formQuery(forms, prefix = null) {
  const q = new URLSearchParams();
  for (const form of [forms].flat()) {
    for (const input of form.querySelectorAll("[data-q]")) {
      let name = input.dataset.q;
      if (prefix !== null) {
        if (!name.startsWith(`${prefix}:`)) continue;
        name = name.slice(prefix.length + 1);
      } else if (name.includes(":")) continue;  // a prefixed field belongs to one curve only
      // a field marked data-raw (a text to tokenize) is sent as typed; others lose their spaces ("2, 1" -> "2,1")
      const v = input.type === "checkbox" ? String(input.checked) : "raw" in input.dataset ? input.value : input.value.replace(/\s+/g, "");
      if (v !== "") q.set(name, v);
    }
  }
  return q;
}

// Run `load(signal)` now and whenever an input of `forms` changes (after `ms` without changes; a
// newer run aborts the older one's requests). The panel gets data-ready="1" after each drawing, and
// data-error with the message while the API refuses the input (the error box says which field).
// Returns a function that runs it again at once.
export function bindForms(panel, forms, load, ms = 250) {
  const slot = latest();
  async function run(signal) {
    delete panel.dataset.ready;
    try {
      await load(signal);
      if (signal.aborted) return;
      delete panel.dataset.error;
      if (document.querySelector("[data-error]") === null) showError(null);
      panel.dataset.ready = "1";
    } catch (err) {
      if (isAbort(err) || signal.aborted) return;
      panel.dataset.error = err.message;
      showError(err);
    }
  }
  const schedule = () => slot.soon(run, ms);
  for (const form of [forms].flat()) {
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    form.addEventListener("submit", (e) => { e.preventDefault(); slot.now(run); });
  }
  slot.now(run);
  return () => slot.now(run);
}
