// What this page asked /api/v1 and what it answered, so that a panel can travel without the server
// (lib/export_html.js writes the answers into a self-contained file). On the live page every answer
// is recorded, bytes as they came (MessagePack stays MessagePack); in an exported file
// (globalThis.__gptscopeReplay set before the page's modules run) the same requests are answered
// from that record, and a request it lacks gets an error saying that it needs the running app.
import { decode } from "./msgpack.js";

export const MSGPACK = "application/vnd.gptscope+msgpack";
export const REPLAY = globalThis.__gptscopeReplay || null;

const recorded = new Map();   // key -> { status, binary, bytes }, the newest answer of each request
const LIMIT = 24e6;           // bytes kept at most (the oldest dropped first)
let kept = 0;
let inflight = 0;
let misses = 0;

export function requestKey(method, path, payload) {
  const body = payload === undefined ? "" : payload instanceof FormData ? "(form)" : JSON.stringify(payload);
  return `${method} ${path} ${body}`;
}

function parse(binary, bytes, statusText) {
  if (binary) return decode(bytes);
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return { detail: statusText };   // not JSON: a proxy's error page, say
  }
}

function remember(key, entry) {
  if (recorded.has(key)) kept -= recorded.get(key).bytes.length;
  recorded.delete(key);
  recorded.set(key, entry);
  kept += entry.bytes.length;
  for (const [k, e] of recorded) {
    if (kept <= LIMIT || k === key) break;
    recorded.delete(k);
    kept -= e.bytes.length;
  }
}

// fetch(url, init), its answer recorded under `key`: { status, ok, body } with the body decoded.
export async function send(key, url, init) {
  inflight++;
  try {
    const resp = await fetch(url, init);
    const binary = (resp.headers.get("content-type") || "").startsWith(MSGPACK);
    const bytes = new Uint8Array(await resp.arrayBuffer());
    remember(key, { status: resp.status, binary, bytes });
    return { status: resp.status, ok: resp.ok, body: parse(binary, bytes, resp.statusText) };
  } finally {
    inflight--;
  }
}

function fromBase64(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

// In an exported file: the recorded answer to `key`, or an error naming what needs the app.
export function replayed(key) {
  const a = REPLAY.answers[key];
  if (a) {
    const bytes = a.m === undefined ? new TextEncoder().encode(a.j) : fromBase64(a.m);
    return { status: a.s, ok: a.s >= 200 && a.s < 300, body: parse(a.m !== undefined, bytes, "") };
  }
  misses++;
  document.body.dataset.needsApp = String(misses);
  const [method, path] = key.split(" ", 2);
  return { status: 0, ok: false, body: { detail: `This panel was exported from gptscope and carries only the answers it `
    + `drew; this setting needs the running app (${method} /api/v1${path.split("?")[0]} with a request it has not seen): `
    + `open it in gptscope (gptscope serve).` } };
}

// The record as an exported file carries it: { key: { s: status, m: base64 MessagePack | j: JSON text } }.
export function recordedAnswers() {
  const out = {};
  const text = new TextDecoder();
  for (const [key, e] of recorded) {
    if (e.binary) {
      let s = "";
      for (let i = 0; i < e.bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, e.bytes.subarray(i, i + 0x8000));
      out[key] = { s: e.status, m: btoa(s) };
    } else out[key] = { s: e.status, j: text.decode(e.bytes) };
  }
  if (REPLAY) for (const [k, v] of Object.entries(REPLAY.answers)) out[k] ??= v;
  return out;
}

// Requests still waiting for their answer.
export const inflightRequests = () => inflight;
