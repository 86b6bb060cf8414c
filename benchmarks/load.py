"""Load test on loopback: concurrent clients against tokenize, forward and a generation step,
while a training run is going in the same server.

Starts `gptscope serve` on a free 127.0.0.1 port with a temporary data folder, starts a training
run (preset tiny, long enough to outlast the test), then runs CLIENTS concurrent clients for
DURATION seconds; each client loops over the three requests. Every request loop is bounded by the
duration, and the server and the run are stopped at the end. Prints errors and p50/p95/p99 per
endpoint as JSON. Only 127.0.0.1 is ever contacted.

    python benchmarks/load.py [--clients 20] [--duration 60]
"""

from __future__ import annotations

import argparse
import asyncio
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


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))], 2)


async def client(c: httpx.AsyncClient, ids: list[int], stop: float, times: dict, errors: dict, k: int) -> None:
    reqs = [
        (
            "tokenize",
            "/api/v1/tokenize",
            {"text": "Now is the winter of our discontent made glorious summer", "encoding": "gpt2"},
        ),
        ("forward", "/api/v1/forward", {"text": "ROMEO:\nBut soft, what light through yonder window breaks?"}),
        ("generate_step", "/api/v1/generate/step", {"ids": ids, "step": k, "seed": k, "temperature": 0.8, "top_k": 40}),
    ]
    i = k
    while time.perf_counter() < stop:
        name, path, body = reqs[i % 3]
        i += 1
        t = time.perf_counter()
        try:
            r = await c.post(path, json=body)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        dt = (time.perf_counter() - t) * 1000
        if ok:
            times[name].append(dt)
        else:
            errors[name] = errors.get(name, 0) + 1


async def run(base: str, clients: int, duration: float) -> dict:
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(max_connections=clients)) as c:
        toks = (
            await c.post(
                "/api/v1/tokenize", json={"text": "JULIET:\nO Romeo, Romeo, wherefore art thou", "encoding": "model"}
            )
        ).json()
        ids = [t["id"] for t in toks["tokens"]]
        start = (
            await c.post(
                "/api/v1/training",
                json={"preset": "tiny", "max_steps": 100_000, "snapshots": [], "vocab_size": 512, "batch_size": 8},
            )
        ).json()
        run_id = start["id"]
        while (await c.get(f"/api/v1/training/{run_id}")).json()["status"] == "starting":
            await asyncio.sleep(0.2)
        times = {"tokenize": [], "forward": [], "generate_step": []}
        errors: dict[str, int] = {}
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c, ids, t0 + duration, times, errors, k) for k in range(clients)))
        wall = time.perf_counter() - t0
        status = (await c.get(f"/api/v1/training/{run_id}")).json()
        await c.delete(f"/api/v1/training/{run_id}")
    out = {
        "clients": clients,
        "duration_s": round(wall, 1),
        "errors": sum(errors.values()),
        "errors_by_endpoint": errors,
        "training_run": {"status_during_test": status["status"], "steps_done": status["step"]},
    }
    for name, xs in times.items():
        out[name] = {
            "requests": len(xs),
            "per_s": round(len(xs) / wall, 1),
            "p50_ms": pct(xs, 50),
            "p95_ms": pct(xs, 95),
            "p99_ms": pct(xs, 99),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--duration", type=float, default=60.0)
    a = p.parse_args()
    port = free_port()
    data = tempfile.mkdtemp(prefix="gptscope-load-")
    cmd = [sys.executable, "-m", "gptscope", "serve", "--port", str(port)]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "GPTSCOPE_DATA_DIR": data},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        print(json.dumps(asyncio.run(run(base, a.clients, a.duration)), indent=1))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)  # the runs it trained


if __name__ == "__main__":
    main()
