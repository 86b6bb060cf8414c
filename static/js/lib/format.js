// Numbers and token texts as the pages write them. Nothing here computes a model number: it only
// formats what the API sent.

// Make whitespace in a token visible: a leading/inner space as "·", a newline as "↵", a tab as "→".
export function visible(text) {
  return text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "→").replace(/\r/g, "␍");
}

export function tokenLabels(tokens) {
  return tokens.map((t) => visible(t.text));
}

// x with `digits` decimals, in scientific notation when very small or large; "—" for none.
export function decimal(x, digits = 4) {
  if (x === null || x === undefined) return "—";
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return x.toFixed(digits);
}

// A probability as a percentage; one too small for `digits` decimals (a 50,257-token vocabulary has
// many) keeps two significant digits instead of reading "0.0%".
export function pct(p, digits = 1) {
  if (p === null || p === undefined) return "—";
  const s = (100 * p).toFixed(digits);
  return p > 0 && Number(s) === 0 ? `${(100 * p).toPrecision(2)}%` : `${s}%`;
}

// `digits` significant digits after the first, in scientific notation when very small or large.
export function sci(x, digits = 2) {
  if (x === null || x === undefined) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a < 1e-3 || a >= 1e5 ? x.toExponential(digits) : x.toPrecision(digits + 1);
}

export function fixed(x, digits = 3) {
  return x === null || x === undefined ? "—" : x.toFixed(digits);
}

// A whole number with thousands separators: 1,811,939,328.
export function int(x) {
  return x === null || x === undefined ? "—" : Math.round(x).toLocaleString("en-US");
}

// Seconds as "42 s" or "3 min 5 s".
export function duration(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - 60 * m)} s`;
}

const UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
export function bytes(n) {
  let i = 0;
  let v = n;
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${n} bytes` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${UNITS[i]}`;
}

// A count as the tokenizer page writes it: thousands separators, the decimals it has; "–" for none.
export const grouped = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
