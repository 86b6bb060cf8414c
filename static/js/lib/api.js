// The one way pages talk to the server: the same /api/v1 answers any tool can call. Also the one
// "wait, then cancel the older request" helper (latest / debounced) and the API's own schema.
// Every request accepts the binary form (MessagePack, docs/api.md#binary-answers), which the heavy
// endpoints send and the rest ignore; decoded, it is the JSON's tree with the JSON's numbers.
// Every answer is recorded (lib/replay.js), and an exported panel is answered from that record.
import { MSGPACK, REPLAY, replayed, requestKey, send } from "./replay.js";

export { MSGPACK };
const ACCEPT = `${MSGPACK}, application/json;q=0.9`;

export class ApiError extends Error {
  constructor(status, detail) {
    super(formatDetail(detail));
    this.status = status;
    this.detail = detail;
  }
}

// An error body's `detail` as one line: a string as it is, a validation list as "field: message; ...".
// A check of the whole body (pydantic's "Value error, ..." with no field) is its message alone.
export function formatDetail(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => {
      const where = (d.loc || []).filter((x) => x !== "body").join(".");
      const msg = String(d.msg).replace(/^Value error, /, "");
      return where ? `${where}: ${msg}` : msg;
    }).join("; ");
  }
  return JSON.stringify(detail);
}

function checked({ status, ok, body }) {
  if (!ok) throw new ApiError(status, body.detail);
  return body;
}

// The raw answer { status, ok, body } of any /api/v1 request, for callers that act on the status
// (202 / 200 cached / 409); an error's body holds `detail`. `payload`: JSON, or FormData as it is.
export async function apiRequest(method, path, payload, signal) {
  const key = requestKey(method, path, payload);
  if (REPLAY) return replayed(key);
  const init = { method, signal, headers: { Accept: ACCEPT } };
  if (payload instanceof FormData) init.body = payload;
  else if (payload !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  return send(key, `/api/v1${path}`, init);
}

// The body of a successful answer; an error status throws ApiError.
export async function apiGet(path, signal) {
  return checked(await apiRequest("GET", path, undefined, signal));
}

export async function apiPost(path, payload, signal) {
  return checked(await apiRequest("POST", path, payload, signal));
}

// The server's OpenAPI schema (/openapi.json), fetched once per page and shared.
let schema = null;
export function openapi() {
  if (!schema) {
    const key = requestKey("GET", "/openapi.json");
    schema = (REPLAY ? Promise.resolve(replayed(key)) : send(key, "/openapi.json", {})).then(checked);
    schema.catch(() => { schema = null; });   // a failed fetch may be tried again
  }
  return schema;
}

export function showError(err) {
  const box = document.getElementById("error");
  if (!box) return;
  document.body.classList.toggle("refused", !!err);   // the CSS fades the panels still showing the last answer
  if (!err) { box.hidden = true; return; }
  box.textContent = err.message || String(err);
  box.hidden = false;
}

export const isAbort = (err) => !!err && err.name === "AbortError";

// One request slot: a newer request aborts the older one, so a stale answer never lands.
//   slot.now(fn)       aborts the previous run's signal at once and returns fn(signal)
//   slot.soon(fn, ms)  waits until calls stop for `ms`, then does slot.now(fn)
//   slot.cancel()      drops a waiting call and aborts the one in flight
export function latest() {
  let timer = null;
  let controller = null;
  const now = (fn) => {
    clearTimeout(timer);
    if (controller) controller.abort();
    controller = new AbortController();
    return fn(controller.signal);
  };
  return {
    now,
    soon(fn, ms = 0) {
      clearTimeout(timer);
      timer = setTimeout(() => now(fn), ms);
    },
    cancel() {
      clearTimeout(timer);
      if (controller) controller.abort();
      controller = null;
    },
  };
}

// fn(signal, ...args) once calls stop for `ms`; a newer call aborts the older request.
export function debounced(fn, ms) {
  const slot = latest();
  return (...args) => slot.soon((signal) => fn(signal, ...args), ms);
}
