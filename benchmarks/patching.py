"""Benchmark: how fast POST /api/v1/patch's sweeps are (issue #29's targets).

1. The built-in model, its shipped 32-token pair (dead-caesar): the full layer x position sweep of
   resid_pre (7 x 32 cells), then every default sweep (resid_pre, attn_out, mlp_out, head), each
   through the explain layer exactly as the endpoint runs it (its caches emptied first), with the
   served model's torch threads (1 for a model this small).
2. GPT-2 small's shape (12 layers, 12 heads, d=768, vocab 50,257; random weights) on a 20-token pair:
   the 13 x 20 resid_pre sweep plus the 144-head sweep, through model/patching.py on every core (what
   the app uses for a model of 124M parameters), as the job form runs it.

Prints one JSON line per figure (best of --repeat runs) and the machine's CPU.

    python benchmarks/patching.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json

import torch
from common import best, cpu_name

from gptscope.model import patching as pt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.config import ALL_CORES, BUILTIN_CHECKPOINT
from gptscope.server.explain import patch as ex
from gptscope.server.explain import patch_pairs
from gptscope.server.schemas.patch import PatchRequest
from gptscope.server.service import ModelService


def builtin(repeat: int) -> None:
    service = ModelService(BUILTIN_CHECKPOINT)
    pair = patch_pairs.pairs(service)[0]
    for kinds in (["resid_pre"], ["resid_pre", "attn_out", "mlp_out", "head"]):
        req = PatchRequest(
            clean=pair.clean, corrupted=pair.corrupted, answer=pair.answer, wrong=pair.wrong, kinds=kinds
        )

        def once(req=req) -> None:
            ex.CACHE = ex._Cache()
            ex.patch(service, req)

        s = best(once, repeat)
        runs = sum(len(r) for k in kinds for r in pt.sweep(k, 6, 4, pair.tokens))
        print(json.dumps({"model": "built-in", "tokens": pair.tokens, "kinds": kinds, "runs": runs,
                          "threads": service.threads, "seconds": round(s, 3)}))  # fmt: skip


def gpt2_shape(repeat: int) -> None:
    torch.set_num_threads(ALL_CORES)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=768, dropout=0.0)
    model = GPT(cfg).eval().set_mode("explain")
    clean = torch.randint(0, cfg.vocab_size, (20,)).tolist()
    corrupted = list(clean)
    corrupted[4] = (clean[4] + 1) % cfg.vocab_size
    runs = [[s] for k in ("resid_pre", "head") for row in pt.sweep(k, 12, 12, 20) for s in row]
    with torch.inference_mode():
        a, b = pt.record(model, clean), pt.record(model, corrupted)
        s = best(lambda: pt.patched(model, b, a, runs, pt.logit_diff(1, 2)), repeat)
    print(json.dumps({"model": "gpt2-small shape, random weights", "tokens": 20, "kinds": ["resid_pre", "head"],
                      "runs": len(runs), "threads": ALL_CORES, "seconds": round(s, 3)}))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    print(json.dumps({"cpu": cpu_name(), "cores": ALL_CORES, "torch": torch.__version__}))
    builtin(a.repeat)
    gpt2_shape(a.repeat)


if __name__ == "__main__":
    main()
