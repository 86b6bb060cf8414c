// The /learn page's URL state: the fields of its forms that differ from the page's own values, each
// under its id (?gelu-xmax=3&loss-log=true), so that a link, a notebook's panel and an exported file
// (lib/export_html.js carries the query) start where the reader left them. In embed mode
// (?embed=PANEL, GET /api/v1/export) a field of that panel may also go by its query name (x_max=3)
// where no other field of the panel has it.
import { pageQuery, setPageQuery } from "../lib/query.js";

const FIELDS = "form.learn-controls input[id], form.learn-controls select[id]";
const own = new Map();   // field id -> the value the page itself gave it
const fieldValue = (f) => (f.type === "checkbox" ? String(f.checked) : f.value);

function setValue(f, v) {
  if (f.type === "checkbox") f.checked = v === "true";
  else f.value = v;
}

// The embedded panel's fields by their query name, where the name is the panel's only such field.
function byQueryName(embed) {
  const named = new Map();
  for (const f of document.querySelectorAll(`#${embed}-panel [data-q]`)) {
    const n = f.dataset.q;
    named.set(n, named.has(n) ? null : f);
  }
  return named;
}

// A form's fields as they are now: what its panel last asked the API for (it asks on the same events).
function writeFields(e) {
  const q = pageQuery();
  for (const f of e.currentTarget.querySelectorAll("input[id], select[id]")) {
    const v = fieldValue(f);
    if (v === own.get(f.id)) q.delete(f.id);
    else q.set(f.id, v);
  }
  setPageQuery(q);
}

// Before the panels first draw: the fields from the URL, and the URL kept up with every edit.
export function restoreFields() {
  const q = pageQuery();
  const fields = [...document.querySelectorAll(FIELDS)];
  for (const f of fields) own.set(f.id, fieldValue(f));
  const embed = document.body.dataset.embed;
  if (embed) for (const [n, f] of byQueryName(embed)) if (f && q.has(n)) setValue(f, q.get(n));
  for (const f of fields) if (q.has(f.id)) setValue(f, q.get(f.id));
  // a button's click too: "Back to the recorded values" fills the fields and asks again
  for (const form of document.querySelectorAll("form.learn-controls")) {
    for (const type of ["input", "change", "click"]) form.addEventListener(type, writeFields);
  }
}
