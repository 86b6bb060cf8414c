"""Benchmark: per-layer against cross-layer transcoders on the built-in model, side by side on the same
held-out prompts (issue #64).

1. A CLT on the built-in model (unless --clt names one already trained): `gptscope transcoders --kind clt`
   with the shipped set's width and sparsity, 768 features and TopK 16 per block (so both replacements
   have the same features per block and the same L0 per block; the CLT's decoders are L (L + 1) / 2 = 21
   (768, 192) matrices to the per-layer set's 6), for --time-budget seconds on --threads cores.
2. On --prompts windows of --tokens held-out tokens (the text's held-out 10%, after the first 64 x 256
   tokens the sets' own figures were measured on, spread evenly over the rest), for the shipped per-layer
   set and the CLT: the loss with every MLP replaced (next-token loss at every position, and the share
   of the clean-vs-zeroed gap recovered); the top-1 agreement of the replacement's next token with the
   real model's (every position, and the last one: the graph's target); the attribution graph of the
   real model's top token at the last position (max_rows rows, pruned at 80% of the features' influence):
   its kept features, the error nodes' share of the influence, its seconds (trace, build, prune); and
   where the two graphs of one prompt disagree: the Jaccard overlap of their kept (layer, position) cells,
   and in each graph the share of its kept features' influence on cells the other graph does not keep.

Prints one JSON line per prompt and kind, then the means; then the first --time-prompts prompts' graphs
timed again, best of --repeat with the kinds alternating. Float32, torch threads as given.

    python benchmarks/clt_compare.py [--clt FOLDER | --train-out FOLDER] [--prompts 32] [--tokens 32] [--timing-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean, median

import torch
from common import cpu_name

from gptscope.model import attribution as at
from gptscope.model import checkpoint as ckpt
from gptscope.model import clt as cm
from gptscope.model import corpus as corpus_mod
from gptscope.model import transcoders as tcm
from gptscope.model.gpt import hook_name
from gptscope.server.config import BUILTIN_CHECKPOINT

SHIPPED = BUILTIN_CHECKPOINT / "transcoders" / "x4-topk16-s0"
FIGURE_TOKENS = 64 * 256  # the held-out tokens the sets' own figures were measured on (skipped here)


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def train(out: Path, budget: int, threads: int) -> float:
    cmd = ["gptscope", "transcoders", "--kind", "clt", "--time-budget", str(budget), "--threads", str(threads)]
    t = time.perf_counter()
    subprocess.run([*cmd, "--out", str(out)], check=True)
    seconds = time.perf_counter() - t
    show(trained=str(out), command=" ".join([*cmd, "--out", "FOLDER"]), wall_seconds=round(seconds, 1))
    return seconds


def windows(ck: ckpt.Checkpoint, n: int, tokens: int) -> torch.Tensor:
    """n windows of tokens + 1 held-out tokens (the last one only a target), spread over the held-out text."""
    _, val_text = corpus_mod.load(str((ck.meta.corpus or {}).get("name", "shakespeare"))).split()
    val = torch.from_numpy(corpus_mod.encode(ck.encoding(), val_text).astype("int64"))[FIGURE_TOKENS:]
    stride = (len(val) - tokens - 1) // n
    return torch.stack([val[i * stride : i * stride + tokens + 1] for i in range(n)])


@torch.no_grad()
def spliced(model, put, seqs: torch.Tensor) -> torch.Tensor:
    """Logits with MLP i's output replaced by put(i, its output, the MLP inputs so far)."""
    seen: dict[int, torch.Tensor] = {}
    hooks = []
    for i in range(model.cfg.n_layer):
        hooks.append((hook_name("ln2.hook_normalized", i), lambda t, _n, i=i: seen.__setitem__(i, t)))
        hooks.append((hook_name("hook_mlp_out", i), lambda t, _n, i=i: put(i, t, seen)))
    with model.hooks(hooks):
        return model(seqs)[0]


@torch.no_grad()
def runs(model, codes, seqs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Logits (S, T, V) of the real model, of the replacement (every MLP replaced at once) and with every
    MLP zeroed."""
    write = cm.write_fn(codes) if cm.is_clt(codes) else (lambda i, s: codes[i](s[i])[0])
    return {
        "clean": model(seqs)[0],
        "replaced": spliced(model, lambda i, t, seen: write(i, seen).to(t.dtype), seqs),
        "zeroed": spliced(model, lambda i, t, seen: torch.zeros_like(t), seqs),
    }


def replacement_figures(model, codes, seqs: torch.Tensor) -> dict:
    inputs, targets = seqs[:, :-1], seqs[:, 1:]
    logits = runs(model, codes, inputs)
    loss = {
        k: float(torch.nn.functional.cross_entropy(v.flatten(0, 1).float(), targets.flatten()))
        for k, v in logits.items()
    }
    top = {k: v.argmax(-1) for k, v in logits.items()}
    agree = top["replaced"] == top["clean"]
    return {
        "loss_clean": loss["clean"], "loss_replaced": loss["replaced"], "loss_zeroed": loss["zeroed"],
        "loss_recovered": 1 - (loss["replaced"] - loss["clean"]) / (loss["zeroed"] - loss["clean"]),
        "top1_agreement": float(agree.float().mean()), "top1_agreement_last": float(agree[:, -1].float().mean()),
    }  # fmt: skip


def graph(model, codes, ids: list[int], max_rows: int) -> dict:
    t = time.perf_counter()
    with torch.inference_mode():
        tr = at.trace(model, codes, ids)
        target = at.Target(None, len(ids) - 1, up=int(tr.logits.argmax()))
        g = at.build(model, codes, tr, target, max_rows)
        pr = at.prune(g, tr, node_threshold=0.8, edge_threshold=0.98, max_edges=2000)
    seconds = time.perf_counter() - t
    kept = pr.features
    cells: dict[tuple[int, int], float] = {}
    for f in kept.tolist():
        c = (int(tr.layer[f]), int(tr.position[f]))
        cells[c] = cells.get(c, 0.0) + float(pr.influence[f])
    return {
        "active": len(tr.act), "rows": len(g.rows), "kept": len(kept), "seconds": seconds,
        "error_share": float(pr.error_influence.sum()), "token_share": float(pr.token_influence.sum()),
        "cells": cells, "kept_layers": torch.bincount(tr.layer[kept], minlength=model.cfg.n_layer).tolist(),
    }  # fmt: skip


def disagreement(a: dict, b: dict) -> dict:
    """Jaccard of the kept (layer, position) cells; each graph's influence share on cells the other lacks."""
    ca, cb = set(a["cells"]), set(b["cells"])

    def only(g: dict, other: set) -> float:
        return sum(v for c, v in g["cells"].items() if c not in other) / max(1e-12, sum(g["cells"].values()))

    return {
        "jaccard": len(ca & cb) / max(1, len(ca | cb)),
        "per_layer_only": only(a, cb),
        "clt_only": only(b, ca),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clt", help="a trained CLT's folder (else one is trained into --train-out)")
    ap.add_argument("--per-layer", default=str(SHIPPED), help="the per-layer set (default: the shipped one)")
    ap.add_argument("--graph-prompts", type=int, help="graphs on the first this many prompts only (default: all)")
    ap.add_argument("--train-out", default="/tmp/clt-x4-topk16-s0")
    ap.add_argument("--time-budget", type=int, default=600)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--max-rows", type=int, default=1024)
    ap.add_argument(
        "--time-prompts", type=int, default=4, help="prompts whose graphs are timed again, best of --repeat"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timing-only", action="store_true", help="only the timing pass")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    show(cpu=cpu_name(), threads=a.threads, torch=torch.__version__, load=os.getloadavg())
    folder = Path(a.clt) if a.clt else Path(a.train_out)
    if not a.clt:
        train(folder, a.time_budget, a.threads)
    ck = ckpt.load(BUILTIN_CHECKPOINT)
    model = ck.model.eval().set_mode("explain")
    sets = {"per_layer": tcm.load_set(a.per_layer), "clt": cm.load_any(folder)}
    for kind, s in sets.items():
        m = s.meta
        show(kind=kind, set=s.name, steps=m["steps"], tokens=m["tokens"], train_seconds=m["train_seconds"],
             own_loss_recovered=m["quality"]["loss_recovered"],
             own_fve=[round(x["fve"], 4) for x in m["quality"]["layers"]],
             dead=[x["dead"] for x in m["quality"]["layers"]])  # fmt: skip
    seqs = windows(ck, a.prompts, a.tokens)
    if not a.timing_only:
        compare(model, sets, seqs, a.tokens, a.max_rows, a.graph_prompts)
    timing(model, sets, seqs[: a.time_prompts], a.max_rows, a.repeat)
    print(f"load after: {os.getloadavg()}", file=sys.stderr)


def timing(model, sets: dict, seqs: torch.Tensor, max_rows: int, repeat: int) -> None:
    """Each prompt's graph (trace, build, prune) per kind, best of `repeat`, the kinds alternating (the
    machine is shared: a best of interleaved runs is the fairest ratio)."""
    ratios = []
    for n, seq in enumerate(seqs):
        ids = seq[:-1].tolist()
        t = {k: [] for k in sets}
        for _ in range(repeat):
            for k, s in sets.items():
                t[k].append(graph(model, s.codes, ids, max_rows)["seconds"])
        ratios.append(min(t["clt"]) / min(t["per_layer"]))
        show(timed=n, **{k: round(min(v), 3) for k, v in t.items()}, ratio=round(ratios[-1], 2))
    show(timed_prompts=len(seqs), mean_ratio=round(mean(ratios), 2) if ratios else None, load=os.getloadavg())


def compare(model, sets: dict, seqs: torch.Tensor, tokens: int, max_rows: int, graphs: int | None) -> None:
    """The replacements' figures on every prompt, each prompt's two graphs, and the means."""
    for kind, s in sets.items():
        show(kind=kind, prompts=len(seqs), tokens=tokens, **replacement_figures(model, s.codes, seqs))
    rows = {k: [] for k in sets}
    dis = []
    for n, seq in enumerate(seqs[:graphs]):
        ids = seq[:-1].tolist()
        got = {k: graph(model, s.codes, ids, max_rows) for k, s in sets.items()}
        for k, g in got.items():
            rows[k].append(g)
            show(prompt=n, kind=k, **{x: v for x, v in g.items() if x != "cells"})
        dis.append(disagreement(got["per_layer"], got["clt"]))
        show(prompt=n, **dis[-1])
    for k, gs in rows.items():
        show(
            kind=k, mean_kept=mean(g["kept"] for g in gs), mean_active=mean(g["active"] for g in gs),
            mean_error_share=mean(g["error_share"] for g in gs), mean_seconds=mean(g["seconds"] for g in gs),
            median_seconds=median(g["seconds"] for g in gs),
            kept_by_layer=[round(mean(g["kept_layers"][i] for g in gs), 1) for i in range(model.cfg.n_layer)],
        )  # fmt: skip
    show(**{f"mean_{x}": mean(d[x] for d in dis) for x in dis[0]})


if __name__ == "__main__":
    main()
