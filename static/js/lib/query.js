// Numbers read from a page's query string (or a form field): `dflt` when the text is not one.

// A whole number >= 0.
export function whole(v, dflt = null) {
  const n = parseInt(v, 10);
  return Number.isFinite(n) && n >= 0 ? n : dflt;
}

// Any finite number.
export function real(v, dflt = null) {
  const n = parseFloat(v);
  return Number.isFinite(n) ? n : dflt;
}

// The page's URL state. An exported panel (lib/export_html.js) carries the query it was saved
// with, since its document (a file, a notebook's frame) has none of its own.
export function pageQuery() {
  return new URLSearchParams(globalThis.__gptscopeReplay?.search ?? location.search);
}

// Write the page's URL state (`q`: URLSearchParams); an empty one leaves the bare path.
export function setPageQuery(q) {
  const s = String(q);
  const replay = globalThis.__gptscopeReplay;
  if (replay) {
    replay.search = s ? `?${s}` : "";
    return;   // a frame made from text has no URL to change
  }
  history.replaceState(null, "", s ? `?${s}` : location.pathname);
}
