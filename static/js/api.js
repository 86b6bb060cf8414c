// The one way panels talk to the server: the same /api/v1 JSON any tool can call.

export class ApiError extends Error {
  constructor(status, detail) {
    super(formatDetail(detail));
    this.status = status;
    this.detail = detail;
  }
}

function formatDetail(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).filter((x) => x !== "body").join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(detail);
}

async function handle(resp) {
  const body = await resp.json().catch(() => ({ detail: resp.statusText }));
  if (!resp.ok) throw new ApiError(resp.status, body.detail);
  return body;
}

export async function apiGet(path, signal) {
  return handle(await fetch(`/api/v1${path}`, { signal }));
}

export async function apiPost(path, payload, signal) {
  return handle(await fetch(`/api/v1${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(payload),
    signal,
  }));
}

export function showError(err) {
  const box = document.getElementById("error");
  if (!box) return;
  if (!err) { box.hidden = true; return; }
  box.textContent = err.message || String(err);
  box.hidden = false;
}

// Make whitespace in a token visible: a leading/inner space as "·", a newline as "↵", a tab as "→".
export function visible(text) {
  return text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "→").replace(/\r/g, "␍");
}

// Wait until calls stop for `ms` before running fn; a newer call aborts the older request.
export function debounced(fn, ms) {
  let timer = null;
  let controller = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (controller) controller.abort();
      controller = new AbortController();
      fn(controller.signal, ...args);
    }, ms);
  };
}
