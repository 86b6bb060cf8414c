// The PNG / SVG / JSON / HTML bar above a figure: its image, the exact API data it was drawn from,
// or its panel as one self-contained, interactive file (lib/export_html.js).
import { el } from "./dom.js";
import { exportPanel } from "./export_html.js";
import { REPLAY } from "./replay.js";

function downloadBlob(blob, filename) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

function downloadJSON(obj, filename) {
  downloadBlob(new Blob([JSON.stringify(obj, null, 1)], { type: "application/json" }), `${filename}.json`);
}

function downloadPlotly(gd, format, filename) {
  const fl = gd._fullLayout || {};
  return Plotly.downloadImage(gd, { format, filename, width: fl.width || 900, height: fl.height || 500, scale: format === "png" ? 2 : 1 });
}

// An SVG element (not Plotly) as SVG or PNG.
function downloadSvgElement(svg, format, filename) {
  const clone = svg.cloneNode(true);
  clone.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  const text = new XMLSerializer().serializeToString(clone);
  if (format === "svg") {
    downloadBlob(new Blob([text], { type: "image/svg+xml" }), `${filename}.svg`);
    return;
  }
  const { width, height } = svg.getBoundingClientRect();
  const img = new Image();
  img.onload = () => {
    const c = document.createElement("canvas");
    c.width = Math.ceil(width * 2); c.height = Math.ceil(height * 2);
    const ctx = c.getContext("2d");
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, c.width, c.height);
    ctx.scale(2, 2); ctx.drawImage(img, 0, 0, width, height);
    c.toBlob((b) => downloadBlob(b, `${filename}.png`), "image/png");
  };
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(text)}`;
}

// The panel (the section) that holds `figure`, as `${name}.html`; a failure is shown on the button.
async function downloadHtml(figure, name, button) {
  const section = figure.closest("section[id$='-panel']");
  button.disabled = true;
  try {
    const html = await exportPanel(section.id.slice(0, -"-panel".length));
    downloadBlob(new Blob([html], { type: "text/html" }), `${name}.html`);
    button.removeAttribute("title");
  } catch (err) {
    button.title = `could not export: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

// A small PNG / SVG / JSON / HTML bar placed just above a figure. `getData` returns the exact API
// (part of the) response the figure was drawn from; `svgEl` switches images to a plain SVG;
// `canvas` (a function returning a <canvas>) makes the image a PNG of that canvas, with no SVG.
export function addDownloads(figure, name, getData, { svgEl = null, canvas = null } = {}) {
  if (figure.previousElementSibling?.classList.contains("dl-bar")) return;
  const image = (format) => () => {
    if (canvas) {
      const c = canvas();
      if (c) c.toBlob((b) => downloadBlob(b, `${name}.png`), "image/png");
      return;
    }
    const svg = typeof svgEl === "function" ? svgEl() : svgEl;
    if (svg) downloadSvgElement(svg, format, name);
    else if (figure._fullLayout) downloadPlotly(figure, format, name);
  };
  const bar = el("div", { class: "dl-bar", role: "group", "aria-label": `download ${name}`, "data-for": figure.id },
    el("span", { class: "dl-label", text: "download" }),
    el("button", { type: "button", class: "dl", "data-format": "png", title: `${name} as a PNG image`, onclick: image("png"), text: "PNG" }),
    canvas ? null : el("button", { type: "button", class: "dl", "data-format": "svg", title: `${name} as an SVG image`, onclick: image("svg"), text: "SVG" }),
    el("button", { type: "button", class: "dl", "data-format": "json", title: `the API data behind ${name} as JSON`,
      onclick: () => { const d = getData(); if (d) downloadJSON(d, name); }, text: "JSON" }),
    // (an exported file cannot export itself again: it has no server to read the page from)
    REPLAY ? null : el("button", { type: "button", class: "dl", "data-format": "html", text: "HTML",
      title: `${name}'s panel as one HTML file that works offline, interactive`,
      onclick: (e) => downloadHtml(figure, name, e.currentTarget) }));
  figure.before(bar);
}
