// Attention panel: one head's pattern as a heatmap, queries down the side, keys along the top.
import { visible } from "./api.js";

const MONO = "ui-monospace, Menlo, Consolas, monospace";
const MASKED = "#eeeeee"; // the causal mask's cells: drawn empty, not as a (dark) weight of 0

export function tokenLabels(tokens) {
  return tokens.map((t) => visible(t.text));
}

// Square cells: the side of the plot grows with the prompt, up to what the panel has room for.
function plotSide(n, room) {
  return Math.max(220, Math.min(620, room, n * 30));
}

export function renderAttention(el, trace, layer, head) {
  const li = trace.attention.layers.indexOf(layer);
  const hi = trace.attention.heads.indexOf(head);
  const z = trace.attention.pattern[li][hi];
  const labels = tokenLabels(trace.tokens);
  const idx = labels.map((_, i) => i);
  const n = labels.length;

  const fontSize = n > 40 ? 9 : 12;
  const longest = Math.max(1, ...labels.map((s) => [...s].length));
  const labelPx = Math.min(140, Math.ceil(longest * fontSize * 0.62) + 8);
  const margin = { l: labelPx + 40, r: 10, t: Math.ceil(labelPx * 0.87) + 70, b: 10 };
  const colorbarPx = 90;
  const room = (el.clientWidth || 900) - margin.l - margin.r - colorbarPx;
  const side = plotSide(n, room);
  // One label per row/column while they fit; on long prompts every k-th (hover shows them all).
  const step = Math.max(1, Math.ceil(n / Math.floor(side / (fontSize + 3))));
  const ticks = idx.filter((i) => i % step === 0);
  const tickFont = { size: fontSize, family: MONO };

  const data = [{
    type: "heatmap",
    name: "attention",
    z,
    x: idx,
    y: idx,
    zmin: 0,
    zmax: 1,
    colorscale: "Viridis",
    colorbar: { title: { text: "weight" }, thickness: 14, len: 1, lenmode: "fraction" },
    customdata: idx.map((q) => idx.map((k) => [labels[q], labels[k]])),
    hovertemplate: "query %{y} “%{customdata[0]}” reads key %{x} “%{customdata[1]}”<br>weight %{z:.4f}<extra></extra>",
  }, {
    // Overlay on the upper triangle: a token may not read later tokens, so those cells stay empty.
    type: "heatmap",
    name: "causal mask",
    z: idx.map((q) => idx.map((k) => (k > q ? 1 : null))),
    x: idx,
    y: idx,
    colorscale: [[0, MASKED], [1, MASKED]],
    showscale: false,
    hoverongaps: false,
    customdata: idx.map((q) => idx.map((k) => [labels[q], labels[k]])),
    hovertemplate: "token %{y} “%{customdata[0]}” cannot see the later token %{x} “%{customdata[1]}” (causal mask)<extra></extra>",
  }];
  const layout = {
    title: {
      text: `Layer ${layer}, head ${head}`,
      x: 0, xanchor: "left", xref: "paper",
      y: 1, yanchor: "top", yref: "container", pad: { t: 8 },
    },
    xaxis: {
      title: { text: "key: the token being read", standoff: 6 },
      tickmode: "array", tickvals: ticks, ticktext: ticks.map((i) => labels[i]),
      side: "top", tickangle: -60, tickfont: tickFont, showgrid: false, zeroline: false,
      range: [-0.5, n - 0.5], constrain: "domain",
    },
    yaxis: {
      title: { text: "query: the token reading", standoff: 6 },
      tickmode: "array", tickvals: ticks, ticktext: ticks.map((i) => labels[i]),
      tickfont: tickFont, showgrid: false, zeroline: false,
      range: [n - 0.5, -0.5], constrain: "domain",
    },
    margin,
    width: side + margin.l + margin.r + colorbarPx,
    height: side + margin.t + margin.b,
    plot_bgcolor: "#fff",
  };
  Plotly.react(el, data, layout, { displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
}
