"""The process' one memory budget (server/memory.py) and how jobs wait on it (server/jobs.py)."""

from __future__ import annotations

import re
import threading
import time

import pytest
import torch

from gptscope.server import memory
from gptscope.server.errors import Busy, InputError
from gptscope.server.jobs import JobRunner
from gptscope.server.memory import MemoryBudget, MiB, Need


class Stop(Exception):
    pass


def need(n_mib: int, field: str = "max_rows") -> Need:
    return Need(n_mib * MiB, field, "this graph", "a smaller max_rows")


@pytest.fixture
def budget(monkeypatch):
    """A budget of 1 GiB of the test's own in place of the process' (other tests' jobs hold none of it)."""
    fresh = MemoryBudget(1024 * MiB)
    monkeypatch.setattr(memory, "BUDGET", fresh)
    return fresh


def test_a_need_over_the_budget_is_a_422_naming_the_field_the_estimate_and_the_limit():
    b = MemoryBudget(1024 * MiB)
    with pytest.raises(InputError) as e:
        b.check(need(2000))
    assert e.value.field == "max_rows" and e.value.status == 422
    assert "2,000 MiB" in e.value.message and "1,024 MiB" in e.value.message
    assert "GPTSCOPE_MEMORY_BUDGET" in e.value.message and "a smaller max_rows" in e.value.message
    b.check(need(1000))  # a request may take all of it
    with pytest.raises(InputError, match="768 MiB"):  # a job may not take the part kept for requests
        b.check(need(1000), job=True)


def test_the_default_budget_is_4_gib_or_half_the_machine():
    assert 512 * MiB <= memory.default_total() <= 4096 * MiB
    assert MemoryBudget().total == memory.default_total()


def test_a_request_waits_for_room_then_gets_busy_naming_what_holds_the_memory():
    b = MemoryBudget(1024 * MiB)
    held, release = threading.Event(), threading.Event()

    def job() -> None:
        with b.hold(need(700), job=True, label="training run abc"):
            held.set()
            release.wait(5)

    t = threading.Thread(target=job)
    t.start()
    held.wait(5)
    t0 = time.monotonic()
    with pytest.raises(Busy, match=r"training run abc \(700 MiB\)"), b.hold(need(400), wait=0.3):
        pass
    assert 0.25 < time.monotonic() - t0 < 2
    with b.hold(need(300), wait=0.3):  # what fits beside it goes at once
        assert b.used == 1000 * MiB
    threading.Timer(0.3, release.set).start()
    with b.hold(need(400), wait=5):  # and a wait ends as soon as the bytes are given back
        assert b.held() == [("this graph", 400 * MiB)]
    t.join()
    assert b.used == 0


def runner() -> JobRunner:
    return JobRunner("test job", "tests", Stop, replaces=False)


def work_until(release: threading.Event):
    def work(job) -> None:
        while not release.wait(0.02):
            if job.cancel.is_set():
                raise Stop

    return work


def wait_for(cond, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_jobs_of_every_kind_share_the_budget_the_second_queues_until_the_first_ends(budget):
    first_kind, second_kind = runner(), runner()  # two kinds: the budget is one, not one per kind
    release = threading.Event()
    a = first_kind.start(work_until(release), None, need=need(500))
    b = second_kind.start(work_until(threading.Event()), None, need=need(500))
    wait_for(lambda: b.status == "queued")
    assert a.status == "running" and budget.used == 500 * MiB
    release.set()
    wait_for(lambda: a.status == "done" and b.status == "running")
    assert budget.held() == [(f"test job {b.id}", 500 * MiB)]
    second_kind.cancel(b.id)
    assert b.status == "cancelled" and budget.used == 0


def test_a_queued_job_cancels_at_once_and_a_job_over_its_limit_is_refused_before_it_starts(budget):
    kind = runner()
    release = threading.Event()
    a = kind.start(work_until(release), None, need=need(700))
    other = runner()
    b = other.start(work_until(release), None, need=need(100))
    wait_for(lambda: b.status == "queued")
    t0 = time.monotonic()
    other.cancel(b.id)
    assert b.status == "cancelled" and time.monotonic() - t0 < 1
    with pytest.raises(InputError, match="more than a job may hold"):
        other.start(work_until(release), None, need=need(900))
    assert len(other.jobs) == 1  # nothing registered for the refused one
    release.set()
    wait_for(lambda: a.status == "done")  # its work ends on release, not on a cancel
    assert budget.used == 0


def rss_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


def test_memory_a_job_freed_goes_back_to_the_system_when_it_ends(budget):
    """Small freed blocks stay in glibc's heap (10 GB stayed after cancelled jobs); the runner trims it."""
    kind = runner()
    before = rss_mib()

    def work(job) -> None:
        xs = [torch.ones(16_000) for _ in range(8_000)]  # 500 MiB in 64 KiB blocks
        keep = xs[-1].clone()  # one block allocated last pins the heap's top
        del xs
        job.state = keep

    job = kind.start(work, None, need=need(600))
    job.thread.join(30)
    assert job.status == "done"
    assert rss_mib() - before < 150


def test_a_negative_budget_is_refused_naming_it(capsys):
    """gptscope serve --memory-budget -1 is one error line naming the setting, not a server that refuses everything."""
    from gptscope.server.cli import main

    assert main(["serve", "--memory-budget", "-1", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "memory_budget" in err and "greater than or equal to 0" in err and "Traceback" not in err
