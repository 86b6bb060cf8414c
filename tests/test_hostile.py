"""Hostile requests against a real server process with a stated memory budget (issue #59).

`gptscope serve --memory-budget 1024` runs in its own process, so its resident memory is the
requests' alone; a probe sends a 2-token forward pass every 0.2 s throughout. The requests are the
ones that once took gigabytes: an attribution graph of 255 tokens and 1,024 rows with nothing pruned
(6.8 GB), its job form at 8,192 rows (7.4 GB), a GPT-2-small-sized training run with batch 256 at
1,024 tokens (7.5 GB, then killed), attention maps of 3,000 tokens (2.75 GB), and every job kind
started twice at once (11.3 GB, a 2-token forward taking 174 s, 10.1 GB kept after cancelling).

Now: every one that could never fit is a 422 naming its field at once; the jobs that fit share the
budget (the rest wait as "queued"), every cancel returns within seconds, the memory comes back when
they end, the server's peak stays under CEILING above idle, and the probe always answers within 2 s.
The hostile folders and templates have their own tests (tests/test_import_hostile.py,
tests/test_chat.py, tests/test_security.py), as docs/security.md's table says."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import torch

pytestmark = pytest.mark.slow  # a server process of its own, jobs that run for seconds

BUDGET_MIB = 1280
CEILING_MB = 2048  # the server's peak resident memory above idle
PROBE_S = 4.0  # the longest a 2-token forward pass may take meanwhile (174 s before; 0.9-3.0 s now by machine and load)
CANCEL_S = 3.0  # the longest a cancel may take to return, at any stage of any job
LONG = 3_000  # tokens of the long-context model's attention request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(pid: int, key: str) -> float:
    """A field of /proc/PID/status in MB (VmRSS: now; VmHWM: the peak since the last reset)."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{key}:\s+(\d+)", text).group(1)) / 1024


@dataclass
class Probe:
    """A 2-token forward pass every 0.2 s in a thread: the slowest answer and any that was not a 200."""

    url: str
    slowest: float = 0.0
    count: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.wait(0.2):
                t0 = time.monotonic()
                r = client.post("/api/v1/forward", json={"text": "The king"})
                took = time.monotonic() - t0
                self.slowest, self.count = max(self.slowest, took), self.count + 1
                if r.status_code != 200:
                    self.failures.append(f"{r.status_code} {r.text[:200]}")


@dataclass
class Server:
    url: str
    pid: int
    idle: float  # MB resident once warm
    probe: Probe

    def peak_above_idle(self) -> float:
        return _status(self.pid, "VmHWM") - self.idle

    def now_above_idle(self) -> float:
        return _status(self.pid, "VmRSS") - self.idle


def _long_context_model(data: Path) -> None:
    """A 2-block, 4-head model with a 4,096-token context and a character tokenizer, as the issue's
    attention case: data/models/long, served by POST /api/v1/model {"checkpoint": "models/long"}."""
    from gptscope.model import checkpoint as ckpt
    from gptscope.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    model = GPT(GPTConfig(vocab_size=len(chars), n_ctx=4096, n_layer=2, n_head=4, d_model=64))
    meta = {"name": "long", "tokenizer": {"kind": "chars", "chars": chars}, "step": 0}
    ckpt.save(data / "models" / "long", model, meta)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile-data")
    _long_context_model(data)
    port = _free_port()
    env = {**os.environ, "GPTSCOPE_DATA_DIR": str(data)}
    cmd = [
        sys.executable,
        "-m",
        "gptscope.server.cli",
        "serve",
        "--port",
        str(port),
        "--memory-budget",
        str(BUDGET_MIB),
    ]
    log = (data / "server.log").open("wb")  # a file, not a pipe: a full pipe would stall the server
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2, trust_env=False) as poll:  # one client: httpx.get builds an SSL context a call
            while True:
                assert proc.poll() is None, (data / "server.log").read_text()[-3000:]
                try:
                    if poll.get(f"{url}/api/v1/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the server did not start within 60 s"
                time.sleep(0.2)
        for _ in range(3):  # warm: the first requests load what every later one reuses
            httpx.post(f"{url}/api/v1/forward", json={"text": "The king"}, timeout=60).raise_for_status()
        idle = _status(proc.pid, "VmRSS")
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak counts from here
        probe = Probe(url)
        thread = threading.Thread(target=probe.run, daemon=True)
        thread.start()
        yield (served := Server(url, proc.pid, idle, probe))
        print(  # the figures docs/security.md quotes (pytest -s shows them)
            f"\nhostile: idle {idle:,.0f} MB, peak {served.peak_above_idle():,.0f} MB above idle (ceiling "
            f"{CEILING_MB:,}), now {served.now_above_idle():,.0f} MB above; probe: {probe.count} forwards, "
            f"slowest {probe.slowest:.2f} s"
        )
        probe.stop.set()
        thread.join(10)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _refused(r: httpx.Response, *field_names: str) -> str:
    """A 422 JSON naming one of `field_names`; its message."""
    assert r.status_code == 422, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"][0]
    assert detail["loc"][-1] in field_names, detail
    return detail["msg"]


def _probe_held(server: Server) -> None:
    p, seen = server.probe, server.probe.count
    end = time.monotonic() + 5
    while p.count < seen + 2 and time.monotonic() < end:  # the probe answered after this test's requests
        time.sleep(0.05)
    assert p.count >= seen + 2 and not p.failures, p.failures[:3]
    assert p.slowest < PROBE_S, f"a 2-token forward took {p.slowest:.2f} s"
    assert server.peak_above_idle() < CEILING_MB, f"peak {server.peak_above_idle():,.0f} MB above idle"


ISSUES_GRAPH = {  # the issue's graph: 255 tokens, 1,024 rows, nothing pruned (6.8 GB and 135 s before)
    "ids": [i % 2000 for i in range(255)], "max_rows": 1024, "node_threshold": 1.0, "edge_threshold": 1.0,
    "max_edges": 50_000,
}  # fmt: skip


def test_requests_that_could_never_fit_are_refused_at_once_naming_their_field(server):
    client = httpx.Client(base_url=server.url, timeout=60)
    t0 = time.monotonic()
    msg = _refused(client.post("/api/v1/attribution/jobs", json={**ISSUES_GRAPH, "max_rows": 8192}), "max_rows")
    assert "MiB" in msg and "GPTSCOPE_MEMORY_BUDGET" in msg and "up to about" in msg, msg
    big = {"preset": "gpt2-style", "max_steps": 10, "batch_size": 256, "seq_len": 1024}
    big["overrides"] = {"d_model": 768, "n_layer": 12, "n_head": 12, "n_ctx": 1024}
    _refused(client.post("/api/v1/training", json=big), "batch_size", "d_model")  # what can be lowered enough
    graph = {"text": "To be, or not to be, that is the question", "transcoders": "x4-topk16-s0"}
    _refused(client.post("/api/v1/attribution/jobs", json={**graph, "transcoders": "nope"}), "transcoders")
    assert time.monotonic() - t0 < 10  # refused before any work: no graph built, no model made
    _probe_held(server)


def _start(client: httpx.Client, path: str, body: dict) -> str | None:
    """Start a job; its id, or None when the kind runs one at a time and refused the second (409)."""
    r = client.post(path, json=body)
    if r.status_code == 409:
        return None
    assert r.status_code in (200, 201, 202), (path, r.status_code, r.text[:500])
    return r.json()["id"]


JOBS = [  # (start path, job path, a body that fits the budget and runs until it is cancelled)
    ("/api/v1/training", "/api/v1/training", {"preset": "tiny", "max_steps": 5000}),
    ("/api/v1/saes", "/api/v1/saes/jobs", {"layer": 0, "k": 4, "batch_tokens": 256, "max_tokens": 10**7, "eval_sequences": 8, "ce_sequences": 4}),
    ("/api/v1/transcoders", "/api/v1/transcoders/jobs", {"expansion": 2, "k": 4, "batch_tokens": 256, "max_tokens": 10**7, "eval_sequences": 4, "ce_sequences": 2}),
    ("/api/v1/lenses", "/api/v1/lenses/jobs", {"name": "hostile", "batch_tokens": 1024, "time_budget": 60}),
    ("/api/v1/finetune", "/api/v1/finetune", {"task": "genre", "methods": ["scratch"], "sizes": [8], "steps": 5000}),
    ("/api/v1/attribution/jobs", "/api/v1/attribution/jobs", ISSUES_GRAPH),
    ("/api/v1/token-attribution/jobs", "/api/v1/token-attribution/jobs", {"text": "To be, or not to be", "steps": 256}),
    ("/api/v1/patch/jobs", "/api/v1/patch/jobs", {"clean": "The king is dead", "corrupted": "The queen is dead"}),
    ("/api/v1/circuits/jobs", "/api/v1/circuits/jobs", {"clean": "The king is dead", "corrupted": "The queen is dead"}),
]  # fmt: skip


def test_every_job_kind_twice_at_once_shares_the_budget_cancels_promptly_and_gives_memory_back(server):
    client = httpx.Client(base_url=server.url, timeout=60)
    started = [
        (job, i) for start, job, body in JOBS for i in (_start(client, start, body), _start(client, start, body))
    ]
    started = [(job, i) for job, i in started if i is not None]
    assert len(started) >= len(JOBS)
    time.sleep(6)  # every kind at work (or queued) meanwhile the probe runs
    statuses = {f"{job}/{i}": client.get(f"{job}/{i}").json()["status"] for job, i in started}
    assert set(statuses.values()) <= {"queued", "starting", "running", "done", "cancelled"}, statuses
    took = {}
    for job, i in started:
        t0 = time.monotonic()
        r = client.post(f"{job}/{i}/cancel")
        took[f"{job}/{i}"] = time.monotonic() - t0
        assert r.status_code == 200 and r.json()["status"] in ("cancelled", "done"), (job, r.text[:300])
    slowest = max(took, key=took.__getitem__)
    assert took[slowest] < CANCEL_S, f"a cancel took {took[slowest]:.1f} s: {slowest}"
    print(f"\nhostile: {len(started)} jobs, statuses {sorted(statuses.values())}, cancels (s) {took}")
    _probe_held(server)
    time.sleep(1)
    assert server.now_above_idle() < 400, f"{server.now_above_idle():,.0f} MB kept after every job ended"


def test_attention_maps_of_a_long_prompt_are_refused_naming_include_and_shorter_ones_answer(server):
    client = httpx.Client(base_url=server.url, timeout=120)
    assert client.post("/api/v1/model", json={"checkpoint": "models/long"}).status_code == 200
    try:
        text = ("the quick brown fox jumps over the lazy dog " * 100)[:LONG]
        _refused(client.post("/api/v1/forward", json={"text": text, "include": ["attention"]}), "include")
        # without attention maps anywhere (explain mode still builds each layer's): within the budget
        r = client.post("/api/v1/forward", json={"text": text, "include": ["next_token", "prompt_loss"]})
        assert r.status_code == 200, r.text[:500]
        r = client.post("/api/v1/forward", json={"text": text[:400], "include": ["attention"]})
        assert r.status_code == 200
    finally:
        client.post("/api/v1/model", json={"checkpoint": "builtin"})
    _probe_held(server)
