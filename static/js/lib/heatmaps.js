// Heatmaps drawn with Plotly: tokens by features, a heat strip over a prompt, a query-by-key square.
import { MASKED, MONO, OKABE, SEQ, SIGNED } from "./palette.js";
import { SLANTED_TICK_PX, draw, outsideWindow, rowBox, signedLimit, tokenAxis } from "./plot.js";

// A (rows x cols) heatmap whose rows are tokens and whose columns are features.
// opts: rowLabels, colTitle, rowTitle, signed, zmin/zmax, title, colorTitle, hoverName, height
export function tokenFeatureHeatmap(gd, z, opts) {
  const rows = opts.rowLabels;
  const n = rows.length;
  const lim = opts.signed ? signedLimit(z) : null;
  const height = opts.height || Math.max(220, Math.min(1000, 90 + n * 15));
  const data = [{
    type: "heatmap", z,
    x: z.length ? z[0].map((_, i) => i) : [], y: rows.map((_, i) => i),
    colorscale: opts.signed ? SIGNED : SEQ,
    zmin: opts.signed ? -lim : opts.zmin, zmax: opts.signed ? lim : opts.zmax, zmid: opts.signed ? 0 : undefined,
    colorbar: { title: { text: opts.colorTitle || "value", side: "right" }, thickness: 12 },
    customdata: (opts.rowHover || rows.map((r) => `“${r}”`)).map((r) => z[0].map(() => r)),
    hovertemplate: `${opts.rowName || "token"} %{y} %{customdata}<br>${opts.colName || "feature"} %{x}<br>${opts.hoverName || "value"} %{z}<extra></extra>`,
  }];
  const ncols = z.length ? z[0].length : 0;
  draw(gd, data, {
    title: opts.title ? { text: opts.title, x: 0, xanchor: "left", font: { size: 13 } } : undefined,
    height,
    shapes: opts.row === undefined || opts.row === null ? [] : [rowBox(opts.row, ncols)],
    margin: { l: 20, r: 10, t: opts.title ? 40 : 20, b: 40 },
    xaxis: { title: { text: opts.colTitle || "feature (0..d−1)" }, showgrid: false, zeroline: false },
    yaxis: { title: { text: opts.rowTitle || "" }, ...tokenAxis(rows, height - 60), autorange: "reversed" },
  }, opts.name || gd.id);
}

// A heat strip over a prompt's tokens: one row per entry of z (a layer, or one head of a layer),
// one column per token, Viridis from zmin to zmax (0..1). opts: rowNames, colorTitle, hoverName,
// name (download name), mark (a column outlined, e.g. the position read).
export function tokenStrip(gd, z, labels, opts = {}) {
  const names = opts.rowNames || z.map((_, r) => String(r));
  const height = Math.max(170, Math.min(900, 130 + z.length * 22));
  const data = [{
    type: "heatmap", z, x: labels.map((_, i) => i), y: z.map((_, r) => r), colorscale: SEQ,
    zmin: opts.zmin ?? 0, zmax: opts.zmax ?? 1, xgap: 1, ygap: 1,
    colorbar: { title: { text: opts.colorTitle || "", side: "right" }, thickness: 10 },
    customdata: z.map((_, r) => labels.map((t) => [names[r], t])),
    hovertemplate: `%{customdata[0]} · token %{x} “%{customdata[1]}”<br>${opts.hoverName || "value"} %{z}<extra></extra>`,
  }];
  const shapes = opts.mark === undefined || opts.mark === null ? [] : [{ type: "rect", xref: "x", yref: "paper",
    x0: opts.mark - 0.5, x1: opts.mark + 0.5, y0: 0, y1: 1, line: { color: OKABE.vermillion, width: 2 }, fillcolor: "rgba(0,0,0,0)" }];
  return draw(gd, data, {
    height, shapes, margin: { l: 20, r: 10, t: 10, b: 10 },
    xaxis: { ...tokenAxis(labels, Math.max(300, (gd.clientWidth || 900) - 220), {}, SLANTED_TICK_PX), side: "bottom", tickangle: -60 },
    yaxis: { tickmode: "array", tickvals: names.map((_, r) => r), ticktext: names, autorange: "reversed",
      tickfont: { family: MONO, size: 11 }, showgrid: false, zeroline: false, automargin: true },
  }, opts.name || gd.id);
}

const plainAxis = { tickmode: "auto", nticks: 9, showgrid: false, zeroline: false, automargin: true, ticklabeloverflow: "allow" };

// Rows of a causal model's attention stop at the diagonal (the API leaves out the masked keys,
// whose weight is exactly 0): pad each row to n columns with `fill` so a square can be drawn.
function padRows(rows, n, fill = null) {
  return rows.map((r) => (r.length < n ? [...r, ...Array(n - r.length).fill(fill)] : r));
}

// The square's side, the figure's size and margins and the axes' ticks: opts.fit sizes it to the
// element's width, else it follows opts.cell / minSide / maxSide.
function squareSize(gd, labels, opts) {
  const n = labels.length;
  let side;
  let margin;
  let width;
  let height;
  let axis;
  if (opts.fit) {
    // as large as the element allows (220..620 px, however few the tokens: a small map alone in its
    // row leaves most of the row empty), with room for the labels above and left: a first guess of
    // the side picks the (thinned) labels, the margins fit the labels picked
    const bar = opts.colorbar === false ? 0 : 90;
    const room = (gd.clientWidth || 900) - bar - 10;
    const guess = Math.max(220, Math.min(620, room - 180));
    axis = opts.plain ? plainAxis : tokenAxis(labels, guess, { automargin: false });
    const font = opts.plain ? 12 : axis.tickfont.size;
    const longest = Math.max(1, ...(opts.plain ? [String(n)] : axis.ticktext).map((s) => [...s].length));
    const labelPx = Math.min(140, Math.ceil(longest * font * 0.62) + 8);
    margin = { l: labelPx + 40, r: 10, t: Math.ceil(labelPx * 0.87) + 70, b: 10 };
    side = Math.max(220, Math.min(620, room - margin.l));
    if (side < guess && !opts.plain) axis = tokenAxis(labels, side, { automargin: false });
    width = side + margin.l + margin.r + bar;
    height = side + margin.t + margin.b;
  } else {
    side = Math.max(180, Math.min(opts.maxSide || 560, Math.max(n * (opts.cell || 14), opts.minSide || 0)));
    margin = { l: 10, r: 10, t: opts.title ? 70 : 40, b: 10 };
    width = side + (opts.colorbar === false ? 90 : 150);
    height = side + 110;
    axis = opts.plain ? plainAxis : tokenAxis(labels, side);
  }
  return { side, margin, width, height, axis };
}

// The overlays over the masked cells of `data[0]`: the causal mask, a sliding window's, and "−∞"
// written in the masked cells while they are large enough to read.
function maskTraces(data, z, pairs, n, side, hasNull, opts) {
  if (opts.causalMask) {
    data.push({
      type: "heatmap", name: "causal mask", x: data[0].x, y: data[0].y,
      z: z.map((r, q) => r.map((_, k) => (k > q ? 1 : null))),
      colorscale: [[0, MASKED], [1, MASKED]], showscale: false, hoverongaps: false, customdata: pairs,
      hovertemplate: "token %{y} “%{customdata[0]}” cannot see the later token %{x} “%{customdata[1]}” (causal mask)<extra></extra>",
    });
  }
  if (opts.window > 0) {
    data.push({
      type: "heatmap", name: "window mask", x: data[0].x, y: data[0].y,
      z: z.map((r, q) => r.map((_, k) => (outsideWindow(opts.window, q, k) ? 1 : null))),
      colorscale: [[0, MASKED], [1, MASKED]], showscale: false, hoverongaps: false, customdata: pairs,
      hovertemplate: opts.plain ? `${opts.yTitle} %{y} · ${opts.xTitle} %{x}: outside the sliding window of ${opts.window} (masked)<extra></extra>`
        : `token %{y} “%{customdata[0]}” cannot see %{x} “%{customdata[1]}”: outside the sliding window of ${opts.window} (masked)<extra></extra>`,
    });
  }
  if (hasNull && side / n >= 16) {
    // write −∞ into the masked cells (a sliding window's too) while they are large enough to read
    const cells = { type: "scatter", mode: "text", hoverinfo: "skip", showlegend: false,
      x: [], y: [], text: [], textfont: { family: MONO, size: n > 14 ? 9 : 11, color: "#444" } };
    const masked = (v, q, k) => v === null || outsideWindow(opts.window || 0, q, k);
    z.forEach((r, q) => { r.forEach((v, k) => { if (masked(v, q, k)) { cells.x.push(k); cells.y.push(q); cells.text.push("−∞"); } }); });
    data.push(cells);
  }
}

// A (T x T) query-by-key map. `z` may hold null (drawn as the masked "−∞"); rows shorter than T
// (a causal model's attention) are padded with empty cells, which causalMask covers.
// opts: signed, limit, zmin/zmax, colorTitle, hoverName, title, xTitle/yTitle, row (outlined),
//   cell/minSide/maxSide (the square's size), colorbar (false: none), tickangle, plain (numbered axes),
//   name (download name), traceName,
//   fit: size the square to the element's width, margins to the longest label (the big head map),
//   causalMask: cover the cells above the diagonal (a key after its query) with a light overlay
//     named "causal mask"; only for a model that has the mask (the response's `causal` says so).
//   window: a sliding window's width (the response's `window`; 0 none): the keys it hides are
//     covered by an overlay named "window mask" the same way.
//   shapes, annotations: more layout shapes / annotations (e.g. marks on the square)
export function squareHeatmap(gd, z, labels, opts = {}) {
  const n = labels.length;
  const signed = !!opts.signed;
  const lim = signed ? (opts.limit ?? signedLimit(z)) : null;
  const hasNull = z.some((r) => r.some((v) => v === null));
  const text = opts.plain ? null : padRows(z.map((r) => r.map((v) => (v === null ? "−∞ (masked)" : String(v)))), n, "");
  z = padRows(z, n);
  const pairs = opts.plain ? null : labels.map((q) => labels.map((k) => [q, k]));
  const { side, margin, width, height, axis } = squareSize(gd, labels, opts);
  const data = [{
    type: "heatmap", name: opts.traceName, z, x: labels.map((_, i) => i), y: labels.map((_, i) => i),
    colorscale: signed ? SIGNED : SEQ,
    zmin: signed ? -lim : (opts.zmin ?? 0), zmax: signed ? lim : (opts.zmax ?? 1), zmid: signed ? 0 : undefined,
    colorbar: opts.fit ? { title: { text: opts.colorTitle || "" }, thickness: 14, len: 1, lenmode: "fraction" }
      : { title: { text: opts.colorTitle || "", side: "right" }, thickness: 10 },
    showscale: opts.colorbar !== false,
    text, hoverongaps: true,
    customdata: pairs,
    hovertemplate: `query %{y} “%{customdata[0]}” · key %{x} “%{customdata[1]}”<br>${opts.hoverName || "value"} %{text}<extra></extra>`,
  }];
  if (opts.plain) {   // numbered rows and columns (positions): no per-cell labels needed
    delete data[0].text;
    delete data[0].customdata;
    data[0].hovertemplate = `${opts.yTitle} %{y} · ${opts.xTitle} %{x}<br>${opts.hoverName || "value"} %{z}<extra></extra>`;
  }
  maskTraces(data, z, pairs, n, side, hasNull, opts);
  const title = !opts.title ? undefined : opts.fit
    ? { text: opts.title, x: 0, xanchor: "left", xref: "paper", y: 1, yanchor: "top", yref: "container", pad: { t: 8 } }
    : { text: opts.title, x: 0, xanchor: "left", font: { size: 13 } };
  // fit: the margins are already sized to the labels, so the square keeps its side
  const axisTitle = (t) => (opts.fit ? { text: t || "", standoff: 6 } : { text: t || "" });
  return draw(gd, data, {
    title, width, height, margin,
    plot_bgcolor: hasNull ? "#e9e9e9" : "#fff",
    shapes: [...(opts.row === undefined || opts.row === null ? [] : [rowBox(opts.row, n)]), ...(opts.shapes || [])],
    annotations: opts.annotations || [],
    xaxis: { ...axis, side: "top", tickangle: opts.tickangle ?? -60, range: [-0.5, n - 0.5], constrain: "domain", title: axisTitle(opts.xTitle) },
    yaxis: { ...axis, range: [n - 0.5, -0.5], constrain: "domain", scaleanchor: "x", title: axisTitle(opts.yTitle) },
  }, opts.name || gd.id);
}
