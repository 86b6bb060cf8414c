"""Benchmark: how fast POST /api/v1/circuits scores edges (issue #42's targets: AtP and EAP-IG of every
edge of the built-in model under 5 s, exact scores of every edge under 60 s, on 2 cores without bf16).

1. The built-in model (6 blocks, 4 heads, d=192: 1,108 edges) on its shipped 32-token pair
   (dead-caesar), through the explain layer as the endpoint runs it, its caches emptied first, with
   the served model's torch threads: AtP alone, EAP-IG (10 steps) alone, the exact scores of every
   edge (the job form's work), and the faithfulness curve with the smallest circuit.
2. What a graph run costs against a plain forward pass of the same rows (the baseline, timed in
   this process): the exact scores' 1,108 rows against 1,108 plain passes of the clean prompt (and
   that ratio over the share of a plain pass's block-positions model/circuits.py's exact_share counts
   for them), and one gradient row against one plain pass. server/explain/circuits.py's EXACT_COST,
   GRAPH_COST and GRADIENT_COST, which price a request before it runs, come from these ratios.
3. GPT-2 small's shape (12 blocks, 12 heads, d=768, random weights: 32,491 edges) on a 20-token pair,
   every core: AtP, EAP-IG (10 steps), and the exact scores of the top 256 edges (every edge's:
   benchmarks/every_edge.py).

Inference is float32 on every CPU, so the figures do not depend on bf16 units. Prints one JSON line
per figure (best of --repeat runs) and the machine's CPU.

    python benchmarks/circuits.py [--repeat 3] [--no-gpt2]
"""

from __future__ import annotations

import argparse
import json

import torch
from common import best, cpu_name

from gptscope.model import circuits as cc
from gptscope.model import patching as pt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.config import ALL_CORES, BUILTIN_CHECKPOINT
from gptscope.server.explain import circuits as ex
from gptscope.server.explain import patch_pairs
from gptscope.server.schemas.circuits import CircuitRequest
from gptscope.server.service import ModelService


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def builtin(repeat: int) -> None:
    service = ModelService(BUILTIN_CHECKPOINT)
    pair = next(p for p in patch_pairs.pairs(service) if p.name == "dead-caesar")
    base = dict(clean=pair.clean, corrupted=pair.corrupted, answer=pair.answer, wrong=pair.wrong)
    asks = {
        "atp": CircuitRequest(**base, methods=["atp"], rank_by="atp", exact="none"),
        "eap_ig (10 steps)": CircuitRequest(**base, methods=["eap_ig"], exact="none"),
        "exact, every edge (+ both estimates, the curve)": CircuitRequest(**base, exact="all"),
    }
    for name, req in asks.items():

        def once(req=req) -> dict:
            service.memo.clear()  # nothing cached: the runs, the scores
            return ex.compute(service, ex.plan(service, req, limit=ex.MAX_JOB_MACS)).model_dump()

        seconds = best(once, repeat)
        d = once()
        show(
            model="built-in", what=name, seconds=round(seconds, 3), edges=len(d["edges"]), runs=d["runs"],
            parts={s["method"]: s["seconds"] for s in d["scores"]},
            circuit_edges=len(d["circuit"]["edges"]), recovered=d["circuit"]["recovered"],
        )  # fmt: skip
    costs(service, repeat)


def costs(service: ModelService, repeat: int) -> None:
    """A graph run's and a gradient row's cost against plain forward passes of the same rows."""
    pair = next(p for p in patch_pairs.pairs(service) if p.name == "dead-caesar")
    clean_ids, corrupt_ids = (service.encoding.encode_ordinary(t) for t in (pair.clean, pair.corrupted))
    reduce = pt.logit_diff(pair.answer, pair.wrong)
    with service.run() as m:
        graph = cc.graph_of(m.cfg)
        clean, corrupt = cc.record(m, clean_ids), cc.record(m, corrupt_ids)
        rows = graph.n_edges
        chunk = cc.row_chunks(m.cfg, len(clean_ids), rows)
        idx = torch.tensor([clean_ids])

        def plain() -> None:
            for lo in range(0, rows, chunk):
                m(idx.expand(min(chunk, rows - lo), -1), last_only=True)

        def exact() -> None:  # as the server asks: only the two logits the metric reads
            cc.exact(m, graph, clean, corrupt, range(rows), reduce, columns=[pair.answer, pair.wrong])

        def plain_one() -> None:
            m(idx, last_only=True)

        def grad_row() -> None:
            cc.attribution(m, graph, clean, corrupt, reduce, steps=0)

        t_plain, t_exact = best(plain, repeat), best(exact, repeat)
        t_one, t_grad = best(plain_one, 5 * repeat), best(grad_row, 5 * repeat)
    s0 = cc.first_changed(m.cfg, clean_ids, corrupt_ids)
    share = float(cc.exact_share(m.cfg, len(clean_ids), s0, graph.reader_layer()).mean())
    show(
        model="built-in", what="exact rows against plain passes", rows=rows, plain_s=round(t_plain, 3),
        exact_s=round(t_exact, 3), ratio=round(t_exact / t_plain, 2), first_changed=s0,
        modelled_share=round(share, 3), per_share_ratio=round(t_exact / t_plain / share, 2),
    )  # fmt: skip
    show(
        model="built-in", what="one gradient row against one plain pass", plain_s=round(t_one, 4),
        gradient_s=round(t_grad, 4), ratio=round(t_grad / t_one, 2),
    )  # fmt: skip


def gpt2_shape(repeat: int) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(ALL_CORES)
    cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=768)
    model = GPT(cfg).eval().set_mode("explain")
    clean_ids = torch.randint(0, 50257, (20,)).tolist()
    corrupt_ids = list(clean_ids)
    corrupt_ids[3] = (clean_ids[3] + 1) % 50257
    reduce = pt.logit_diff(11, 12)
    with torch.inference_mode():
        graph = cc.graph_of(cfg)
        clean, corrupt = cc.record(model, clean_ids), cc.record(model, corrupt_ids)
        for name, fn in (
            ("atp", lambda: cc.attribution(model, graph, clean, corrupt, reduce, 0)),
            ("eap_ig (10 steps)", lambda: cc.attribution(model, graph, clean, corrupt, reduce, 10)),
        ):
            show(model="gpt2-small shape", what=name, edges=graph.n_edges, seconds=round(best(fn, repeat), 3))
        top = torch.argsort(-cc.attribution(model, graph, clean, corrupt, reduce, 10).abs())[:256].tolist()
        t = best(lambda: cc.exact(model, graph, clean, corrupt, top, reduce, columns=[11, 12]), repeat)
        show(
            model="gpt2-small shape",
            what="exact, top 256 edges",
            seconds=round(t, 3),
            per_edge_ms=round(1000 * t / 256, 1),
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-gpt2", action="store_true", help="skip GPT-2 small's shape")
    a = ap.parse_args()
    show(cpu=cpu_name(), cores=ALL_CORES, torch=torch.__version__)
    builtin(a.repeat)
    if not a.no_gpt2:
        gpt2_shape(a.repeat)


if __name__ == "__main__":
    main()
