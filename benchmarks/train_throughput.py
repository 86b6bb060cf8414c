"""Benchmark: training speed of the default recipe on both precision paths, against AdamW and against
torch.optim.Muon as the trainer used it before (bf16 orthogonalisation on every CPU).

Two parts, all in this one process on this machine:

1. Updates: `gptscope.model.train.train()` itself (the cpu preset, batch 8 x 128, the built-in corpus's BPE)
   for --steps updates per row, after --warmup updates that are not counted; ms per update (median)
   and tokens/s, for

       default recipe, fp32 path     Muon orthogonalised in float32, no autocast
       default recipe, bf16 path     Muon orthogonalised in bfloat16, bf16 autocast
       AdamW, fp32 / bf16            the same run with --optimizer adamw
       before, fp32 autocast         torch.optim.Muon (bf16 orthogonalisation) without autocast: the
                                     default on a CPU without bf16 units until model/muon.py

   The bf16 rows are what a CPU with bf16 units runs; on one without them every bf16 matmul is
   emulated, so they are slow there, and that is the point of the fp32 path.
2. One optimizer step over the cpu preset's 16 block matrices (random gradients): torch.optim.Muon,
   ours in bf16, ours in fp32, AdamW.
3. With --threads-and-data (issue #67: data loading and thread settings, measured): the batch's own cost
   (`get_batch`, median of 200, the default recipe's and the induction experiment's, whose rows repeat
   spans of themselves), and updates of both on one torch thread against every core, fp32, in turn, the
   better of two rounds.

    python benchmarks/train_throughput.py [--steps 20] [--warmup 5] [--skip-bf16] [--threads-and-data]

Prints one JSON object; `native` says which path this machine's probe picks and why: its bf16/fp32
matmul time and, where bf16 is native, its bf16/fp32 training-update time (the probe's; model/precision.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from unittest import mock

import torch

from gptscope.model import train as trainer
from gptscope.model.gpt import GPT, preset_config
from gptscope.model.muon import Muon
from gptscope.model.precision import native_precision


class TorchMuon(torch.optim.Muon):
    """torch.optim.Muon with the trainer's keyword (ignored): what the trainer ran before."""

    def __init__(self, params, *, ortho_dtype=None, **kw) -> None:
        super().__init__(params, **kw)


def run_updates(label: str, steps: int, warmup: int, **fields) -> dict:
    """`warmup + steps` updates of train() with these TrainConfig fields; the last `steps` timed."""
    tc = trainer.TrainConfig(
        corpus="shakespeare", max_steps=warmup + steps, eval_interval=10**9, device="cpu", **fields
    )
    times: list[float] = []
    last = [0.0]

    def on_event(e: dict) -> None:
        if e["type"] == "start":
            last[0] = time.perf_counter()
        elif e["type"] == "step":
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

    res = trainer.train(tc, progress=False, on_event=on_event)
    timed = times[warmup:]
    ms = statistics.median(timed) * 1e3
    used = res.meta.train_config
    tokens = used["batch_size"] * res.model.cfg.n_ctx
    return {
        "run": label,
        "optimizer": used["optimizer"],
        "precision": used["precision"],
        "ms_per_update": round(ms, 1),
        "tokens_per_s": round(tokens / ms * 1e3),
        "updates_timed": len(timed),
    }


def optimizer_step_ms(reps: int = 3) -> dict:
    """One step over the cpu preset's block matrices, each optimizer timed on the same gradients."""
    model = GPT(preset_config("cpu", vocab_size=2048))
    mats = [p for n, p in model.named_parameters() if p.dim() == 2 and n.startswith("blocks.")]
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) for p in mats]
    rows = {}
    for name, make in [
        ("torch.optim.Muon (bf16)", lambda ps: torch.optim.Muon(ps, lr=0.02, adjust_lr_fn="original")),
        (
            "gptscope.model.muon.Muon, bf16",
            lambda ps: Muon(ps, lr=0.02, adjust_lr_fn="original", ortho_dtype=torch.bfloat16),
        ),
        (
            "gptscope.model.muon.Muon, fp32",
            lambda ps: Muon(ps, lr=0.02, adjust_lr_fn="original", ortho_dtype=torch.float32),
        ),
        ("AdamW", lambda ps: torch.optim.AdamW(ps, lr=5e-3)),
    ]:
        ps = [torch.nn.Parameter(p.detach().clone()) for p in mats]
        opt = make(ps)
        for p, gr in zip(ps, grads):
            p.grad = gr
        opt.step()  # state allocated, kernels built
        t = time.perf_counter()
        for _ in range(reps):
            opt.step()
        rows[name] = round((time.perf_counter() - t) / reps * 1e3, 2)
    return {"matrices": len(mats), "ms": rows}


def threads_and_data(steps: int, warmup: int) -> dict:
    """Part 3: what loading a batch costs beside an update, and an update on 1 torch thread against every core."""
    from gptscope.server.experiments import INDUCTION

    runs = {
        "default recipe": {"precision": "fp32"},
        "induction experiment": {k: INDUCTION[k] for k in ("preset", "vocab_size", "batch_size", "precision")}
        | {"repeats": 1.0},
    }
    data = torch.randint(0, 2048, (1_400_000,))  # about the built-in corpus's training split in BPE tokens
    batch_ms = {}
    for name, (batch, seq, repeats) in {"default recipe": (8, 128, 0.0), "induction experiment": (32, 64, 1.0)}.items():
        times = []
        for step in range(200):
            t = time.perf_counter()
            trainer.get_batch(data, batch, seq, 7, step, 0, repeats)
            times.append(time.perf_counter() - t)
        batch_ms[name] = round(statistics.median(times) * 1e3, 3)
    cores, kept = max(1, os.cpu_count() or 1), torch.get_num_threads()
    ms: dict[str, dict[int, float]] = {name: {} for name in runs}
    for _ in range(2):
        for threads in sorted({1, cores}):
            torch.set_num_threads(threads)
            for name, fields in runs.items():
                got = run_updates(name, steps, warmup, **fields)["ms_per_update"]
                ms[name][threads] = min(ms[name].get(threads, float("inf")), got)
    torch.set_num_threads(kept)
    return {
        name: {
            "get_batch_ms": batch_ms[name],
            "ms_per_update_by_threads": ms[name],
            "every_core_speedup": round(ms[name][1] / ms[name][cores], 2),
        }
        for name in runs
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed updates per row")
    p.add_argument("--warmup", type=int, default=5, help="updates before the timed ones")
    p.add_argument(
        "--skip-bf16", action="store_true", help="leave out the bf16 rows (slow on a CPU without bf16 units)"
    )
    p.add_argument("--threads-and-data", action="store_true", help="also part 3: batches' cost, 1 thread vs all")
    a = p.parse_args()

    native = native_precision("cpu")
    rows = []
    paths = ["fp32"] if a.skip_bf16 else ["fp32", "bf16"]
    for prec in paths:
        rows.append(run_updates(f"default recipe, {prec} path", a.steps, a.warmup, precision=prec))
        rows.append(run_updates(f"AdamW, {prec}", a.steps, a.warmup, precision=prec, optimizer="adamw"))
    with mock.patch.object(trainer, "Muon", TorchMuon):
        rows.append(run_updates("before: torch.optim.Muon, fp32 autocast", a.steps, a.warmup, precision="fp32"))
    base = rows[-1]["ms_per_update"]
    for r in rows:
        r["speedup_vs_before"] = round(base / r["ms_per_update"], 2)
    adamw = {r["precision"]: r["ms_per_update"] for r in rows if r["optimizer"] == "adamw"}
    for r in rows:
        if r["optimizer"] == "muon" and r["precision"] in adamw and not r["run"].startswith("before"):
            r["updates_vs_adamw"] = round(adamw[r["precision"]] / r["ms_per_update"], 2)
    print(
        json.dumps(
            {
                "native": {
                    "precision": native.precision,
                    "why": native.why,
                    "matmul_bf16_vs_fp32": native.slowdown,
                    "update_bf16_vs_fp32": native.update_ratio,  # the probe's own updates (issue #67)
                },
                "recipe": {path: trainer.RECIPES[f"cpu-{path}"] for path in paths},
                "threads": torch.get_num_threads(),
                "updates": rows,
                "optimizer_step": optimizer_step_ms(),
            }
            | ({"threads_and_data": threads_and_data(a.steps, a.warmup)} if a.threads_and_data else {}),
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
