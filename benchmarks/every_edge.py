"""Benchmark: the exact score of every edge of GPT-2 small's shape (issue #67: every edge within 60 s
on 2 cores), against plain forward passes of the same rows timed in the same process.

GPT-2 small's shape (12 blocks, 12 heads, d=768, GPT-2's 50,257-token vocabulary), random weights,
a 20-token prompt and its corruption at position 3 (as benchmarks/circuits.py's): 32,491 edges, each
scored by `model.circuits.exact` (one graph run from its reader's block on) as the server asks for a
logit difference (only its two logits computed; --all-logits: every logit). The baseline is as many
plain forward passes of the clean prompt (explain mode, the same arithmetic), batched as the old
exact scores batched their rows (`row_chunks`), timed on --plain rows in the same process and scaled.
Float32 on every CPU path; every core unless --threads says otherwise.

    python benchmarks/every_edge.py [--sample 2048] [--plain 2048] [--repeat 1] [--threads 2]

--sample N times N edges spread evenly over the edge numbers (so over every reader block in
proportion) and extrapolates to every edge; 0 (the default) times every edge.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from common import cpu_name

from gptscope.model import circuits as cc
from gptscope.model import patching as pt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.config import ALL_CORES


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def setup():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=768)
    model = GPT(cfg).eval().set_mode("explain")
    clean_ids = torch.randint(0, 50257, (20,)).tolist()
    corrupt_ids = list(clean_ids)
    corrupt_ids[3] = (clean_ids[3] + 1) % 50257
    return model, clean_ids, corrupt_ids


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=0, help="edges to time (0: every edge)")
    ap.add_argument("--repeat", type=int, default=1, help="best of this many runs of each")
    ap.add_argument("--plain", type=int, default=2048, help="plain passes to time (scaled to the rows)")
    ap.add_argument("--threads", type=int, default=ALL_CORES)
    ap.add_argument("--all-logits", action="store_true", help="compute every logit, not only the metric's two")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, clean_ids, corrupt_ids = setup()
    reduce = pt.logit_diff(11, 12)
    show(
        cpu=cpu_name(), cores=os.cpu_count(), torch=torch.__version__, threads=torch.get_num_threads(),
        precision=str(model.lm_head.weight.dtype), load_average=[round(x, 2) for x in os.getloadavg()],
    )  # fmt: skip
    with torch.inference_mode():
        graph = cc.graph_of(model.cfg)
        clean, corrupt = cc.record(model, clean_ids), cc.record(model, corrupt_ids)
        n = graph.n_edges
        edges = list(range(n)) if not a.sample or a.sample >= n else [i * n // a.sample for i in range(a.sample)]
        rows, T = len(edges), len(clean_ids)
        plain_rows = min(rows, a.plain)
        chunk = cc.row_chunks(model.cfg, T, plain_rows, writers=False)
        idx = torch.tensor([clean_ids])
        columns = None if a.all_logits else [11, 12]

        def plain() -> None:
            for lo in range(0, plain_rows, chunk):
                model(idx.expand(min(chunk, plain_rows - lo), -1), last_only=True)

        scores: list[torch.Tensor] = []

        def exact() -> None:
            scores.append(cc.exact(model, graph, clean, corrupt, edges, reduce, columns=columns))

        t_exact = t_plain = float("inf")
        for _ in range(a.repeat):  # interleaved, so that both see the same load
            t_plain = min(t_plain, timed(plain))
            t_exact = min(t_exact, timed(exact))
        s0 = cc.first_changed(model.cfg, clean_ids, corrupt_ids)
        share = float(cc.exact_share(model.cfg, T, s0, graph.reader_layer()[edges]).mean())
    t_plain *= rows / plain_rows  # as many plain passes as rows
    scale = n / rows
    show(
        model="gpt2-small shape", tokens=T, edges=n, timed_edges=rows, logits="all" if a.all_logits else "2",
        exact_s=round(t_exact, 2), every_edge_s=round(t_exact * scale, 1), per_edge_ms=round(1000 * t_exact / rows, 2),
        plain_rows_timed=plain_rows, plain_s=round(t_plain, 2), plain_every_edge_s=round(t_plain * scale, 1),
        ratio=round(t_exact / t_plain, 3), first_changed=s0, modelled_share=round(share, 3),
        per_share_ratio=round(t_exact / t_plain / share, 2),
        load_average=[round(x, 2) for x in os.getloadavg()], nonzero=int((scores[-1] != 0).sum()),
    )  # fmt: skip


if __name__ == "__main__":
    main()
