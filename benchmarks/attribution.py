"""Benchmark: how fast an attribution graph is made (issue #43's target: a 32-token prompt's graph on the
built-in model in under 10 s, with progress, on 2 cores without bf16).

1. The built-in model and its shipped transcoder set, on the shipped Caesar prompt (32 tokens) and on
   a 64-token passage: the whole POST /api/v1/attribution answer (trace, every computed feature's
   incoming edges, pruning, the answer) with the served model's torch threads, at max_rows 256, 1024
   (the default) and 4096, and its parts; and the same answer as a job computes it (POST
   /api/v1/attribution/jobs, what the page starts: the build's batches on every core), `job_seconds`.
2. One batch of rows of the gradient pass against one plain forward pass of the same rows (the
   baseline, timed in this process).
3. An intervention (POST /api/v1/attribution/intervene: two forward passes).

Inference is float32 on every CPU path. Prints one JSON line per figure (best of --repeat runs) and
the machine's CPU.

    python benchmarks/attribution.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json

import torch
from common import best, cpu_name

from gptscope.model import attribution as at
from gptscope.server.config import ALL_CORES, BUILTIN_CHECKPOINT
from gptscope.server.explain import attribution as ex
from gptscope.server.explain import patch_pairs
from gptscope.server.models import ModelRegistry
from gptscope.server.schemas.attribution import AttributionRequest, Intervention, SteerRequest
from gptscope.server.transcoders import TRANSCODERS as store

PASSAGE = (
    "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
    "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief"
)


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    show(cpu=cpu_name(), cores=ALL_CORES, torch=torch.__version__)
    from gptscope.server.config import Settings

    service = ModelRegistry(Settings(checkpoint=BUILTIN_CHECKPOINT)).load(BUILTIN_CHECKPOINT)
    loaded = store.get(service, None)
    caesar = next(p for p in patch_pairs.pairs(service) if p.name == "dead-caesar").clean
    for name, text in (("caesar (32 tokens)", caesar), ("passage", PASSAGE)):
        for rows in (256, 1024, 4096):
            req = AttributionRequest(text=text, max_rows=rows)
            p = ex.plan(service, req, limit=ex.MAX_JOB_ROWS)
            seconds = best(lambda p=p: ex.compute(service, p), a.repeat)
            job = best(lambda p=p: ex.compute_job(service, p, lambda *_: None, lambda: False), a.repeat)
            d = ex.compute(service, p)
            show(
                prompt=name, tokens=len(p.ids), max_rows=rows, seconds=round(seconds, 3),
                job_seconds=round(job, 3), rows=d.rows,
                active=d.active_features, kept=d.kept_features, edges=len(d.edges) + d.edges_cut,
                error_influence=d.error_influence,
            )  # fmt: skip
    ids = service.encoding.encode_ordinary(caesar)
    with service.run() as m:
        tr = at.trace(m, loaded.codes, ids)
        rows = at.rows_per_batch(m.cfg, len(ids))
        picked = torch.nonzero(tr.layer == m.cfg.n_layer - 1).flatten()[:rows]
        targets = [at.Target(int(tr.layer[i]), int(tr.position[i]), int(tr.feature[i])) for i in picked]
        batch = best(lambda: at.edges_into(m, loaded.codes, tr, targets), 5 * a.repeat)
        idx = torch.tensor([ids]).expand(len(targets), -1)
        plain = best(lambda: m(idx, last_only=True), 5 * a.repeat)
    show(what="a batch of gradient rows (last block's features) against plain passes", rows=len(targets),
         gradient_s=round(batch, 4), plain_s=round(plain, 4), ratio=round(batch / plain, 2))  # fmt: skip
    top = int(tr.act.argmax())
    req = SteerRequest(
        text=caesar,
        interventions=[
            Intervention(layer=int(tr.layer[top]), position=int(tr.position[top]), feature=int(tr.feature[top]))
        ],
    )
    show(what="intervention", seconds=round(best(lambda: ex.steer(service, req), 5 * a.repeat), 4))


if __name__ == "__main__":
    main()
