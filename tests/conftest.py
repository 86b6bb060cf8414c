"""Shared fixtures: the built-in model loaded once, an in-process client, a tiny random GPT.

`python -m pytest` runs every test (the README's command, and CI's). The fast subset for the
edit-test loop, `python -m pytest -m "not slow and not browser"`, runs in about a minute on two
cores (both run on every core: pyproject's addopts start pytest-xdist; see tests/run_guard.py).
`@pytest.mark.slow` marks each test whose own work takes seconds (it trains or fine-tunes a model, starts processes such as torchrun, a wheel's venv or kill -9 rounds, runs the notebook, or
sweeps every architecture). Expensive setup that tests only read is shared through module or
session fixtures instead.
"""

from __future__ import annotations

import os
import sys

# OpenMP threads that wait for work sleep instead of spinning (read when torch loads, below): on a
# shared two-core machine a training job's spinning threads starve everything else (three
# test_training_api tests: 8 s instead of 11-31 s under load). Results are the same either way.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Every thread allocates from glibc's main heap, as in `gptscope` (server/cli.py: model/allocator.py's
# one_arena): the test workers xdist starts read this when they start; this process is set below.
os.environ.setdefault("MALLOC_ARENA_MAX", "1")

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set (as on the machines here): without
# it every test process compiled the app's modules from source and pytest rewrote each test
# module's asserts again, about 6 s of each worker's start (a fast-subset run starts three processes).
sys.dont_write_bytecode = False

if TYPE_CHECKING:  # imported where used: an xdist controller, which runs no test, never loads torch
    from gptscope.model.gpt import GPT, GPTConfig
    from gptscope.server.service import ModelService

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout (examples/ is not package data)
BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """tests/browser is not even imported when -m is a plain `and` of terms, one of them
    `not browser` (as in the fast subset), since that deselects every browser test: 2.5 s less."""
    expr = config.getoption("markexpr") or ""
    terms = {t.strip() for t in expr.split(" and ")}
    if (
        collection_path == BROWSER_TESTS
        and "not browser" in terms
        and not any(c in expr for c in "()")
        and " or " not in expr
    ):
        return True
    return None


# One thread for the tests' own torch work (the app sets its own count in each request and job
# thread): the tensors here are small, and on a shared two-core machine a second thread spin-waits
# against other processes (test_modern + test_model + test_lessons + test_forward_api: 53 s on one
# thread, 290 s on two, under load).
def one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)


# what every run reports and guards (time per file, each process's peak memory and leaks, the
# memory ceiling): tests/run_guard.py's hooks, made this conftest's own
import run_guard  # noqa: E402
from run_guard import (  # noqa: E402, F401
    order_for_workers,
    pytest_keyboard_interrupt,
    pytest_runtest_logstart,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
    pytest_xdist_auto_num_workers,
    pytest_xdist_make_scheduler,
)


def pytest_configure(config) -> None:
    if not run_guard.is_controller(config):
        from gptscope.model import allocator

        # a plain run's own process (xdist's workers read MALLOC_ARENA_MAX, above), before run_guard's
        # watcher thread allocates
        allocator.one_arena()
    run_guard.pytest_configure(config)
    if not run_guard.is_controller(config):
        one_torch_thread()


def pytest_collection_modifyitems(config, items):
    order_for_workers(items, config)


def pytest_collection_finish(session) -> None:
    """What a test process holds once its tests are collected (torch, transformers, the app's modules and
    every test module) lives as long as the process, as `gptscope serve`'s startup heap does: tell the
    garbage collector (gc.freeze, as server/service.py's freeze_heap does for the served app), so that its
    full collections walk only what the tests make. A job's end collects (server/memory.py's give_back):
    in a test process of 440,000 objects that took 190 ms, 65 ms frozen; test_jobs, test_training_api,
    test_sae and test_attribution ran in 43 s instead of 50 s."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def service() -> ModelService:
    from gptscope.server.config import BUILTIN_CHECKPOINT
    from gptscope.server.service import ModelService

    return ModelService(BUILTIN_CHECKPOINT)


@pytest.fixture(scope="session")
def app(service, tmp_path_factory):
    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    return create_app(
        Settings(
            checkpoint=BUILTIN_CHECKPOINT, allow_hosts=["testserver"], data_dir=tmp_path_factory.mktemp("gptscope-data")
        ),
        service=service,
    )


@pytest.fixture(scope="session")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def tclient(tmp_path_factory, service):
    """A client of an app of its own (its own data folder) holding the corpus "small"; the built-in
    model served again at the end."""
    from fastapi.testclient import TestClient
    from small_text import SMALL_TEXT

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    app = create_app(
        Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path_factory.mktemp("data"), allow_hosts=["testserver"]),
        service=service,
    )
    with TestClient(app) as c:
        r = c.post("/api/v1/corpora", files={"file": ("small.txt", SMALL_TEXT.encode())}, data={"name": "small"})
        assert r.status_code == 201
        yield c
        c.post("/api/v1/model", json={"checkpoint": "builtin"})


@pytest.fixture
def tiny_config() -> GPTConfig:
    from gptscope.model.gpt import GPTConfig

    return GPTConfig(vocab_size=97, n_ctx=32, n_layer=2, n_head=4, d_model=32)


@pytest.fixture
def tiny_model(tiny_config) -> GPT:
    import torch

    from gptscope.model.gpt import GPT

    torch.manual_seed(0)
    return GPT(tiny_config).eval()


@pytest.fixture(scope="session")
def executed_tour(tmp_path_factory):
    """examples/tour.ipynb run top to bottom in a fresh kernel (nbclient), as a user would; the
    server it starts keeps its data in a temporary folder. Shared by tests/test_notebook.py and
    the browser test that loads its embed URLs."""
    from unittest import mock

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO_ROOT / "examples" / "tour.ipynb", as_version=4)
    # static mode: each panel is its self-contained HTML in the output, so the saved notebook shows it
    # with no server (tests/browser/test_notebook_embeds.py opens it that way)
    env = {"GPTSCOPE_DATA_DIR": str(tmp_path_factory.mktemp("gptscope-tour")), "GPTSCOPE_EMBED": "static"}
    with mock.patch.dict("os.environ", env):
        NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO_ROOT / "examples")}}
        ).execute()
    return nb


@pytest.fixture(scope="session")
def tour_embeds(executed_tour) -> list[str]:
    """The live page URL of every panel the executed tour displayed, in order (a static panel's
    frame names the page it was made from in data-src)."""
    import re

    nb = executed_tour
    return [
        re.search(r'\bdata-src="([^"]+)"', out["data"]["text/html"]).group(1).replace("&amp;", "&")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") in ("display_data", "execute_result")
        and "<iframe" in out.get("data", {}).get("text/html", "")
    ]
