"""One memory budget for the whole process.

Every request and job whose memory grows with what it is asked (a prompt's length, a graph's rows,
a training run's sizes, an answer's attention maps) estimates its peak bytes before any work, as a
`Need`: the bytes, the request field whose smaller value needs less, and how messages name the work.
`BUDGET.hold(need)` then

- refuses at once with a 422 naming that field, the estimate and the limit, when the need could never
  fit (over the whole budget; for a job, over the budget less the part kept for requests, `FLOOR`);
- otherwise waits until the bytes are free: a job waits as "queued" (a cancel ends the wait at once),
  a request up to `REQUEST_WAIT_S` seconds and then gets a 503 naming what holds the memory;
- and gives the bytes back when the work ends, then hands freed memory back to the system
  (`give_back`: glibc keeps freed arenas otherwise, and a cancelled job's gigabytes stayed).

Jobs of every kind share the one budget (total, not per kind), so two big jobs queue instead of
adding up, and the part kept for requests means a small forward pass is never stuck behind them.
Work whose memory fixed limits bound to a few MiB (the tokenizer, the lessons' curves) holds
nothing; every pass through the model holds its need (explain mode builds every head's pattern). The model itself and the byte-bounded caches (server/service.py's LRU, the model
cache) are outside the budget: they are already bounded on their own.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from gptscope.model import allocator
from gptscope.model.errors import Cancelled  # the one Cancelled: a job cancelled while it waited

from .errors import Busy, InputError

MiB = 2**20
GiB = 2**30
FLOOR = 256 * MiB  # of the budget, kept for requests: jobs together hold at most the rest
REQUEST_WAIT_S = 20.0  # how long a request waits for its bytes before a 503
GIVE_BACK_BYTES = 64 * MiB  # work that held this much hands freed memory back to the system when it ends


def default_total() -> int:
    """The budget when none is set: 4 GiB, or half the machine's memory when that is less (512 MiB at
    least)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 8 * GiB
    return max(512 * MiB, min(4 * GiB, physical // 2))


def mib(n: float) -> str:
    return f"{n / MiB:,.0f} MiB"


@dataclass(frozen=True)
class Need:
    """The peak bytes a piece of work will take beyond what is already loaded, and how to name it:
    `field` is the request field whose smaller value needs less, `what` names the work ("this
    attribution graph"), `hint` what to ask instead ("a shorter prompt or a smaller max_rows")."""

    bytes: int
    field: str
    what: str
    hint: str = ""
    where: str = "body"


@dataclass
class _Held:
    need: Need
    job: bool
    label: str


class MemoryBudget:
    """The bytes handed out to the work going now, at most `total` of them (see the module's text)."""

    def __init__(self, total: int | None = None) -> None:
        self.total = total or default_total()
        self._held: dict[int, _Held] = {}
        self._cond = threading.Condition()
        self._next = 0

    def configure(self, total: int | None) -> None:
        """Set the total (None or 0: the default); work holding bytes keeps them."""
        with self._cond:
            self.total = total or default_total()
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake the work waiting for bytes to look again (a job's cancel ends its wait at once)."""
        with self._cond:
            self._cond.notify_all()

    def limit(self, job: bool) -> int:
        """The most one piece of work may hold: the whole budget for a request, less FLOOR for a job."""
        return max(0, self.total - FLOOR) if job else self.total

    @property
    def used(self) -> int:
        return sum(h.need.bytes for h in self._held.values())

    def held(self) -> list[tuple[str, int]]:
        """What holds bytes now: (label, bytes), biggest first."""
        with self._cond:
            return self._sorted_held()

    def check(self, need: Need, job: bool = False) -> None:
        """A 422 naming the need's field when it could never fit, whatever else is going."""
        limit = self.limit(job)
        if need.bytes > limit:
            form = "a job" if job else "a request"
            raise InputError(
                need.field,
                f"{need.what} would take about {mib(need.bytes)} of memory, more than {form} may hold: the "
                f"server's memory budget allows {mib(limit)} (GPTSCOPE_MEMORY_BUDGET or gptscope serve "
                f"--memory-budget sets it)" + (f"; ask for {need.hint}" if need.hint else ""),
                where=need.where,
            )

    def _fits(self, need: Need, job: bool) -> bool:
        used = self.used
        if job:
            jobs = sum(h.need.bytes for h in self._held.values() if h.job)
            return jobs + need.bytes <= self.limit(True) and used + need.bytes <= self.total
        return used + need.bytes <= self.total

    @contextmanager
    def hold(
        self,
        need: Need | None,
        *,
        job: bool = False,
        label: str = "",
        cancel: Callable[[], bool] | None = None,
        queued: Callable[[], None] | None = None,
        wait: float | None = None,
    ) -> Iterator[None]:
        """Hold need's bytes for the duration of the block (see the module's text); None holds nothing.
        A job (job=True) waits for as long as it takes, calling queued() once if it has to wait and
        raising Cancelled once cancel() is true; a request waits up to `wait` seconds (REQUEST_WAIT_S,
        read when called, unless given), then raises Busy."""
        if need is None or need.bytes <= 0:
            yield
            return
        self.check(need, job)
        wait = REQUEST_WAIT_S if wait is None else wait
        key = self._take(need, job, label or need.what, cancel, queued, wait)
        try:
            yield
        finally:
            with self._cond:
                self._held.pop(key, None)
                self._cond.notify_all()
            # a request's answer made no cycles worth a 0.1 s collection; a job's runner collects and gives
            # back once the job has ended (server/jobs.py), so it is not done twice
            if need.bytes >= GIVE_BACK_BYTES and not job:
                give_back(collect=False)

    def _take(
        self,
        need: Need,
        job: bool,
        label: str,
        cancel: Callable[[], bool] | None,
        queued: Callable[[], None] | None,
        wait: float,
    ) -> int:
        deadline = time.monotonic() + wait
        told = False
        with self._cond:
            while not self._fits(need, job):
                if cancel is not None and cancel():
                    raise Cancelled(f"{label} was cancelled while it waited for memory")
                if not job and time.monotonic() >= deadline:
                    holders = ", ".join(f"{name} ({mib(n)})" for name, n in self._sorted_held())
                    raise Busy(
                        f"{need.what} needs about {mib(need.bytes)} of memory and the server's budget "
                        f"({mib(self.total)}) is held by {holders or 'other work'}; try again when that ends"
                    )
                if job and not told and queued is not None:
                    queued()
                    told = True
                self._cond.wait(timeout=0.2)
            self._next += 1
            self._held[self._next] = _Held(need, job, label)
            return self._next

    def _sorted_held(self) -> list[tuple[str, int]]:
        return sorted(((h.label, h.need.bytes) for h in self._held.values()), key=lambda x: -x[1])


BUDGET = MemoryBudget()


def hold(need: Need | None, **kw: Any) -> AbstractContextManager[None]:
    """BUDGET.hold (see MemoryBudget.hold): a request's form unless job=True is given."""
    return BUDGET.hold(need, **kw)


def give_back(collect: bool = True) -> None:
    """Return freed memory to the system: collect cycles (unless collect=False), then glibc's
    malloc_trim (a no-op elsewhere)."""
    if collect:
        gc.collect()
    allocator.trim()
