// Attention panel: one head's pattern as a heatmap, queries down the side, keys along the top.
import { visible } from "./api.js";

export function tokenLabels(tokens) {
  return tokens.map((t) => visible(t.text));
}

export function renderAttention(el, trace, layer, head) {
  const li = trace.attention.layers.indexOf(layer);
  const hi = trace.attention.heads.indexOf(head);
  const z = trace.attention.pattern[li][hi];
  const labels = tokenLabels(trace.tokens);
  const idx = labels.map((_, i) => i);
  const n = labels.length;
  const data = [{
    type: "heatmap",
    z,
    x: idx,
    y: idx,
    zmin: 0,
    zmax: 1,
    colorscale: "Viridis",
    colorbar: { title: { text: "weight" } },
    customdata: idx.map((q) => idx.map((k) => [labels[q], labels[k]])),
    hovertemplate: "query %{y} “%{customdata[0]}” → key %{x} “%{customdata[1]}”<br>weight %{z:.4f}<extra></extra>",
  }];
  const tickFont = { size: n > 40 ? 9 : 11, family: "ui-monospace, Menlo, monospace" };
  const layout = {
    title: { text: `layer ${layer}, head ${head}` },
    xaxis: { title: { text: "key (attended to)" }, tickmode: "array", tickvals: idx, ticktext: labels, side: "top", tickangle: -60, tickfont: tickFont },
    yaxis: { title: { text: "query (attending)" }, tickmode: "array", tickvals: idx, ticktext: labels, autorange: "reversed", tickfont: tickFont },
    margin: { l: 110, r: 20, t: 130, b: 20 },
    height: Math.max(380, Math.min(900, 140 + n * 14)),
  };
  Plotly.react(el, data, layout, { responsive: true, displaylogo: false });
}
