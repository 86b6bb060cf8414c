"""Benchmark: sweep the training recipe in a fixed wall-clock budget, and choose one.

Each variant is one whole run of benchmarks/train_shakespeare.py (the default recipe plus the
variant's trainer flags), in its own process, one after another: the same 150 s of wall-clock with
tokenizer training (and, for --compile, compilation) inside it, scored in bits per character on the
held-out 10% of the plays. What matters on the path the run takes (GPTSCOPE_PRECISION=fp32 or bf16
forces one on a CPU with bf16 units): torch.compile on and off, batch and context, width and depth,
the tokenizer's vocabulary, Muon's and AdamW's rates, warmup and the cooldown's shape.

    python benchmarks/sweep_recipe.py [--budget 150] [--only default,wsd40,...] [--list]

Prints a row of the table as each run ends, then the whole table (markdown) and the variant it
would choose: the lowest bits/char. A difference of a hundredth or two is within run-to-run noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import cpu_name

# name -> (what it changes, trainer flags on top of the default recipe)
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "default": ("the default recipe", []),
    "compile-cold": ("torch.compile, empty compile cache", ["--compile"]),
    "compile-warm": ("torch.compile, cache from a run before", ["--compile"]),
    "B4": ("batch 4", ["--batch-size", "4"]),
    "B12": ("batch 12", ["--batch-size", "12"]),
    "B16": ("batch 16", ["--batch-size", "16"]),
    "ctx64-B16": ("context 64, batch 16", ["--seq-len", "64", "--batch-size", "16"]),
    "ctx256-B4": ("context 256, batch 4", ["--set", "n_ctx=256", "--batch-size", "4"]),
    "ctx256": ("context 256", ["--set", "n_ctx=256"]),
    "wd0": ("no weight decay", ["--weight-decay", "0"]),
    "L3": ("3 layers", ["--set", "n_layer=3"]),
    "L6": ("6 layers", ["--set", "n_layer=6"]),
    "d96-L6": ("width 96, 6 layers", ["--set", "d_model=96", "--set", "n_layer=6"]),
    "d160-L3": ("width 160, 3 layers", ["--set", "d_model=160", "--set", "n_layer=3"]),
    "h2": ("2 heads of 64", ["--set", "n_head=2"]),
    "v1024": ("BPE vocabulary 1,024", ["--vocab-size", "1024"]),
    "v3072": ("BPE vocabulary 3,072", ["--vocab-size", "3072"]),
    "v4096": ("BPE vocabulary 4,096", ["--vocab-size", "4096"]),
    "muon0.03": ("Muon peak rate 0.03", ["--muon-lr", "0.03"]),
    "muon0.015": ("Muon peak rate 0.015", ["--muon-lr", "0.015"]),
    "adamw8e-3": ("AdamW (embeddings, gains) peak rate 8e-3", ["--max-lr", "8e-3"]),
    "adamw3e-3": ("AdamW (embeddings, gains) peak rate 3e-3", ["--max-lr", "3e-3"]),
    "warmup0": ("no warmup", ["--warmup-steps", "0"]),
    "warmup100": ("warmup 100 updates", ["--warmup-steps", "100"]),
    "cos-to-0": ("cosine to 0", ["--min-lr-ratio", "0"]),
    "wsd20": (
        "constant, then linear to a tenth of the peak over the last 20%",
        ["--schedule", "wsd", "--cooldown", "0.2"],
    ),
    "wsd40": (
        "constant, then linear to a tenth of the peak over the last 40%",
        ["--schedule", "wsd", "--cooldown", "0.4"],
    ),
    "wsd60": (
        "constant, then linear to a tenth of the peak over the last 60%",
        ["--schedule", "wsd", "--cooldown", "0.6"],
    ),
}


def run(name: str, budget: float, cache: Path) -> dict:
    flags = VARIANTS[name][1]
    env = dict(os.environ)
    if name.startswith("compile"):
        # inductor's on-disk cache: a fresh folder for the cold run, the same one again for the warm run
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    with tempfile.TemporaryDirectory(prefix="sweep-") as out:
        here = Path(__file__).resolve().parent
        p = subprocess.run(
            [sys.executable, str(here / "train_shakespeare.py"), "--budget", str(budget), "--out", out, *flags],
            capture_output=True,
            text=True,
            env=env,
        )
    if p.returncode != 0:
        return {"name": name, "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"rc {p.returncode}"}
    r = json.loads(p.stdout[p.stdout.index("{") :])
    return {
        "name": name,
        "changes": VARIANTS[name][0],
        "flags": " ".join(flags),
        "steps": r["steps"],
        "tokens_per_s": r["tokens_per_s_median"],
        "bits_per_char": r["heldout_bits_per_char"],
        "precision": r["recipe"]["precision"],
    }


def row(r: dict) -> str:
    if "error" in r:
        return f"| {r['name']} | failed: {r['error']} | | | |"
    return f"| {r['name']} | {r['changes']} | {r['steps']:,} | {r['tokens_per_s']:,} | {r['bits_per_char']:.3f} |"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=float, default=150.0)
    p.add_argument("--only", default=None, help="comma-separated variant names (default: all, in order)")
    p.add_argument("--list", action="store_true", help="print the variants and stop")
    a = p.parse_args()
    if a.list:
        for k, (what, flags) in VARIANTS.items():
            print(f"{k:12s} {what}  [{' '.join(flags)}]")
        return
    names = a.only.split(",") if a.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"--only: unknown variants {unknown}; see --list")
    head = "| variant | change from the default | updates | tokens/s | bits/char |\n| --- | --- | --- | --- | --- |"
    print(f"{cpu_name()}, budget {a.budget:g} s\n{head}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
        for n in names:
            results.append(run(n, a.budget, Path(cache)))
            print(row(results[-1]), flush=True)
    ok = [r for r in results if "error" not in r]
    print(f"\n{cpu_name()}, path {ok[0]['precision'] if ok else '?'}, budget {a.budget:g} s\n{head}")
    for r in sorted(results, key=lambda r: r.get("bits_per_char", 99)):
        print(row(r))
    if ok:
        best = min(ok, key=lambda r: r["bits_per_char"])
        print(
            f"\nchosen: {best['name']} ({best['changes']}): {best['bits_per_char']:.3f} bits/char; flags: {best['flags']}"
        )


if __name__ == "__main__":
    main()
