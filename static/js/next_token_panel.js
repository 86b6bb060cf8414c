// Next-token panel: the top candidates after the last position as probability bars.
import { visible } from "./api.js";

export function renderNextToken(el, candidates) {
  const rev = [...candidates].reverse(); // most likely at the top
  const labels = rev.map((c) => `“${visible(c.text)}”  id ${c.id}`);
  const data = [{
    type: "bar",
    orientation: "h",
    x: rev.map((c) => c.prob),
    y: labels,
    text: rev.map((c) => `${(100 * c.prob).toFixed(1)}%`),
    textposition: "outside",
    marker: { color: "#3b528b" },
    customdata: rev.map((c) => c.logit),
    hovertemplate: "%{y}<br>probability %{x:.2%}<br>logit (score before softmax) %{customdata:.3f}<extra></extra>",
  }];
  const layout = {
    xaxis: { title: { text: "probability" }, tickformat: ".0%", range: [0, Math.min(1, Math.max(...candidates.map((c) => c.prob)) * 1.25)] },
    yaxis: { automargin: true, tickfont: { family: "ui-monospace, Menlo, monospace" } },
    margin: { l: 10, r: 30, t: 10, b: 40 },
    height: 60 + 28 * candidates.length,
  };
  Plotly.react(el, data, layout, { responsive: true, displaylogo: false });
}
