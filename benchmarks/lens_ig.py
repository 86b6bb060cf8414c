"""Benchmark: the tuned lens and integrated gradients (issue #46's targets: the shipped tuned lens beats
the logit lens on held-out KL at every stage but the last; integrated gradients for a 64-token prompt
answer in under 2 s on the built-in model, on 2 cores without bf16).

1. The shipped tuned lens's figures as its JSON records them (per stage: KL(final || lens) on the
   held-out tokens and top-1 agreement, logit lens beside tuned lens; its training steps, tokens and
   seconds), and a short training run timed here (--train-seconds; 0 skips it) with its own figures.
2. POST /api/v1/token-attribution's answer (integrated gradients and the three baselines) for a
   64-token prompt with the served model's torch threads, at 8, 32 (the default) and 128 steps, with the
   completeness error of each; and every position of a 32-token prompt (the matrix) at 32 steps.

Inference is float32 on every CPU path. Prints one JSON line per figure (best of --repeat runs) and the
machine's CPU.

    python benchmarks/lens_ig.py [--repeat 3] [--train-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from common import best, cpu_name

from gptscope.model import checkpoint as ckpt
from gptscope.model import tuned_lens as tl
from gptscope.server.config import ALL_CORES, BUILTIN_CHECKPOINT, Settings
from gptscope.server.explain import token_attribution as ex
from gptscope.server.lenses import LENSES
from gptscope.server.models import ModelRegistry
from gptscope.server.schemas.token_attribution import TokenAttributionRequest

PASSAGE = (
    "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
    "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief that thou her maid "
    "art far more fair than she."
)


def show(**row) -> None:
    print(json.dumps(row), flush=True)


def lens_figures(meta: dict, what: str) -> None:
    show(what=what, steps=meta["steps"], tokens=meta["tokens"], train_seconds=meta["train_seconds"],
         threads=meta.get("threads"), held_out_tokens=meta["quality"]["tokens"])  # fmt: skip
    for s in meta["quality"]["stages"]:
        show(stage=s["stage"], logit_kl=round(s["logit_kl"], 4), tuned_kl=round(s["tuned_kl"], 4),
             logit_top1=round(s["logit_top1"], 4), tuned_top1=round(s["tuned_top1"], 4))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--train-seconds", type=float, default=30, help="a training run timed here (0: none)")
    a = ap.parse_args()
    show(cpu=cpu_name(), cores=ALL_CORES, torch=torch.__version__)
    service = ModelRegistry(Settings(checkpoint=BUILTIN_CHECKPOINT)).load(BUILTIN_CHECKPOINT)
    lens_figures(LENSES.get(service, "tuned-s0").meta, "the shipped tuned lens (its JSON)")
    if a.train_seconds:
        with tempfile.TemporaryDirectory() as tmp:
            tc = tl.LensTrainConfig(time_budget=a.train_seconds)
            meta = tl.train_and_save(ckpt.load(BUILTIN_CHECKPOINT), "shakespeare", tc, Path(tmp) / "l", "benchmark")
            lens_figures(meta, f"a tuned lens trained here for {a.train_seconds:g} s")
    ids = service.encoding.encode_ordinary(PASSAGE)[:64]
    for steps in (8, 32, 128):
        req = TokenAttributionRequest(ids=ids, steps=steps)
        seconds = best(lambda req=req: ex.attribute(service, req), a.repeat)
        row = ex.attribute(service, req).rows[0]
        show(what="integrated gradients, one position", tokens=len(ids), steps=steps, seconds=round(seconds, 3),
             threads=service.threads, relative_error=row.completeness.relative_error,
             difference=row.completeness.difference)  # fmt: skip
    req = TokenAttributionRequest(ids=ids[:32], every_position=True)
    seconds = best(lambda: ex.attribute(service, req), 1)
    worst = ex.attribute(service, req).worst_relative_error
    show(what="every position (the matrix)", tokens=32, steps=32, seconds=round(seconds, 3), worst_relative_error=worst)


if __name__ == "__main__":
    main()
