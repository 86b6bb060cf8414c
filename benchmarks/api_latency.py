"""Benchmark: latency of the explainer's API through real HTTP on loopback.

Starts `gptscope serve` (the built-in model unless --checkpoint) on a free 127.0.0.1 port, then
times, one request at a time:
  - POST /api/v1/forward for a 64-token prompt (the main page's request: attention + next token)
  - POST /api/v1/forward with every stage included (the heaviest trace)
  - POST /api/v1/generate/step with 64 ids (prefill 63 into the KV cache, decode one)
  - POST /api/v1/next-token (temperature / top-k / top-p)
  - POST /api/v1/compare (built-in model only): it against a copy of itself in the data folder
    (both loaded and cached after the warm-up), on the same 64 tokens; target p95 < 150 ms
Then, for traces of each --wire-tokens length (default parts: attention of every head + next
token), the bare forward pass `model(ids)` timed in this process with the server's thread count,
beside the same trace over HTTP as JSON and as MessagePack (Accept: application/vnd.gptscope+msgpack):
wall time, the server's own time (its Server-Timing header), each as a ratio to the bare forward,
and the bytes of each answer on the wire, gzipped (as browsers ask) and not.
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
from common import WORDS, prompt_of

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


def bare_forward_ms(checkpoint: str, ids: list[int], n: int) -> dict:
    """model(ids) in this process, in eval mode without gradients, on the server's thread count."""
    import torch

    from gptscope.model import checkpoint as ckpt
    from gptscope.server.config import default_threads

    model = ckpt.load(checkpoint).model.eval()
    threads = default_threads(model.num_params())
    torch.set_num_threads(threads)
    x = torch.tensor([ids])
    times = []
    with torch.no_grad():
        for i in range(n + 5):
            t = time.perf_counter()
            model(x)
            if i >= 5:
                times.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": round(pct(times, 50), 2), "p95_ms": round(pct(times, 95), 2), "threads": threads}


def timed_posts(c, path: str, body: dict, headers: dict, n: int) -> dict:
    wall, server = [], []
    for i in range(n + 5):
        t = time.perf_counter()
        r = c.post(path, json=body, headers=headers)
        ms = (time.perf_counter() - t) * 1000
        r.raise_for_status()
        if i >= 5:
            wall.append(ms)
            server.append(float(r.headers["server-timing"].split("dur=")[1]))
    return {
        "wall_p50_ms": round(pct(wall, 50), 2),
        "wall_p95_ms": round(pct(wall, 95), 2),
        "server_p50_ms": round(pct(server, 50), 2),
        "server_p95_ms": round(pct(server, 95), 2),
        "content_type": r.headers["content-type"],
    }


def wire_report(c, checkpoint: str, ids: list[int], n: int) -> dict:
    """Bare forward, JSON trace and binary trace of the same ids, side by side."""
    from gptscope.server.wire import MSGPACK

    bare = bare_forward_ms(checkpoint, ids, n)
    body = {"ids": ids}
    out: dict = {"tokens": len(ids), "bare_forward": bare}
    for form, accept in (("json", "application/json"), ("binary", MSGPACK)):
        row = timed_posts(c, "/api/v1/forward", body, {"Accept": accept}, n)
        for key, encoding in (("bytes", "identity"), ("bytes_gzipped", "gzip")):
            headers = {"Accept": accept, "Accept-Encoding": encoding}
            with c.stream("POST", "/api/v1/forward", json=body, headers=headers) as r:
                row[key] = sum(len(chunk) for chunk in r.iter_raw())  # the bytes as sent, not decompressed
        row["server_p50_over_bare"] = round(row["server_p50_ms"] / bare["p50_ms"], 2)
        row["wall_p50_over_bare"] = round(row["wall_p50_ms"] / bare["p50_ms"], 2)
        out[form] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    from gptscope.model import checkpoint as ckpt
    from gptscope.model.tokenizers import encoding_from_spec
    from gptscope.server.config import BUILTIN_CHECKPOINT
    from gptscope.server.schemas.forward import ALL_PARTS

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT))
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--wire-tokens", default="64,256", help="trace lengths for the JSON/binary comparison")
    p.add_argument("--wire-only", action="store_true", help="only the JSON/binary comparison")
    a = p.parse_args(argv)
    n_tokens = a.prompt_tokens

    meta = ckpt.read_meta(a.checkpoint)
    enc = encoding_from_spec(meta.tokenizer or {})
    prompt = prompt_of(enc.encode_ordinary, n_tokens)
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
            for name, (path, body) in ({} if a.wire_only else cases).items():
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
            n_ctx = (meta.config or {})["n_ctx"]
            long_ids = enc.encode_ordinary(" ".join(WORDS * 60))
            for t in (int(x) for x in a.wire_tokens.split(",")):
                if t <= n_ctx:
                    out[f"wire_{t}_tokens"] = wire_report(
                        c, a.checkpoint, long_ids[:t], a.n if a.wire_only else max(20, a.n // 4)
                    )
            out["server_memory_after_requests"] = server_memory_mb(proc.pid)
        print(json.dumps(out, indent=1))
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
