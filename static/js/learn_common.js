// Shared helpers for the /learn panels: colours, number formatting, plot defaults, and a form
// binder that refetches a panel's endpoint when an input changes. Nothing here computes a number
// the API does not return: it formats and lays out what came back.
import { apiGet, showError } from "./api.js";

// Okabe–Ito: distinguishable with the common colour-vision deficiencies.
export const C = {
  blue: "#0072B2", orange: "#E69F00", green: "#009E73", sky: "#56B4E9", vermillion: "#D55E00",
  purple: "#CC79A7", yellow: "#F0E442", grey: "#888888", black: "#222222",
};
export const SERIES = [C.blue, C.orange, C.green, C.vermillion, C.purple, C.sky, C.black];
export const DASHES = ["solid", "dash", "dot", "dashdot", "longdash"];

export const $ = (id) => document.getElementById(id);

export function sci(x, digits = 2) {
  if (x === null || x === undefined) return "—";
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a < 1e-3 || a >= 1e5 ? x.toExponential(digits) : x.toPrecision(digits + 1);
}

export function fixed(x, digits = 3) {
  return x === null || x === undefined ? "—" : x.toFixed(digits);
}

export function int(x) {
  return x === null || x === undefined ? "—" : Math.round(x).toLocaleString("en-US");
}

export function pct(x, digits = 1) {
  return x === null || x === undefined ? "—" : `${(100 * x).toFixed(digits)}%`;
}

const UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
export function bytes(n) {
  let i = 0;
  let v = n;
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${n} bytes` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${UNITS[i]}`;
}

export function layout(extra = {}) {
  return {
    margin: { l: 64, r: 16, t: 28, b: 48 },
    height: 340,
    hovermode: "closest",
    legend: { orientation: "h", y: -0.22, x: 0 },
    font: { family: "system-ui, -apple-system, 'Segoe UI', sans-serif", size: 12 },
    ...extra,
  };
}

export const CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

export function draw(el, data, lay) {
  const full = layout(lay);
  full.xaxis = { automargin: true, ...(full.xaxis || {}) };
  full.yaxis = { automargin: true, ...(full.yaxis || {}) };
  return Plotly.react(typeof el === "string" ? $(el) : el, data, full, CONFIG);
}

// Read panel forms: every input/select with a data-q attribute becomes a query field (empty
// inputs are left out so the API's defaults apply). A prefix picks the fields named "prefix:x"
// and strips the prefix; without one, such fields are skipped.
export function formQuery(forms, prefix = null) {
  const q = new URLSearchParams();
  for (const form of [forms].flat()) {
    for (const input of form.querySelectorAll("[data-q]")) {
      let name = input.dataset.q;
      if (prefix !== null) {
        if (!name.startsWith(`${prefix}:`)) continue;
        name = name.slice(prefix.length + 1);
      } else if (name.includes(":")) continue;  // a prefixed field belongs to one curve only
      const v = input.type === "checkbox" ? String(input.checked) : input.value.replace(/\s+/g, "");
      if (v !== "") q.set(name, v);
    }
  }
  return q;
}

// Run `load(signal)` now and whenever an input of `forms` changes (debounced; a newer run aborts
// the older one's requests). The panel gets data-ready="1" after each drawing, and data-error
// with the message while the API refuses the input (the error box says which field).
export function bindPanel(panel, forms, load, ms = 250) {
  let timer = null;
  let controller = null;
  async function run() {
    clearTimeout(timer);
    if (controller) controller.abort();
    const mine = new AbortController();
    controller = mine;
    delete panel.dataset.ready;
    try {
      await load(mine.signal);
      if (mine.signal.aborted) return;
      delete panel.dataset.error;
      if (document.querySelector("[data-error]") === null) showError(null);
      panel.dataset.ready = "1";
    } catch (err) {
      if (err.name === "AbortError" || mine.signal.aborted) return;
      panel.dataset.error = err.message;
      showError(err);
    }
  }
  const schedule = () => { clearTimeout(timer); timer = setTimeout(run, ms); };
  for (const form of [forms].flat()) {
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  }
  run();
  return run;
}

export { apiGet };

export function setText(id, text) {
  const node = $(id);
  if (node) node.textContent = text;
}

// Set innerHTML from a template of trusted markup with the API's numbers already formatted in.
export function setHtml(id, html) {
  const node = $(id);
  if (node) node.innerHTML = html;
}
