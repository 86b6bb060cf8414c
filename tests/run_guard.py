"""What every test run reports and guards, as pytest hooks (tests/conftest.py imports them; so does
tests/test_run_guard.py's inner run):

- where the time goes: after pytest's `--durations`, the seconds per test file (setup + call +
  teardown), the table docs/benchmarks.md keeps;
- the peak memory of each test process (the one process, or each xdist worker) and of its largest
  child, and what each leaves running at the end: a non-daemon thread or a child process still
  alive when the session ends fails the run, naming it;
- a memory ceiling: a watchdog thread samples the resident memory of the test process and all its
  descendants (the served app, Chromium, torchrun) twice a second; past the ceiling it stops the run
  with a message naming the test and the figure, and pytest still prints its summary, instead of
  the kernel's OOM killer ending the run silently. The ceiling is GPTSCOPE_TEST_MEMORY_MB, or by
  default 80% of the machine's memory shared among the test processes. That stop is a SIGINT, so a
  test that leaves SIGINT ignored or handled elsewhere would disable it (and every process it starts
  afterwards inherits an ignored SIGINT): before each test Python's own handler is put back, and the
  summary names the test that had changed it;
- how pytest-xdist shares the work (`-n auto --dist loadfile` in pyproject's addopts): one worker
  per core, at most MAX_WORKERS; each file on one worker, and the browser tests as two units each
  run in turn on one worker (the `timed` ones last in theirs), so at most two Chromiums compete;
- per-test time limits are pytest-timeout's (`timeout` in pyproject's [tool.pytest.ini_options]):
  a hung test fails with every thread's stack, and the run goes on.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from pathlib import Path

import pytest

PER_FILE_ROWS = 30  # the files the per-file table names; the rest are summed in its last row
CEILING_ENV = "GPTSCOPE_TEST_MEMORY_MB"
SAMPLE_S = 0.5
PAGE = os.sysconf("SC_PAGE_SIZE")

_state: dict = {"test": "(collecting)", "stopped": None, "sigint_changed_by": []}


# ---- memory --------------------------------------------------------------------------------------


def process_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Every process's children and resident bytes, from each /proc/PID/stat (the parent field:
    /proc/PID/task/TID/children needs a kernel built with CONFIG_PROC_CHILDREN and lists one thread's
    children only)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            children.setdefault(int(fields[1]), []).append(int(d))
            rss[int(d)] = int(fields[21]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
    return children, rss


def tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and every process below it, in MB (from /proc)."""
    children, rss = process_table()
    below, frontier = {root}, [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in below:
                below.add(child)
                frontier.append(child)
    return sum(rss.get(p, 0) for p in below) / 2**20


def workers(config) -> int:
    n = getattr(config.option, "numprocesses", None)
    if isinstance(n, int) and n > 0:
        return n
    w = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    return int(w) if w and w.isdigit() else 1


def ceiling_mb(config) -> float:
    if os.environ.get(CEILING_ENV):
        return float(os.environ[CEILING_ENV])
    total = os.sysconf("SC_PHYS_PAGES") * PAGE / 2**20
    return 0.8 * total / workers(config)


def _watch(limit: float, pid: int) -> None:
    while _state["stopped"] is None:
        used = tree_rss_mb(pid)
        if used > limit:
            _state["stopped"] = (
                f"memory ceiling: the test process and its children hold {used:,.0f} MB, over the ceiling of "
                f"{limit:,.0f} MB ({CEILING_ENV}), during {_state['test']}; the run is stopped here"
            )
            os.write(2, ("\n" + _state["stopped"] + "\n").encode())
            os.kill(
                os.getpid(), signal.SIGINT
            )  # a KeyboardInterrupt in the test (a wait is woken too): pytest ends with its summary
            return
        time.sleep(SAMPLE_S)


MAX_WORKERS = 4  # each worker holds a model, and the browser worker a served app and a Chromium


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per core this process may use, at most MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


# Browser test files that judge no timing (the exports, fine-tuning from the page, and the tour's
# embeds, whose executed tour test_notebook.py shares when both run on one worker): one unit of their
# own, handed out second, so that another worker runs them while the first is on the rest of the
# browser tests (about 280 s of 850 on 2 cores), and the files outside tests/browser, longest first,
# fill both workers' ends. (Handed out last, the unit was a tail: in a full run here its worker ran it
# alone for its last 170 s, while the other had nothing left.)
LATE_BROWSER = frozenset(
    {
        "test_export.py",
        "test_export_pages.py",
        "test_export_learn.py",
        "test_finetune_page.py",
        "test_notebook_embeds.py",
    }
)


# Files that share a session fixture with a LATE_BROWSER file go in its unit, so that one worker makes
# the fixture once: test_notebook.py and test_notebook_embeds.py both read the executed tour (26 s on CI),
# which two workers each made for themselves when xdist gave the two files to different workers.
WITH_LATE_BROWSER = frozenset({"tests/test_notebook.py"})


def unit_of(nodeid: str) -> str:
    """The worker's unit a test belongs to: its file, or one of the two browser units."""
    path = nodeid.split("::", 1)[0]
    if path in WITH_LATE_BROWSER:
        return "tests/browser (late)"
    if not path.startswith("tests/browser/"):
        return path
    return "tests/browser (late)" if path.rsplit("/", 1)[-1] in LATE_BROWSER else "tests/browser"


# Where each file's seconds (setup + call + teardown) of the last run that ran it are kept (pytest's
# cache, .pytest_cache/): the other files go to the workers longest first, so that the last to start
# are short and the workers finish together. Files with no figure yet (a clean clone: all of them; after
# fast-subset runs: the slow ones) go first, in the collection's order: a guess from their test counts
# sent test_fuzz (2 tests, 106 s) last, beside the late browser unit, and the full run took 80 s more.
SECONDS_KEY = "gptscope/seconds-per-file"
# The longest files outside the browser units on CI (setup + call + teardown, docs/benchmarks.md), for a
# run with no figure of its own for them (a clean clone, as CI's): they go first among the files with no
# figure, longest first, so that none of them starts last beside the other worker's end (the full run at
# 1e26c23 started test_fuzz.py, 112 s on CI, last: 220 s alone at the end on a busy 2-core machine).
KNOWN_SECONDS = {
    "tests/test_fuzz.py": 112.0,
    "tests/test_timeline_api.py": 90.0,
    "tests/test_timeline_series.py": 25.0,
    "tests/test_jobs.py": 32.0,
    "tests/test_steering.py": 32.0,
    "tests/test_wheel.py": 26.0,
    "tests/test_hostile.py": 20.0,
    "tests/test_ig_convergence.py": 14.0,
    "tests/test_attribution_scaling.py": 14.0,
    "tests/test_probes.py": 13.0,
}


def order_for_workers(items, config=None) -> None:
    """The browser tests first, those whose verdict is a wall-clock figure (marked `timed`) last
    among them; then the LATE_BROWSER files; then every other file (those with no figure first, the
    KNOWN_SECONDS ones among them longest first, then the longest first: SECONDS_KEY)."""
    cache = getattr(config, "cache", None)
    seconds = (cache.get(SECONDS_KEY, {}) if cache is not None else {}) or {}

    def rank(item) -> tuple[int, int, float, str]:
        unit = unit_of(item.nodeid)
        if unit == "tests/browser":
            return (1 if item.get_closest_marker("timed") else 0, 0, 0.0, "")
        if unit == "tests/browser (late)":
            return (2, 0, 0.0, "")
        if unit not in seconds:
            return (3, 0, -KNOWN_SECONDS.get(unit, 0.0), "")
        return (3, 1, -float(seconds[unit]), unit)

    items.sort(key=rank)  # stable: the collection's order within a file and within each browser unit


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the browser tests (tests/browser/) as two units (unit_of): one worker
    runs each unit's tests in turn (one Chromium and served app per unit), while the other workers
    run the other files, each file on one worker (its module fixtures made once). Another --dist is
    xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist's own reordering (--loadscope-reorder, on by default) would hand the units out by their number
    # of tests, most first, and undo order_for_workers: the two-test test_fuzz.py (112 s) then started last.
    config.option.loadscopereorder = False

    class BrowserTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return BrowserTogether(config, log)


def is_controller(config) -> bool:
    """The xdist controller runs no tests (its workers do); a plain run is its own worker."""
    n = getattr(config.option, "numprocesses", None)
    return not hasattr(config, "workerinput") and isinstance(n, int) and n > 0


def pytest_configure(config) -> None:
    config._gptscope_reports = []  # each worker's process report, gathered by the controller
    if not is_controller(config):
        limit = ceiling_mb(config)
        config._gptscope_ceiling = limit
        threading.Thread(target=_watch, args=(limit, os.getpid()), name="memory-ceiling", daemon=True).start()


def pytest_runtest_logstart(nodeid, location) -> None:
    # (in the main thread, where a handler can be set) the ceiling's stop needs Python's SIGINT handler
    # (an xdist worker can start with SIGINT ignored, as execnet leaves Ctrl-C to the controller: not a
    # test's doing, so not reported)
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        if _state["test"] != "(collecting)" or "PYTEST_XDIST_WORKER" not in os.environ:
            _state["sigint_changed_by"].append(f"{_state['test']} ({signal.getsignal(signal.SIGINT)!r})")
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _state["test"] = nodeid


def pytest_keyboard_interrupt(excinfo) -> None:
    if _state["stopped"]:
        print("\n" + _state["stopped"])


# ---- the end of a session --------------------------------------------------------------------


def process_report(config) -> dict:
    alive = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon)
    names = []
    for c in sorted(process_table()[0].get(os.getpid(), [])):
        try:
            names.append(Path(f"/proc/{c}/comm").read_text().strip() + f" ({c})")
        except OSError:
            continue
    return {
        "name": os.environ.get("PYTEST_XDIST_WORKER", "tests"),
        "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "child_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "ceiling_mb": getattr(config, "_gptscope_ceiling", 0.0),
        "threads": alive,
        "children": names,
        "stopped": _state["stopped"],
        "sigint_changed_by": _state["sigint_changed_by"],
    }


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    if is_controller(session.config):
        reports = session.config._gptscope_reports
    else:
        report = process_report(session.config)
        if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller reports it
            session.config.workeroutput["gptscope_process"] = report
            return
        reports = [report]
    session.config._gptscope_reports = reports
    if any(r["threads"] or r["children"] for r in reports) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a leak fails the run (the summary says which)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist: a worker finished (or crashed); keep what it reported about its process."""
    report = getattr(node, "workeroutput", {}).get("gptscope_process")
    if report:
        node.config._gptscope_reports.append(report)


def time_per_file(terminalreporter) -> None:
    """Where the time goes, per test file: setup + call + teardown of its tests, summed from this
    run's reports (docs/benchmarks.md keeps the table of a full run)."""
    totals: dict[str, list[float]] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            if getattr(r, "when", None) in ("setup", "call", "teardown") and hasattr(r, "duration"):
                row = totals.setdefault(r.nodeid.split("::")[0], [0.0, 0])
                row[0] += r.duration
                row[1] += r.when == "call"
    if not totals:
        return
    cache = getattr(terminalreporter.config, "cache", None)
    if cache is not None:  # this run's figure for each file it ran, for the next run's order
        seconds = cache.get(SECONDS_KEY, {}) or {}
        cache.set(SECONDS_KEY, {**seconds, **{name: round(t, 2) for name, (t, _) in totals.items()}})
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    whole = sum(t for t, _ in totals.values())
    terminalreporter.write_sep("=", f"time per file (setup + call + teardown, {whole:,.0f} s in all)")
    for name, (t, n) in rows[:PER_FILE_ROWS]:
        terminalreporter.write_line(f"{t:8.1f} s {100 * t / whole:5.1f}% {n:4d} tests  {name}")
    rest = rows[PER_FILE_ROWS:]
    if rest:
        t, n = sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)
        terminalreporter.write_line(f"{t:8.1f} s {100 * t / whole:5.1f}% {n:4d} tests  ({len(rest)} other files)")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    """After the durations: the time per file, then each test process's peak memory (and its largest
    child's: a child forked from it starts from its peak) and what it left running."""
    time_per_file(terminalreporter)
    for r in terminalreporter.config._gptscope_reports:
        terminalreporter.write_line(
            f"peak memory ({r['name']}): tests {r['self_mb']:,.0f} MB, largest child process {r['child_mb']:,.0f} MB "
            f"(a fork counts from the tests' peak; ceiling {r['ceiling_mb']:,.0f} MB); left running: "
            f"{len(r['threads'])} non-daemon threads {r['threads'][:8]}, {len(r['children'])} child processes "
            f"{r['children'][:8]}"
        )
        if r["threads"] or r["children"]:
            terminalreporter.write_line(f"FAILED: {r['name']} left threads or processes running at the session's end")
        if r["stopped"]:
            terminalreporter.write_line(r["stopped"])
        if r.get("sigint_changed_by"):
            terminalreporter.write_line(
                f"SIGINT's handler was changed (and put back before the next test) by: {r['sigint_changed_by'][:8]}"
            )
