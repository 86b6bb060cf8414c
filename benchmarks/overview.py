"""Benchmark: what the forward page's overview costs (issue #58), through the explain layer as the
endpoints run it, in this process.

For each model, a 64-token prompt:
  - POST /api/v1/forward with include ["next_token"]: the baseline, one traced forward pass
  - the same with ["overview"] (what each block, head and MLP wrote at the position, the walk's
    captions) and with ["next_token", "overview"]; each as a ratio to the baseline
  - every part the page asks for on a new prompt (ALL_PARTS), with and without the overview: what
    the overview adds to the page's first request
  - GET /api/v1/architecture (once per page) and POST /api/v1/next-token at a position (the
    overview's probabilities, again on every slider move)
Models: the built-in one, GPT-2 small's shape (12 layers x 12 heads, d=768, vocab 50,257) and a
24-layer x 16-head model (d=1024: GPT-2 medium's shape), both with random weights, saved to a
temporary folder (in memory where /dev/shm is). Best of --repeat runs, in milliseconds, as JSON lines.

    python benchmarks/overview.py [--repeat 5] [--skip-medium]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from common import best, cpu_name, prompt_of, random_service

from gptscope.model.gpt import GPTConfig
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.explain.forward import forward
from gptscope.server.explain.overview import architecture
from gptscope.server.explain.sampling import next_token
from gptscope.server.schemas.forward import ALL_PARTS, ForwardRequest
from gptscope.server.schemas.sampling import NextTokenRequest
from gptscope.server.service import ModelService

TOKENS = 64


def measure(name: str, service: ModelService, repeat: int) -> dict:
    text = prompt_of(service.encoding.encode_ordinary, TOKENS)
    pos = TOKENS // 2

    def fwd(parts: list[str]) -> float:
        return 1000 * best(lambda: forward(service, ForwardRequest(text=text, include=parts)), repeat)

    base = fwd(["next_token"])
    row = {"model": name, "tokens": TOKENS, "threads": service.threads, "next_token_ms": round(base, 1)}
    for label, parts in (("overview", ["overview"]), ("next_token+overview", ["next_token", "overview"])):
        ms = fwd(parts)
        row[f"{label}_ms"] = round(ms, 1)
        row[f"{label}_ratio"] = round(ms / base, 2)
    without = [p for p in ALL_PARTS if p != "overview"]
    page, page_without = fwd(list(ALL_PARTS)), fwd(without)
    row |= {"page_first_request_ms": round(page, 1), "page_without_overview_ms": round(page_without, 1)}
    row["page_overview_share"] = round((page - page_without) / page, 3)
    row["architecture_ms"] = round(1000 * best(lambda: architecture(service), repeat), 2)
    req = NextTokenRequest(text=text, position=pos, temperature=0.7, top_k=20)
    row["next_token_at_position_ms"] = round(1000 * best(lambda: next_token(service, req), repeat), 1)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--skip-medium", action="store_true", help="leave out the 24-layer x 16-head model (1.4 GB)")
    a = p.parse_args()
    print(json.dumps({"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__}))
    print(json.dumps(measure("built-in", ModelService(BUILTIN_CHECKPOINT), a.repeat)))
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    tmp = Path(tempfile.mkdtemp(prefix="gptscope-bench-overview-", dir=where))
    try:
        shapes = [("gpt2-small shape", 12, 12, 768)] + (
            [] if a.skip_medium else [("24 x 16 (gpt2-medium shape)", 24, 16, 1024)]
        )
        for name, layers, heads, d in shapes:
            cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=layers, n_head=heads, d_model=d, dropout=0.0)
            service = random_service(cfg, tmp, name.split()[0], "benchmarks/overview.py")
            print(json.dumps(measure(name, service, a.repeat)))
            del service
            shutil.rmtree(tmp / name.split()[0], ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
