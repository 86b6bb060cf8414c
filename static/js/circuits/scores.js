// The answer's scores by edge: each method's `values` put at the edges it covers (every edge, or the
// `edges` an exact score was asked for), null where a method did not score an edge. No number is made
// here: the values are the answer's, only placed.

export const METHOD_LABELS = { exact: "exact", eap_ig: "EAP-IG", atp: "AtP" };

// { method: [score or null per edge] } in the order exact, EAP-IG, AtP (those the answer has).
export function edgeScores(res) {
  const out = {};
  for (const m of Object.keys(METHOD_LABELS)) {
    const s = res.scores.find((x) => x.method === m);
    if (!s) continue;
    if (s.edges === null) out[m] = s.values;
    else {
      out[m] = res.edges.map(() => null);
      s.edges.forEach((e, i) => { out[m][e] = s.values[i]; });
    }
  }
  return out;
}
