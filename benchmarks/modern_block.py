"""Benchmark: which of the modern block's switches helps a small model at equal wall clock.

Runs every variant of the /train page's "From GPT-2 to modern LLMs" experiments (server/experiments.py:
positions, rmsnorm, swiglu, gqa, moe, muon, llama-style) with the same request the page sends, but for
--budget seconds each (150 by default), one after another on this machine, then scores each on the
held-out 10% of the built-in corpus (bits per character). Prints one JSON line per run and a table.

    python benchmarks/modern_block.py [--budget 150] [--only positions,swiglu]
"""

from __future__ import annotations

import argparse
import json
import tempfile

from gptscope.model import corpus as corpus_mod
from gptscope.model import train as trainer
from gptscope.model.formulas import kv_cache_bytes
from gptscope.model.gpt import count_params
from gptscope.server.experiments import EXPERIMENTS

MODERN = ("positions", "rmsnorm", "swiglu", "gqa", "moe", "muon", "llama-style")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=float, default=150.0)
    p.add_argument("--only", default=",".join(MODERN))
    a = p.parse_args()
    _, held_out = corpus_mod.load("shakespeare").split(corpus_mod.VAL_FRACTION)
    rows = []
    for exp in (e for e in EXPERIMENTS if e.name in a.only.split(",")):
        for v in exp.variants:
            req = v.request.model_copy(update={"time_budget": a.budget, "snapshots": []})
            tc = trainer.TrainConfig(**{**req.model_dump(exclude_none=True), "device": "cpu", "name": v.label})
            with tempfile.TemporaryDirectory() as out:
                res = trainer.train(tc, out=out, progress=False, command="benchmarks/modern_block.py")
                ev = trainer.evaluate_text(res.model, res.encoding(), held_out)
                seq = req.seq_len or res.model.cfg.n_ctx  # scored again in windows as long as training's
                ev_seq = (
                    trainer.evaluate_text(res.model, res.encoding(), held_out, window=seq)
                    if seq < res.model.cfg.n_ctx
                    else ev
                )
            cfg = res.model.cfg
            row = {
                "experiment": exp.name,
                "variant": v.label,
                "params": count_params(cfg)["total"],
                "steps": res.meta.step,
                "heldout_bits_per_char": round(ev["bits_per_char"], 4),
                "train_window": seq,
                "heldout_bits_per_char_train_window": round(ev_seq["bits_per_char"], 4),
                "kv_cache_bytes_128_tokens_fp32": kv_cache_bytes(
                    cfg.n_layer, cfg.n_kv_head, cfg.d_head, cfg.n_ctx, bytes_per_value=4
                ),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| experiment | variant | parameters | updates | held-out bits/char |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['experiment']} | {r['variant']} | {r['params']:,} | {r['steps']:,} | {r['heldout_bits_per_char']:.3f} |"
        )


if __name__ == "__main__":
    main()
