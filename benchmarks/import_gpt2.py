"""Benchmark: GPT-2 small imported and served on this machine.

Imports a GPT-2 small (Hugging Face folder: config.json + model.safetensors) with `gptscope import`,
timing it, then serves it and times the API through real HTTP (benchmarks/api_latency.py): a 64-token
forward trace (attention of every head + next token), a generation step, and the server's memory.
Targets on 2 CPU cores: import < 60 s, forward p95 < 400 ms, generation step p95 < 150 ms, server
memory < 1.5 GB.

    python benchmarks/import_gpt2.py [--hf PATH_TO_GPT2_FOLDER] [--n 50]

Without --hf it builds GPT-2 small's exact shape (12 layers x 12 heads, d 768, 1024 positions,
50,257 tokens: 124,439,808 parameters) with random weights using `transformers` (a test extra;
nothing is downloaded) and says so in its output: the timings depend on the shape, not the values.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def random_gpt2_small(folder: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config()).save_pretrained(folder)


def main() -> None:
    import api_latency

    p = argparse.ArgumentParser()
    p.add_argument("--hf", default=None, help="a real GPT-2 folder (default: a random GPT-2-small-shaped one)")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--wire-only", action="store_true", help="only the JSON/binary trace comparison (64 and 128 tokens)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.hf) if a.hf else Path(tmp) / "gpt2-small-random"
        if not a.hf:
            random_gpt2_small(folder)
        data = Path(tmp) / "data"
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gptscope", "import", str(folder), "--name", "gpt2", "--data-dir", str(data)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        import_s = time.perf_counter() - t
        out = {
            "weights": "real GPT-2 (" + str(a.hf) + ")" if a.hf else "random weights, GPT-2 small's shape",
            "import_s": round(import_s, 1),
        }
        lat = api_latency.main(
            ["--checkpoint", str(data / "models" / "gpt2"), "--n", str(a.n), "--wire-tokens", "64,128"]
            + (["--wire-only"] if a.wire_only else [])
        )
        out.update({k: v for k, v in lat.items() if k != "checkpoint"})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
