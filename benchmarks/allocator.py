"""Benchmark: training updates with glibc's allocator as it comes, and with freed memory kept for the next
update (model/allocator.py, issue #67).

For each workload, `gptscope.model.train.train()` itself runs --warmup + --steps updates (the last --steps
timed: wall ms per update, CPU ms per update, page faults per update) in three arms:

    glibc default            train() with keep_freed() replaced by nothing
    keep_freed               train() as it is, in a process that did not call one_arena()
    one_arena + keep_freed   as `gptscope` runs it (server/cli.py calls one_arena() first thing)

each in either thread a run has: the main thread (`gptscope train`) or another one (a training job of the
app). glibc's own adjustment of its thresholds cannot be restored once set, so each arm runs in a fresh
process of its own (this script again, with --child), the arms in turn, --rounds times; the best round of
each is printed, with its ratio to the default arm's. Float32 on one torch thread unless --threads.

    python benchmarks/allocator.py [--steps 30] [--warmup 5] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import threading
import time
from unittest import mock

from common import cpu_name

ARMS = ("glibc default", "keep_freed", "one_arena + keep_freed")
WORKLOADS = {
    "induction experiment: tiny, vocabulary 2,048, batch 32": dict(
        preset="tiny", vocab_size=2048, batch_size=32, repeats=1.0
    ),
    "default recipe: cpu preset": {},
}
PLACES = ("main thread", "job thread")


def child(arm: str, workload: str, place: str, steps: int, warmup: int, threads: int) -> dict:
    from gptscope.model import allocator

    if arm == "one_arena + keep_freed":
        allocator.one_arena()
    import torch

    from gptscope.model import train as trainer

    marks: list[tuple[float, float, int]] = []

    def on_event(e: dict) -> None:
        if e["type"] == "step" and e["record"].step in (warmup, warmup + steps):
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            marks.append((time.perf_counter(), time.process_time(), faults))

    tc = trainer.TrainConfig(
        corpus="shakespeare",
        max_steps=warmup + steps,
        eval_interval=10**9,
        log_interval=1,
        device="cpu",
        precision="fp32",
        snapshots=(),
        **WORKLOADS[workload],
    )

    def run() -> None:
        torch.set_num_threads(threads)
        trainer.train(tc, progress=False, on_event=on_event)

    patch = mock.patch.object(trainer, "keep_freed", contextlib.nullcontext) if arm == "glibc default" else None
    with patch or contextlib.nullcontext():
        if place == "main thread":
            run()
        else:
            t = threading.Thread(target=run)
            t.start()
            t.join()
    (w0, c0, f0), (w1, c1, f1) = marks
    return {
        "wall_ms": round((w1 - w0) / steps * 1e3, 1),
        "cpu_ms": round((c1 - c0) / steps * 1e3, 1),
        "faults": round((f1 - f0) / steps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", nargs=3, metavar=("ARM", "WORKLOAD", "PLACE"))
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child, a.steps, a.warmup, a.threads)))
        return
    rows = []
    for workload in WORKLOADS:
        for place in PLACES:
            best: dict[str, dict] = {}
            for _ in range(a.rounds):
                for arm in ARMS:
                    argv = [sys.argv[0], "--child", arm, workload, place]
                    argv += ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads)]
                    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    if arm not in best or r["wall_ms"] < best[arm]["wall_ms"]:
                        best[arm] = r
            base = best["glibc default"]
            for arm in ARMS:
                r = best[arm]
                ratio = {k: round(r[k] / base[k], 3) for k in ("wall_ms", "cpu_ms")}
                rows.append({"workload": workload, "thread": place, "arm": arm, **r, "ratio_to_default": ratio})
    print(json.dumps({"cpu": cpu_name(), "threads": a.threads, "path": "fp32", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
