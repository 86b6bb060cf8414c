"""What the benchmark scripts share: the machine's CPU name, and the best time of repeated runs.
(Imported as `common`: a script's own folder is the first place Python looks.)"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    except OSError:
        return platform.processor() or platform.machine()


def best(fn: Callable[[], object], repeat: int) -> float:
    """The shortest wall-clock time of `repeat` calls of fn, in seconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)
