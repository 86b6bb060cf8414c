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
