"""tests/run_guard.py's guards, tried on a small inner pytest run (a folder of its own whose conftest
takes the same hooks): the memory ceiling stops a run with a message and a summary instead of an OOM
kill (even after a test left SIGINT ignored), a thread or child process left running fails the run and is named, and under xdist each
worker's peak memory is reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from run_guard import *  # noqa
"""


def inner_run(tmp_path: Path, tests: str, *args: str, conftest: str = "", **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST + conftest)
    (tmp_path / "test_inner.py").write_text(tests)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this folder is the inner run's rootdir
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:schemathesis",
            "-p",
            "no:hypothesispytest",
            *args,
            str(tmp_path),
        ],
        cwd=tmp_path,
        # the inner run is a plain one even when this test runs in an xdist worker
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_test_past_the_memory_ceiling_stops_the_run_with_a_message_and_a_summary(tmp_path):
    # test_small leaves SIGINT ignored (as a library's signal handling can): the ceiling's stop still works
    tests = """
import signal, time

def test_small():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_grows():
    hog = bytearray(400 * 2**20)
    hog[:: 4096] = b"x" * len(hog[:: 4096])  # touch every page, so it is resident
    time.sleep(30)  # woken by the ceiling's interrupt

def test_never_reached():
    pass
"""
    p = inner_run(tmp_path, tests, "-n", "0", GPTSCOPE_TEST_MEMORY_MB="250")
    out = p.stdout + p.stderr
    assert p.returncode == 2, out  # interrupted, not killed
    assert "memory ceiling" in out and "test_inner.py::test_grows" in out and "over the ceiling of 250 MB" in out
    assert "1 passed" in out and "test_never_reached" not in p.stdout.split("short test summary")[-1]
    assert "peak memory (tests)" in out  # the summary was printed
    assert "SIGINT's handler was changed (and put back before the next test) by: ['test_inner.py::test_small" in out


@pytest.mark.slow  # two inner runs
def test_a_thread_or_a_process_left_running_fails_the_run_and_is_named(tmp_path):
    # what the tests leave runs until the inner run's pytest_unconfigure, after the guard has looked
    # (a 2-s sleep could end first on a loaded machine, and the run then passed without naming it)
    tests = """
import subprocess, threading

stop, procs = threading.Event(), []

def release():
    stop.set()
    for p in procs:
        p.kill()
        p.wait()

def test_leaves_a_thread():
    threading.Thread(target=stop.wait, args=(60,), name="forgotten-thread").start()

def test_leaves_a_process():
    procs.append(subprocess.Popen(["sleep", "60"]))
"""
    release = """
def pytest_unconfigure(config):
    sys.modules["test_inner"].release()
"""
    p = inner_run(tmp_path, tests, "-n", "0", conftest=release)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "2 passed" in out
    for named in ("forgotten-thread", "sleep (", "left threads or processes running"):
        assert named in out, f"{named!r} is not in the inner run's output:\n{out[-4000:]}"

    clean = inner_run(tmp_path, "def test_ok():\n    pass\n", "-n", "0")
    assert clean.returncode == 0 and "0 non-daemon threads [], 0 child processes" in clean.stdout


@pytest.mark.slow  # an inner run starting two workers
def test_each_xdist_worker_reports_its_peak_memory(tmp_path):
    tests = "".join(f"def test_{i}():\n    pass\n" for i in range(4))
    p = inner_run(tmp_path, tests, "-n", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "peak memory (gw0)" in p.stdout and "peak memory (gw1)" in p.stdout
    assert "time per file" in p.stdout and "4 tests  test_inner.py" in p.stdout


def test_files_go_to_the_workers_browser_first_then_new_files_then_the_longest(tmp_path):
    """run_guard.order_for_workers with a cache of last runs' seconds per file: the browser unit (its
    timed tests last), the late browser files, then files with no figure in collection order, the rest
    longest first."""
    import run_guard

    class Item:
        def __init__(self, nodeid: str, timed: bool = False) -> None:
            self.nodeid, self.timed = nodeid, timed

        def get_closest_marker(self, name: str):
            return self.timed if name == "timed" else None

    class Config:
        class cache:  # pytest's config.cache, as far as order_for_workers reads it
            @staticmethod
            def get(key, default):
                assert key == run_guard.SECONDS_KEY
                return {"tests/test_short.py": 5.0, "tests/test_long.py": 90.0}

    ids = [
        "tests/test_short.py::a",
        "tests/browser/test_export.py::b",
        "tests/test_new.py::c",
        "tests/test_long.py::d",
        "tests/browser/test_big_model.py::timed",
        "tests/browser/test_index_page.py::e",
        "tests/test_short.py::f",
        "tests/test_other_new.py::g",
    ]
    items = [Item(i, timed=i.endswith("::timed")) for i in ids]
    run_guard.order_for_workers(items, Config())
    assert [i.nodeid for i in items] == [
        "tests/browser/test_index_page.py::e",
        "tests/browser/test_big_model.py::timed",
        "tests/browser/test_export.py::b",
        "tests/test_new.py::c",
        "tests/test_other_new.py::g",
        "tests/test_long.py::d",
        "tests/test_short.py::a",
        "tests/test_short.py::f",
    ]


def test_a_clean_clone_starts_the_known_long_files_first_and_the_tour_once():
    """With no figure at all (a clean clone, as on CI) the KNOWN_SECONDS files go first among the
    others, longest first, the rest in collection order; test_notebook.py shares the late browser unit
    with test_notebook_embeds.py (one executed tour)."""
    import run_guard

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

        def get_closest_marker(self, name: str):
            return None

    ids = ["tests/test_a.py::x", "tests/test_jobs.py::y", "tests/test_fuzz.py::z", "tests/test_b.py::w"]
    items = [Item(i) for i in ids]
    run_guard.order_for_workers(items)
    assert [i.nodeid for i in items] == [
        "tests/test_fuzz.py::z",
        "tests/test_jobs.py::y",
        "tests/test_a.py::x",
        "tests/test_b.py::w",
    ]
    assert run_guard.unit_of("tests/test_notebook.py::t") == run_guard.unit_of(
        "tests/browser/test_notebook_embeds.py::t"
    )
