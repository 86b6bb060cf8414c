"""Benchmark: GET /api/v1/heads's work (model/heads.py's analyse: every head's scores, the random-weight
baseline and the ablations), with each ablated pass started at its head's block from the clean pass's
streams (clean_pass), against the same analysis with every ablated pass whole, in the same process, on the
same prompt; and resumed with the model's RepeatMemo made on another prompt (what the server keeps per
model: the work on the repeated random tokens, which no prompt changes), as a new prompt is analysed. The
three reports must be the same (every score and ablation cost, to the bit).

Two models: the built-in one (6 blocks, 4 heads, d=192) on a 100-token prompt, and GPT-2 small's shape
(12 blocks of 12 heads, random weights: no head has a role, so its 6 role-less yardstick heads are
ablated, as GET /heads does for a model that large) on a 64-token prompt. Float32, --threads torch
threads (the request's: 1 for the built-in model).

    python benchmarks/heads.py [--rounds 3] [--threads 1] [--skip-gpt2]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import cpu_name

from gptscope.model import heads as hd
from gptscope.model.gpt import GPT, preset_config
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.explain.heads import MAX_ABLATED_LARGE, repeated
from gptscope.server.service import ModelService

TEXT = (
    "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. Arise, "
    "fair sun, and kill the envious moon, who is already sick and pale with grief that thou her maid art far "
    "more fair than she. Be not her maid, since she is envious; her vestal livery is but sick and green, and "
    "none but fools do wear it; cast it off."
)


def whole_passes(model, ids, start=0):
    """clean_pass without its streams: every ablated pass then runs whole (the analysis before)."""
    loss, _ = RESUMED(model, ids, start)
    return loss, None


RESUMED = hd.clean_pass


def timed(model, prompt, other, rep, max_ablated, rounds: int) -> dict:
    """The analysis of `prompt` three ways: resumed passes, whole passes, and resumed with the model's
    RepeatMemo made on `other` (a new prompt on a model the server has analysed before)."""
    best, reports = {}, {}
    for _ in range(rounds):
        memo = hd.RepeatMemo()
        hd.analyse(model, other, rep, max_ablated=max_ablated, memo=memo)
        for name, fn, kept in (("resumed", RESUMED, None), ("whole", whole_passes, None), ("memo", RESUMED, memo)):
            hd.clean_pass = fn
            t = time.perf_counter()
            reports[name] = hd.analyse(model, prompt, rep, max_ablated=max_ablated, memo=kept)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
    hd.clean_pass = RESUMED
    a, b = reports["resumed"], reports["whole"]
    same = [(h.scores, h.ablation) for h in a.heads] == [(h.scores, h.ablation) for h in b.heads]
    return {
        "seconds_resumed": round(best["resumed"], 3),
        "seconds_whole": round(best["whole"], 3),
        "speedup": round(best["whole"] / best["resumed"], 2),
        "seconds_memo": round(best["memo"], 3),
        "speedup_memo": round(best["resumed"] / best["memo"], 2),
        "ablated_heads": sum(h.ablation is not None for h in a.heads),
        "same_report": same and a.reference_cost == b.reference_cost and reports["memo"] == a,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="the best of this many runs of each")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-gpt2", action="store_true", help="the built-in model only")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    svc = ModelService(BUILTIN_CHECKPOINT)
    ids = svc.encoding.encode_ordinary(TEXT)
    prompt, other = torch.tensor([ids[:100]]), torch.tensor([ids[-100:]])
    rows = {"built-in, 100 tokens": timed(svc.model, prompt, other, repeated(svc), None, a.rounds)}
    if not a.skip_gpt2:
        torch.manual_seed(0)
        gpt2 = GPT(preset_config("gpt2", vocab_size=50257)).eval()
        g = torch.Generator().manual_seed(0)
        ids, other = torch.randint(50257, (1, 64), generator=g), torch.randint(50257, (1, 64), generator=g)
        rep = hd.repeated_tokens(50257, gpt2.cfg.n_ctx)
        rows["GPT-2 small's shape, 64 tokens"] = timed(gpt2, ids, other, rep, MAX_ABLATED_LARGE, a.rounds)
    print(json.dumps({"benchmark": "heads", "cpu": cpu_name(), "threads": a.threads, "fp32": rows}, indent=1))


if __name__ == "__main__":
    main()
