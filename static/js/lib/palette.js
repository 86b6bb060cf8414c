// The page's colours: colour-blind-safe scales (Viridis, Cividis, a diverging and a cyclic one),
// the Okabe–Ito categorical colours, and the same scales as CSS colours for cells drawn as HTML.
export const MONO = "ui-monospace, Menlo, Consolas, monospace";
// Colour-blind-safe: Viridis for 0..1 / non-negative data, Cividis for signed data (centred on 0).
export const SEQ = "Viridis";
export const SIGNED = "Cividis";
// Okabe–Ito colours for categorical series (safe for the common colour-vision deficiencies).
// `grey` fills bars and markers; `line` is the darker grey of thin reference lines and curves.
export const OKABE = { blue: "#0072B2", orange: "#E69F00", green: "#009E73", sky: "#56B4E9",
  vermillion: "#D55E00", purple: "#CC79A7", yellow: "#F0E442", grey: "#999999", line: "#888888", black: "#222222" };
// The same colours in the order a list of series takes them.
export const SERIES = [OKABE.blue, OKABE.orange, OKABE.green, OKABE.vermillion, OKABE.purple, OKABE.sky, OKABE.black];
// The masked cells of an attention map: drawn empty, not as a (dark) weight of 0.
export const MASKED = "#eeeeee";  // cells a causal mask (or a sliding window) hides
// A cyclic scale for angles (-π..π: both ends the same colour, so a turn past π does not jump),
// light -> blue -> dark -> vermillion -> light, after matplotlib's "twilight".
export const CYCLIC = [[0, "#e2d9e2"], [0.125, "#9db1cf"], [0.25, "#5f78b5"], [0.375, "#4b3b8f"], [0.5, "#2f1436"],
  [0.625, "#6d1f4a"], [0.75, "#a84f52"], [0.875, "#cf9a8c"], [1, "#e2d9e2"]];

// Plotly's Viridis: its stops, at positions 0..255 (the one copy: the canvases' lookup table and
// the HTML cells' colours are both made from it).
export const VIRIDIS = [[0, "#440154"], [16, "#48186a"], [32, "#472d7b"], [48, "#424086"], [64, "#3b528b"], [80, "#33638d"],
  [96, "#2c728e"], [112, "#26828e"], [128, "#21918c"], [144, "#1fa088"], [160, "#28ae80"], [176, "#3fbc73"],
  [192, "#5ec962"], [208, "#84d44b"], [224, "#addc30"], [240, "#d8e219"], [255, "#fde725"]];

// "#rrggbb" as [r, g, b].
export const hexRgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

// Viridis as a 256-colour lookup table (r, g, b per entry), built once.
let viridisLut = null;
export function viridis() {
  if (viridisLut) return viridisLut;
  viridisLut = new Uint8ClampedArray(256 * 3);
  for (let j = 0; j + 1 < VIRIDIS.length; j++) {
    const [a, ca] = VIRIDIS[j];
    const [b, cb] = VIRIDIS[j + 1];
    const [x, y] = [hexRgb(ca), hexRgb(cb)];
    for (let i = a; i <= b; i++) {
      const f = (i - a) / (b - a);
      for (let c = 0; c < 3; c++) viridisLut[3 * i + c] = Math.round(x[c] + f * (y[c] - x[c]));
    }
  }
  return viridisLut;
}

// --- colours as CSS strings (cells drawn as HTML, e.g. /compare's character strips) ----------------
// A diverging, colour-blind-safe scale for signed differences: Okabe–Ito blue below 0, near-white
// at 0, vermillion above (as a Plotly colorscale, too).
export const DIVERGING = [[0, OKABE.blue], [0.5, "#f7f7f7"], [1, OKABE.vermillion]];

const mix = (a, b, f) => `rgb(${a.map((c, k) => Math.round(c + f * (b[k] - c))).join(", ")})`;

// v's colour on Viridis between zmin and zmax (clipped), as "rgb(r, g, b)": what a Plotly heatmap
// with colorscale SEQ shows, and the canvases paint.
export function seqColour(v, zmin, zmax) {
  const i = 3 * Math.round(255 * Math.max(0, Math.min(1, (v - zmin) / (zmax - zmin || 1))));
  const lut = viridis();
  return `rgb(${lut[i]}, ${lut[i + 1]}, ${lut[i + 2]})`;
}

// v's colour on DIVERGING between -lim and +lim (clipped), as "rgb(r, g, b)".
export function divColour(v, lim) {
  const f = Math.max(-1, Math.min(1, v / (lim || 1)));
  return mix(hexRgb(DIVERGING[1][1]), hexRgb(DIVERGING[f < 0 ? 0 : 2][1]), Math.abs(f));
}

// Dark or white text, whichever reads better on an "rgb(r, g, b)" background.
export function inkOn(colour) {
  const [r, g, b] = (colour.match(/\d+/g) || [255, 255, 255]).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#1d1d1f" : "#fff";
}
