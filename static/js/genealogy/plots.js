// The /genealogy plots: LAMBADA against parameters (log axis), size and embedding share by
// generation, the NSP ablations, the loss curve with the texts' points. Drawn with lib/plot.js.
import { $ } from "../lib/dom.js";
import { fixed, int } from "../lib/format.js";
import { OKABE, SERIES } from "../lib/palette.js";
import { chart } from "../lib/plot.js";

export function drawLambada(points, source) {
  return chart($("lambada-plot"), [{
    type: "scatter", mode: "lines+markers+text", name: "GPT-2, zero-shot",
    x: points.map((p) => p.params_counted), y: points.map((p) => p.accuracy),
    text: points.map((p) => p.model.replace("GPT-2 ", "")), textposition: "top left",
    customdata: points.map((p) => [int(p.params_quoted), int(p.params_counted)]),
    hovertemplate: "%{text}: %{y:.1f}%<br>quoted %{customdata[0]}, counted %{customdata[1]}<extra></extra>",
    marker: { size: 9, color: OKABE.blue },
  }], {
    xaxis: { type: "log", title: { text: "parameters, counted from the config (log scale)" }, exponentformat: "SI" },
    yaxis: { title: { text: "LAMBADA accuracy (%)" } },
    title: { text: `source: ${source.seed}`, font: { size: 11 }, x: 1, xanchor: "right" },
  });
}

export function drawParams(models) {
  const names = models.map((m) => m.name);
  return chart($("params-plot"), [
    { type: "bar", name: "weights (matrices and tables)", x: names, y: models.map((m) => m.params.weights_only),
      marker: { color: OKABE.sky }, hovertemplate: "%{x}: %{y:,}<extra></extra>" },
    { type: "scatter", mode: "lines+markers", name: "share in the token embedding", x: names, yaxis: "y2",
      y: models.map((m) => m.params.embedding_share), marker: { color: OKABE.vermillion },
      hovertemplate: "%{x}: %{y:.1%}<extra></extra>" },
  ], {
    height: 380,
    yaxis: { type: "log", title: { text: "weights (log scale)" }, exponentformat: "SI" },
    yaxis2: { overlaying: "y", side: "right", automargin: true, title: { text: "embedding share", standoff: 12 }, tickformat: ".0%", range: [0, 0.35] },
  });
}

export function drawNsp(tables) {
  const traces = tables.flatMap((t, i) => t.rows.map((r, j) => ({
    type: "bar", name: r.label, x: t.columns.map((c) => `${i === 0 ? "BERT" : "RoBERTa"} ${c}`), y: r.values,
    // each table's two rows side by side in its own columns (not four slots a column, two of them empty);
    // the scores written upright above their bars, so neighbours' labels do not run together
    offsetgroup: String(j), marker: { color: SERIES[2 * i + j] }, text: r.values.map((v) => fixed(v, 1)),
    textposition: "outside", textangle: -90, cliponaxis: false,
    hovertemplate: `${r.label}, %{x}: %{y:.1f}<extra></extra>`,
  })));
  return chart($("nsp-plot"), traces, { barmode: "group", xaxis: { tickangle: -30 }, yaxis: { title: { text: "score" }, range: [60, 95] } });
}

export function drawLossCurve(w) {
  // "your p" at one of the texts' examples (the default, 0.9) sits on that point: its label is already there
  const labelled = w.losses.some((x) => x.p === w.chosen.p);
  return chart($("xent-plot"), [
    { type: "scatter", mode: "lines", name: "-ln p", x: w.curve_p, y: w.curve_loss, line: { color: OKABE.orange } },
    { type: "scatter", mode: "markers+text", name: "the texts' examples", x: w.losses.map((x) => x.p),
      y: w.losses.map((x) => x.loss), text: w.losses.map((x) => `p = ${x.p}: ${fixed(x.loss)}`),
      // a label near p = 1 reads leftwards, inside the plot
      textposition: w.losses.map((x) => (x.p > 0.6 ? "top left" : "top right")), marker: { size: 10, color: OKABE.blue } },
    { type: "scatter", mode: labelled ? "markers" : "markers+text", name: "your p", x: [w.chosen.p], y: [w.chosen.loss],
      text: [`p = ${w.chosen.p}: ${fixed(w.chosen.loss)}`], textposition: w.chosen.p > 0.6 ? "bottom left" : "bottom right",
      marker: { size: 12, symbol: "diamond", color: OKABE.vermillion } },
  ], { xaxis: { title: { text: "probability on the right token" } }, yaxis: { title: { text: "loss (nats)" } } });
}
