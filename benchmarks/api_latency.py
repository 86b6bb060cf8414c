"""Benchmark: latency of the explainer's API through real HTTP on loopback.

Starts `gptscope serve` (the built-in model unless --checkpoint) on a free 127.0.0.1 port, then
times, one request at a time:
  - POST /api/v1/forward for a 64-token prompt (the main page's request: attention + next token)
  - POST /api/v1/forward with every stage included (the heaviest trace)
  - POST /api/v1/generate/step with 64 ids (prefill 63 into the KV cache, decode one)
  - POST /api/v1/next-token (temperature / top-k / top-p)
  - POST /api/v1/compare (built-in model only): it against a copy of itself in the data folder
    (both loaded and cached after the warm-up), on the same 64 tokens; target p95 < 150 ms
Prints p50 / p95 / p99 in milliseconds as JSON, and the server's memory (resident set now and its
peak, from /proc). Targets on 2 CPU cores: forward p95 < 50 ms, generation step p95 < 20 ms for the
built-in model; see benchmarks/import_gpt2.py for GPT-2 small's.

    python benchmarks/api_latency.py [--n 200] [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def server_memory_mb(pid: int) -> dict:
    """Resident memory of the server process now (VmRSS) and at its peak (VmHWM), in MB (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    kb = {
        line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith(("VmRSS", "VmHWM"))
    }
    return {"rss_mb": round(kb.get("VmRSS", 0) / 1024, 1), "peak_rss_mb": round(kb.get("VmHWM", 0) / 1024, 1)}


def main(argv: list[str] | None = None) -> dict:
    from gptscope.model import checkpoint as ckpt
    from gptscope.model.tokenizers import encoding_from_spec
    from gptscope.server.config import BUILTIN_CHECKPOINT
    from gptscope.server.schemas.forward import ALL_PARTS

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT))
    p.add_argument("--prompt-tokens", type=int, default=64)
    a = p.parse_args(argv)
    n_tokens = a.prompt_tokens

    meta = ckpt.read_meta(a.checkpoint)
    enc = encoding_from_spec(meta["tokenizer"])
    words = [
        "But",
        "soft",
        "what",
        "light",
        "through",
        "yonder",
        "window",
        "breaks",
        "It",
        "is",
        "the",
        "east",
        "and",
        "Juliet",
        "is",
        "the",
        "sun",
        "Arise",
        "fair",
        "sun",
        "and",
        "kill",
        "the",
        "envious",
        "moon",
        "who",
        "is",
        "already",
        "sick",
        "and",
        "pale",
        "with",
        "grief",
    ]
    prompt, i = "", 0
    while len(enc.encode_ordinary(prompt)) < n_tokens:
        prompt += ("" if not prompt else " ") + words[i % len(words)]
        i += 1
    ids = enc.encode_ordinary(prompt)
    while len(ids) > n_tokens:
        prompt = prompt[:-1]
        ids = enc.encode_ordinary(prompt)

    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="gptscope-bench-"))
    builtin = Path(a.checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve()
    if builtin:
        shutil.copytree(a.checkpoint, data / "models" / "twin")  # a second model to compare with
    proc = subprocess.Popen(
        [sys.executable, "-m", "gptscope", "serve", "--checkpoint", a.checkpoint, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "GPTSCOPE_DATA_DIR": str(data)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as c:
            for _ in range(200):
                try:
                    if c.get("/api/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            cases = {
                f"forward_{n_tokens}_tokens": ("/api/v1/forward", {"text": prompt}),
                f"forward_{n_tokens}_tokens_all_stages": (
                    "/api/v1/forward",
                    {"text": prompt, "include": list(ALL_PARTS)},
                ),
                f"generate_step_{n_tokens}_ids": (
                    "/api/v1/generate/step",
                    {"ids": ids, "step": 0, "seed": 1, "temperature": 0.8, "top_k": 40},
                ),
                "next_token_filters": (
                    "/api/v1/next-token",
                    {"text": prompt, "temperature": 0.8, "top_k": 50, "top_p": 0.9},
                ),
                **(
                    {
                        f"compare_{n_tokens}_tokens_two_models": (
                            "/api/v1/compare",
                            {"a": "builtin", "b": "models/twin", "text": prompt},
                        )
                    }
                    if builtin
                    else {}
                ),
            }
            out = {
                "prompt_tokens": len(ids),
                "n": a.n,
                "checkpoint": a.checkpoint,
                "server_memory_after_load": server_memory_mb(proc.pid),
            }
            for name, (path, body) in cases.items():
                for _ in range(10):  # warm up
                    c.post(path, json=body).raise_for_status()
                times = []
                for _ in range(a.n):
                    t = time.perf_counter()
                    r = c.post(path, json=body)
                    times.append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
                out[name] = {
                    "p50_ms": round(pct(times, 50), 2),
                    "p95_ms": round(pct(times, 95), 2),
                    "p99_ms": round(pct(times, 99), 2),
                    "bytes": len(r.content),
                }
            out["server_memory_after_requests"] = server_memory_mb(proc.pid)
        print(json.dumps(out, indent=1))
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
