"""Benchmark: a run's timeline for 20 snapshots of the built-in model's shape (issue #65: under 2 minutes
on 2 cores), against the heads-over-training answer of the same snapshots timed in the same process.

The 20 snapshots are the built-in model's weights, each with its own small random perturbation (1% of
every weight's spread), stored as one series under a temporary data folder: every snapshot is a different
model of the shape (6 blocks, 4 heads, width 192, context 256, the built-in BPE), and every one has the
dead-caesar pair's effect, so its circuit is computed at each (the worst case: a young snapshot's pair has
no effect and skips it). The timeline is read with the request's defaults (an SAE and a tuned lens trained
per snapshot, the pair's EAP-IG circuit), as POST /api/v1/timeline/jobs reads it; then read again (every
snapshot kept). The baseline is GET /training/{id}/heads's work on the same snapshots: each snapshot's
role scores and in-context-learning score (server/explain/heads.py's snapshot_scores), from cold.
Float32; the job's threads (every core).

    python benchmarks/timeline.py [--snapshots 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import cpu_name

from gptscope.model import checkpoint as ckpt
from gptscope.server.config import ALL_CORES, BUILTIN_CHECKPOINT, Settings
from gptscope.server.explain import heads as explain_heads
from gptscope.server.explain import timeline as explain_timeline
from gptscope.server.models import ModelRegistry
from gptscope.server.runs import RunManager
from gptscope.server.schemas.timeline import TimelineRequest


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def make_series(data: Path, n: int) -> None:
    """n perturbed copies of the built-in model as models/bench/snapshots/step-NNNNNN (steps 0, 100, ...)."""
    base = ckpt.load(BUILTIN_CHECKPOINT)
    meta = {k: v for k, v in base.meta.to_dict().items() if k not in ("format", "version")}
    folder = data / "models" / "bench"
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        model = ckpt.load(BUILTIN_CHECKPOINT).model
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.01 * float(p.std()) if p.numel() > 1 else 0)
        ckpt.save(folder / "snapshots" / f"step-{100 * i:06d}", model, {**meta, "step": 100 * i})
    for f in (folder / "snapshots" / f"step-{100 * (n - 1):06d}").iterdir():
        shutil.copy2(f, folder / f.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshots", type=int, default=20)
    ap.add_argument("--threads", type=int, default=ALL_CORES)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    data = Path(tempfile.mkdtemp(prefix="gptscope-timeline-bench-"))
    try:
        make_series(data, a.snapshots)
        runs = RunManager(data)
        models = ModelRegistry(Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=data))
        plan = explain_timeline.plan(runs, models, TimelineRequest(run="models/bench"))

        t0 = time.perf_counter()
        for _, path in plan.snapshots:
            explain_heads.snapshot_scores(models, path)
        heads_s = time.perf_counter() - t0
        explain_heads._SNAPSHOT_SCORES = type(explain_heads._SNAPSHOT_SCORES)(64)  # the timeline from cold too

        t0 = time.perf_counter()
        result = explain_timeline.compute(models, plan)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        explain_timeline.compute(models, plan)
        kept = time.perf_counter() - t0
        per = [s.seconds for s in result.snapshots]
        show(
            benchmark="timeline",
            cpu=cpu_name(),
            threads=a.threads,
            snapshots=len(per),
            shape="6 blocks, 4 heads, d=192, n_ctx=256 (the built-in model's)",
            seconds=round(cold, 1),
            target_seconds=120,
            per_snapshot_mean=round(sum(per) / len(per), 2),
            per_snapshot_max=round(max(per), 2),
            circuits=sum(s.circuit is not None for s in result.snapshots),
            read_again_seconds=round(kept, 2),
            heads_only_seconds=round(heads_s, 1),
            ratio_to_heads_only=round(cold / heads_s, 1),
        )
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
