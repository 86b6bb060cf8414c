// A panel as one self-contained HTML file (the "HTML" download, gptscope.notebook's static mode,
// GET /api/v1/export): the page's own shell in embed mode (that panel alone), its stylesheets,
// the ES modules it runs (imports rewritten to bare names and an import map of data: URLs), every
// API answer the page received (lib/replay.js), and Plotly, gzipped. Opened anywhere, with no
// network at all, the file runs the page's own init(): it draws what the page drew, hovers give
// the same numbers, and pickers and sliders that only redraw work; a request the record lacks
// (a sampling slider's new setting, an intervention) says that it needs the running app.
import { inflightRequests, REPLAY, recordedAnswers } from "./replay.js";

const ICON = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%2320243a'/%3E%3Ccircle cx='8' cy='8' r='4' fill='%23dfe6ff'/%3E%3C/svg%3E";
const IMPORT = /(\bfrom\s*|\bimport\s*\(?\s*)(["'])(\.{1,2}\/[^"']+|\/static\/js\/[^"']+)\2/g;
const BARE = "gptscope";   // a module /static/js/x.js is "gptscope/static/js/x.js" in the file's import map

function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

async function gzip64(text) {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return base64(new Uint8Array(await new Response(stream).arrayBuffer()));
}

async function text(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.text();
}

// The module graph from `entry`, each source with its relative imports made bare names (read
// once per page: every panel of the page runs the same modules).
const graphs = new Map();
function modules(entry) {
  if (!graphs.has(entry)) graphs.set(entry, moduleGraph(entry));
  return graphs.get(entry);
}

async function moduleGraph(entry) {
  const out = {};
  const todo = [entry];
  while (todo.length) {
    const path = todo.pop();
    if (path in out) continue;
    out[path] = (await text(path)).replace(IMPORT, (_, pre, q, spec) => {
      const abs = new URL(spec, location.origin + path).pathname;
      todo.push(abs);
      return `${pre}${q}${BARE}${abs}${q}`;
    });
  }
  return out;
}

// The page's shell as the server renders it for this state with `?embed=panel` (no header, only
// that panel): what the exported file puts in its body, its styles and its entry module.
async function shell(panel) {
  const q = new URLSearchParams(location.search);
  q.set("embed", panel);
  const doc = new DOMParser().parseFromString(await text(`${location.pathname}?${q}`), "text/html");
  const entry = /from\s*"([^"]+)"/.exec([...doc.querySelectorAll("script[type=module]")].map((s) => s.textContent).join("\n"));
  const links = [...doc.querySelectorAll("link[rel=stylesheet]")];
  const sheets = await Promise.all(links.map((l) => text(l.href)));
  const css = [...sheets, ...[...doc.head.querySelectorAll("style")].map((s) => s.textContent)].join("\n");
  for (const s of [...doc.body.querySelectorAll("script"), ...links]) s.remove();
  const attrs = Object.fromEntries([...doc.body.attributes].map((a) => [a.name, a.value]));
  return { title: doc.title, css, attrs, body: doc.body.innerHTML, entry: entry ? entry[1] : null };
}

let plotly = null;   // Plotly's bundle, gzipped and in base64, made once per page
const plotly64 = () => {
  plotly ??= text("/vendor/plotly.min.js").then(gzip64);
  return plotly;
};

// Inlined in the exported file (as its source text): unpack the bundle, add the styles and the
// shell, Plotly (its own, or the one the notebook's first gptscope panel shares), then the import
// map, and run the page's init(). In a frame it grows to its content's height.
function boot() {
  const unpack = async (id) => {
    const bin = atob(document.getElementById(id).textContent.trim());
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);   // a loop: Uint8Array.from's callback took 0.3 s for Plotly
    return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  };
  const shared = async () => {
    for (let i = 0; i < 300; i++) {
      const p = window.parent !== window && window.parent.__gptscopePlotly;
      if (p) return p;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("Plotly comes with the first gptscope panel of this notebook; run that cell again to see this one.");
  };
  const say = (err) => {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = String(err.message || err);
    document.body.prepend(p);
  };
  (async () => {
    const own = document.getElementById("gptscope-plotly") ? unpack("gptscope-plotly") : null;
    try {
      if (own && window.parent !== window && !window.parent.__gptscopePlotly) window.parent.__gptscopePlotly = own;
    } catch { /* a frame of another origin: nothing to share */ }
    const b = JSON.parse(await unpack("gptscope-bundle"));
    const style = document.createElement("style");
    style.textContent = b.css;
    document.head.append(style);
    for (const [k, v] of Object.entries(b.attrs)) document.body.setAttribute(k, v);
    document.body.insertAdjacentHTML("afterbegin", b.body);
    window.__gptscopeReplay = { answers: b.answers, search: b.search };
    const lib = document.createElement("script");
    lib.textContent = await (own || shared());
    document.head.append(lib);
    const imports = {};
    for (const [path, src] of Object.entries(b.modules)) imports[`gptscope${path}`] = `data:text/javascript;charset=utf-8,${encodeURIComponent(src)}`;
    const map = document.createElement("script");
    map.type = "importmap";
    map.textContent = JSON.stringify({ imports });
    document.head.append(map);
    (await import(`gptscope${b.entry}`)).init();
    if (window.frameElement) {
      const fit = () => { window.frameElement.style.height = `${document.documentElement.scrollHeight + 4}px`; };
      new ResizeObserver(fit).observe(document.body);
    }
  })().catch(say);
}

const escapeHtml = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");

// The exported file of panel `panel` (the section #PANEL-panel), as HTML text. `withPlotly`: false
// leaves Plotly out (a notebook's later panels take the first one's).
export async function exportPanel(panel, { withPlotly = true } = {}) {
  if (REPLAY) throw new Error("this is an exported panel already: export it from gptscope itself");
  const section = document.getElementById(`${panel}-panel`);
  if (!section) throw new Error(`this page has no panel ${panel}`);
  // what the panel loads once it comes into view (head roles, say) is loaded first, so the file has it
  if (section.checkVisibility()) section.scrollIntoView({ block: "start" });
  await settled();
  const s = await shell(panel);
  if (!s.entry) throw new Error("this page has no entry module to export");
  const note = `<p class="caption export-note">Exported from gptscope ${new Date().toISOString().slice(0, 10)}: this file carries the answers the panel drew and redraws from them; other settings need the running app.</p>`;
  const bundle = { css: s.css, attrs: s.attrs, body: s.body.replace("</main>", `${note}</main>`), search: location.search,
    entry: s.entry, modules: await modules(s.entry), answers: recordedAnswers() };
  const lib = withPlotly ? `<script type="application/gzip" id="gptscope-plotly">${await plotly64()}</script>\n` : "";
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(s.title)}: ${panel}</title><link rel="icon" href="${ICON}"></head>
<body><noscript>This gptscope panel draws itself with JavaScript.</noscript>
<script type="application/gzip" id="gptscope-bundle">${await gzip64(JSON.stringify(bundle))}</script>
${lib}<script>(${boot})();</script>
</body></html>
`;
}

// Resolves once the page has no request in flight and nothing waiting to be drawn near the viewport
// (checked twice, 100 ms apart): what an export of it should wait for.
export async function settled() {
  let calm = 0;
  while (calm < 2) {
    await new Promise((r) => setTimeout(r, 100));
    calm = inflightRequests() === 0 && document.body.dataset.drawn !== "0" ? calm + 1 : 0;
  }
}

// For tools that drive the page (gptscope.notebook's static mode, GET /api/v1/export).
globalThis.gptscopeExport = exportPanel;
globalThis.gptscopeSettled = settled;
