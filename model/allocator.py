"""glibc's allocator, set for work that frees and asks again for the same large tensors (issue #67).

A training update allocates and frees the same large tensors every step: the logits, their
log-softmax and gradients (batch x tokens x vocabulary floats: 16 MB each for the tiny model's
2,048-token vocabulary at batch 32), the attention maps, the MLP's activations. By default glibc
gives freed memory back to the system once the free space at the top of its heap passes a
threshold that it adjusts (to at most 64 MB), and serves a large allocation from pages of its own
(mmap) that go back when it is freed. Either way the next update asks the kernel for the pages again,
and the kernel zeroes each one at its first touch. On the induction experiment's update (tiny model,
batch 32, one thread) that was about 10,000 page faults and a quarter of the update's CPU time, in the
main thread as in a job's (benchmarks/allocator.py prints the figures).

    keep_freed()   while it lasts, freed memory stays with the process for the next update
                   (up to KEEP_BYTES at the heap's top), and every allocation below 32 MB (glibc's
                   own maximum for its mmap threshold) comes from the heap; on leaving, the last
                   one out sets both thresholds back to glibc's starting values and calls
                   malloc_trim, so the run's memory goes back to the system. (glibc's own
                   adjustment stays off after a mallopt: a large tensor then has pages of its own,
                   given back as soon as it is freed, so a request's peak memory is its tensors',
                   which the memory budget's estimates count. Left at the run's values, a heap
                   that requests had fragmented held a 256-token trace's peak 4% above its
                   estimate in a full test run.)
    trim()         the heap's free memory goes back to the system now (server/memory.give_back
                   calls it after a request).
    one_arena()    every thread allocates from the main heap (M_ARENA_MAX = 1). A thread other than
                   the main one otherwise gets heaps of its own of at most 64 MB each, made and
                   unmapped as large tensors come and go: a training job's thread then faulted in
                   up to 5,000 pages an update even inside keep_freed(), from run to run. `gptscope`
                   calls it first thing (server/cli.py), before any thread allocates; the tests'
                   processes too (tests/conftest.py).

Neither changes a number: the same arithmetic, on memory that is already mapped. Where the C library is
not glibc (macOS, Windows, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 32 * 2**20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64 bits)
KEEP_BYTES = 2**30  # free memory kept at the heap's top while a run lasts
GLIBC_START = 128 * 2**10  # both thresholds as glibc starts (DEFAULT_MMAP_THRESHOLD_MIN, DEFAULT_TRIM_THRESHOLD)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_C = _libc()
# malloc_trim where the C library has one (glibc; some others too); the settings below only on glibc
_TRIM = getattr(_C, "malloc_trim", None) if _C is not None else None
_GLIBC_NAMES = ("mallopt", "malloc_trim", "gnu_get_libc_version")
_LIBC = _C if _C is not None and all(hasattr(_C, f) for f in _GLIBC_NAMES) else None
_lock = threading.Lock()
_inside = 0  # runs inside keep_freed() now (they may overlap: two training runs of one process)


def available() -> bool:
    """Whether the C library is glibc (where these settings exist)."""
    return _LIBC is not None


def trim() -> None:
    """Give the free memory at the heap's top back to the system (malloc_trim; a no-op where the C
    library has none)."""
    if _TRIM is not None:
        _TRIM(0)


def one_arena() -> bool:
    """Every thread allocates from the main heap. True where it was set."""
    return _LIBC is not None and bool(_LIBC.mallopt(M_ARENA_MAX, 1))


@contextmanager
def keep_freed() -> Iterator[None]:
    """Freed memory stays with the process until the last overlapping run leaves, then goes back."""
    global _inside
    if _LIBC is None:
        yield
        return
    with _lock:
        if _inside == 0:
            _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            _LIBC.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                _LIBC.mallopt(M_MMAP_THRESHOLD, GLIBC_START)
                _LIBC.mallopt(M_TRIM_THRESHOLD, GLIBC_START)
                _LIBC.malloc_trim(0)
