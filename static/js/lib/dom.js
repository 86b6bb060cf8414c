// DOM helpers: an element by id, an element built in one call, a panel's note.

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

// Show a panel-level note (e.g. an endpoint this server does not offer yet).
export function setNote(node, message, kind = "note") {
  if (!node) return;
  node.textContent = message || "";
  node.className = `note ${kind}`;
  node.hidden = !message;
}
