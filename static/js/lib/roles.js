// Head roles: one Okabe–Ito colour and one marker symbol per role (the roles of GET /api/v1/heads
// and /training/{id}/heads), so a role looks the same in every chart; the symbols tell the roles
// apart without colour too.
import { OKABE } from "./palette.js";

export const ROLE_COLOURS = { "previous-token": OKABE.blue, "first-token": OKABE.purple, "current-token": OKABE.sky,
  local: OKABE.green, "duplicate-token": OKABE.orange, induction: OKABE.vermillion };
export const ROLE_SYMBOLS = { "previous-token": "circle", "first-token": "square", "current-token": "diamond",
  local: "triangle-up", "duplicate-token": "cross", induction: "star" };

// The outline of each ROLE_SYMBOLS marker in a 16 x 16 box (as SVG path data).
const star = Array.from({ length: 10 }, (_, i) => {
  const a = -Math.PI / 2 + (i * Math.PI) / 5;
  const r = i % 2 ? 3 : 7;
  return `${(8 + r * Math.cos(a)).toFixed(2)},${(8.6 + r * Math.sin(a)).toFixed(2)}`;
});
const SYMBOL_PATHS = {
  circle: "M8,2.5a5.5,5.5 0 1,0 0.001,0z", square: "M2.8,2.8h10.4v10.4h-10.4z", diamond: "M8,1.5L14.5,8L8,14.5L1.5,8z",
  "triangle-up": "M8,2L14.5,13.5H1.5z", cross: "M6,1.8h4v4.2h4.2v4h-4.2v4.2h-4v-4.2h-4.2v-4h4.2z", star: `M${star.join("L")}z`,
};

// A head role's marker as a small SVG: the role's colour and symbol; filled when the role is
// confirmed by ablation, hollow when ablation did not confirm it, hollow and dashed when untested.
export function roleMark(role, status = "confirmed", size = 14) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", size);
  svg.setAttribute("height", size);
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "role-symbol");
  const path = document.createElementNS(ns, "path");
  const colour = ROLE_COLOURS[role] || OKABE.grey;
  path.setAttribute("d", SYMBOL_PATHS[ROLE_SYMBOLS[role]] || SYMBOL_PATHS.circle);
  path.setAttribute("fill", status === "confirmed" ? colour : "#fff");
  path.setAttribute("stroke", colour);
  path.setAttribute("stroke-width", status === "confirmed" ? "1" : "2");
  path.setAttribute("stroke-linejoin", "round");
  if (status === "untested") path.setAttribute("stroke-dasharray", "2.2 1.6");
  svg.append(path);
  return svg;
}
