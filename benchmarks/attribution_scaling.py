"""Benchmark: how an attribution graph's time grows with its rows (issue #67: the 4,096/1,024-row time ratio
on the 63-token passage of benchmarks/attribution.py, target at most 2.5).

The built-in model and its shipped transcoder set, float32, 2 threads (--threads), best of --repeat
runs, nothing cached between them: at each max_rows, the whole answer as POST /api/v1/attribution/jobs
computes it (trace, build, prune, the answer; the build's batches on the job's threads, as the page
starts it) and the build alone on as many threads, then the 4,096/1,024 ratio of each. --old also times
the build as it was before issue #67 (each round copies the graph and runs `influence`'s power iteration over all of it; the
same batches of gradient rows), which makes the same graph.

    python benchmarks/attribution_scaling.py [--repeat 2] [--rows 1024 4096] [--old]
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
from attribution import PASSAGE
from common import best, cpu_name

from gptscope.model import attribution as at
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.explain import attribution as ex
from gptscope.server.schemas.attribution import AttributionRequest
from gptscope.server.service import ModelService
from gptscope.server.transcoders import TRANSCODERS


def old_build(model, codes, tr: at.Trace, target: at.Target, max_rows: int) -> at.Graph:
    """The build before issue #67 (its rounds and batches, on today's edges_into)."""
    T, N = len(tr.ids), len(tr.act)
    g = at.Graph(target, torch.zeros(0, dtype=torch.long), at.edges_into(model, codes, tr, [target]))
    budget, done = min(max_rows, N), torch.zeros(N, dtype=torch.bool)
    fields = ("tokens", "features", "errors", "constant", "value")
    while int(done.sum()) < budget:
        infl = at.influence(g, tr)[0][T : T + N].masked_fill(done, -1.0)
        best = torch.argsort(-infl, stable=True)[: min(at.rows_per_batch(model.cfg, T), budget - int(done.sum()))]
        best = best[infl[best] > 0]
        if not len(best):
            break
        done[best] = True
        for li in tr.layer[best].unique().tolist():
            picked = best[tr.layer[best] == li]
            new = at.edges_into(
                model, codes, tr, [at.Target(li, int(tr.position[i]), int(tr.feature[i])) for i in picked]
            )
            edges = at.Edges(*(torch.cat([getattr(g.edges, f), getattr(new, f)]) for f in fields))
            g = at.Graph(target, torch.cat([g.rows, picked]), edges)
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs=2, default=[1024, 4096])
    ap.add_argument("--old", action="store_true", help="also time the build as it was before issue #67")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(json.dumps(dict(cpu=cpu_name(), threads=a.threads, torch=torch.__version__)), flush=True)
    service = ModelService(BUILTIN_CHECKPOINT)
    codes = TRANSCODERS.get(service, None).codes
    ids = service.encoding.encode_ordinary(PASSAGE)
    with service.run() as m:
        tr = at.trace(m, codes, ids)
    target = at.Target(None, len(ids) - 1, up=int(tr.logits.argmax()))
    builds = {"build": partial(at.build, workers=a.threads)} | ({"old build": old_build} if a.old else {})
    times: dict[str, list[float]] = {}
    for rows in a.rows:
        p = ex.plan(service, AttributionRequest(text=PASSAGE, max_rows=rows), limit=ex.MAX_JOB_ROWS)
        answer = partial(ex.compute, service, p, workers=a.threads)  # compute_job's, on --threads
        times.setdefault("answer", []).append(best(answer, a.repeat))
        for name, fn in builds.items():

            def run(fn=fn, rows=rows):
                with torch.inference_mode():
                    return fn(service.model, codes, tr, target, rows)

            times.setdefault(name, []).append(best(run, a.repeat))
        row = {name: round(t[-1], 2) for name, t in times.items()}
        print(
            json.dumps(dict(tokens=len(ids), active=len(tr.act), max_rows=rows, rows=len(run().rows), **row)),
            flush=True,
        )
    ratio = {name: round(t[1] / t[0], 2) for name, t in times.items()}
    print(json.dumps({f"ratio {a.rows[1]}/{a.rows[0]}": ratio}), flush=True)


if __name__ == "__main__":
    main()
