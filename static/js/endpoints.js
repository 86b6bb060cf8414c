// Which /api/v1 endpoints this server offers (read once from /openapi.json), so a panel whose
// endpoint is missing says so instead of sending a request that can only fail.
let paths = null;

export async function loadEndpoints() {
  if (paths) return paths;
  try {
    const resp = await fetch("/openapi.json");
    const spec = await resp.json();
    paths = spec.paths || {};
  } catch {
    paths = {};
  }
  return paths;
}

export function offers(method, path) {
  const p = paths && paths[`/api/v1${path}`];
  return !!(p && p[method.toLowerCase()]);
}

export function missingNote(method, path) {
  return `This server does not offer ${method} /api/v1${path} yet, so this part of the stage is empty.`;
}
