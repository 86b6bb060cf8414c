"""Which floating-point type a device multiplies fast: decided once, in one place.

bfloat16 halves the bytes a matmul moves and, where the hardware has bf16 units (a GPU, or a CPU
with AVX-512 BF16 or AMX), runs faster than float32. Where it has none (AVX2-only CPUs: most laptops,
AMD before Zen 4) PyTorch emulates it, and a bf16 matmul is 50-100x slower than a float32 one. Two
things in training depend on the answer, and both read it from `native_precision()`:

    autocast            the recipe's `precision` (bf16 autocast or fp32) when the user gives none
    Muon                the dtype its Newton-Schulz orthogonalisation runs in (model/muon.py)

On a CPU the answer is measured, not read from /proc/cpuinfo: a few small matmuls in each dtype,
once per process (about 20 ms on an emulating CPU, less on a native one). Flags can be present
while the library in use lacks the kernels, and a probe also works where cpuinfo does not exist.
Where the matmuls say bf16 is native, a second probe decides (issue #67): whole training updates of
the cpu recipe's shape (its batch, forward and backward under autocast, Newton-Schulz on every
matrix as Muon does, the optimizer step) in each precision, interleaved, the fastest of each. A
native bf16 matmul does not make a faster update: autocast casts the weights every step, and the
small matrices of a CPU-sized model gain little. bf16 is chosen only when its update is at least
UPDATE_MARGIN faster (about a second, once per process that trains).

GPTSCOPE_PRECISION=bf16 or =fp32 forces the answer (to test or benchmark either path on any
machine); unset or `auto` measures.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

ENV = "GPTSCOPE_PRECISION"
PROBE_N = 128  # the probe's square matmul (a block of the cpu preset is 128 wide)
PROBE_REPS = 7
NATIVE_IF_WITHIN = 2.0  # bf16 counts as native when its matmul is at most this many times slower than fp32
UPDATE_MARGIN = 0.10  # ... and is chosen when a training update in bf16 takes at most 90% of an fp32 one
UPDATE_REPS = 3
UPDATE_BATCH = 4  # sequences of the cpu preset's 128 tokens per probe update


@dataclass(frozen=True)
class Choice:
    """The dtype a device computes natively, and why (the trainer prints `why`)."""

    precision: str  # "bf16" or "fp32"
    why: str  # e.g. "no native bf16: bf16 matmul 52x slower than fp32"
    slowdown: float | None = None  # measured bf16 matmul time / fp32 matmul time (None: not measured)
    update_ratio: float | None = None  # measured bf16 training update time / fp32 one (None: not measured)

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.precision == "bf16" else torch.float32


def measure_cpu(n: int = PROBE_N, reps: int = PROBE_REPS) -> float:
    """How many times slower a bf16 matmul is than a float32 one on this CPU (below 1: faster).

    On one thread, the fastest of `reps` interleaved tries of each: a busy machine slows a try
    (a tiny matmul split over two threads waits for whichever core is taken, up to 10x: a loaded
    2-core machine once measured 3x here instead of 22x), but never speeds one up."""
    x = torch.randn(n, n)
    pairs = {dt: (x.to(dt), x.T.contiguous().to(dt)) for dt in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(pairs, float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for a, b in pairs.values():
            a @ b  # the first call may build the kernel
        for _ in range(reps):
            for dt, (a, b) in pairs.items():
                t = time.perf_counter()
                a @ b
                best[dt] = min(best[dt], time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
    return best[torch.bfloat16] / max(best[torch.float32], 1e-9)


def measure_update(reps: int = UPDATE_REPS) -> float:
    """How long a training update takes in bf16 (autocast, Newton-Schulz in bf16) against fp32 on this CPU
    (below 1: faster), for the cpu recipe's model (half its batch): the fastest of `reps` interleaved updates
    of each, on the threads training will use."""
    from .gpt import GPT, preset_config  # (the model imports this module)
    from .muon import orthogonalise_all

    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    model = GPT(preset_config("cpu", vocab_size=2048))
    x = torch.randint(0, 2048, (UPDATE_BATCH, model.cfg.n_ctx))
    torch.random.set_rng_state(state)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    matrices = [p for p in model.parameters() if p.dim() == 2]

    def update(dtype: torch.dtype) -> float:
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            _, loss = model(x, x)
        assert loss is not None
        loss.backward()
        orthogonalise_all([p.grad for p in matrices if p.grad is not None], dtype)
        opt.step()
        return time.perf_counter() - t

    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    for dt in best:
        update(dt)  # the first of each builds its kernels
    for _ in range(reps):
        for dt in best:
            best[dt] = min(best[dt], update(dt))
    return best[torch.bfloat16] / max(best[torch.float32], 1e-9)


def _shared(measure: Callable[[], Choice]) -> Choice:
    """`measure()` on this process, or, under torch.distributed, rank 0's measurement on every rank (two
    processes timing the same updates can disagree, and ranks that compute in different precisions end
    with different weights). Every rank calls this at the same point (the trainer's setup)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return measure()
    box = [measure() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    assert isinstance(box[0], Choice)
    return box[0]


@functools.cache
def native_precision(device_type: str) -> Choice:
    """bf16 where the device multiplies it natively, fp32 elsewhere; GPTSCOPE_PRECISION forces it."""
    forced = os.environ.get(ENV, "auto").strip().lower()
    if forced in ("bf16", "fp32"):
        return Choice(forced, f"forced by {ENV}={forced}")
    if forced not in ("", "auto"):
        raise ValueError(f"{ENV} must be bf16, fp32 or auto, not {forced!r}")
    if device_type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Choice("bf16", "the GPU has bf16 units")
        return Choice("fp32", "this GPU has no bf16 units")
    if device_type != "cpu":
        return Choice("fp32", f"{device_type}: bf16 not measured there")
    return _shared(_measured_cpu)


def _measured_cpu() -> Choice:
    slowdown = measure_cpu()
    if slowdown > NATIVE_IF_WITHIN:
        return Choice("fp32", f"no native bf16: bf16 matmul {slowdown:.0f}x slower than fp32", slowdown)
    ratio = measure_update()
    matmul = f"native bf16 (matmul {1 / slowdown:.1f}x the speed of fp32)"
    if ratio <= 1 - UPDATE_MARGIN:
        return Choice("bf16", f"{matmul}, and a training update {1 / ratio:.2f}x the speed of fp32", slowdown, ratio)
    return Choice("fp32", f"{matmul}, but a training update in bf16 takes {ratio:.2f}x fp32's", slowdown, ratio)
