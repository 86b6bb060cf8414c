"""Real-browser fixtures: the real app served by uvicorn on a free local port, and headless Chromium.

Fixtures (other browser test modules rely on these names):
  live_url  session   base URL of the running app, e.g. "http://127.0.0.1:54321"
  browser   session   Playwright Chromium (Debian's /usr/bin/chromium; no download needed)
  page      function  a fresh context + page (1280x900); `page.console_errors` lists console
                      errors and uncaught page errors, `page.requests` every URL it requested
  another_page        function  a callable: another such page in the same context
  screenshot          function `screenshot(page, name)` -> path of test-artifacts/<name>.png
  serve_app session  `serve(checkpoint, data_dir)`: a context manager that runs the app on another
                      checkpoint and yields its URL (live_url is the built-in model through it)
  one_job_thread      module, autouse: the served app's jobs on one torch thread
"""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gptscope.server.config import BUILTIN_CHECKPOINT, KEEP_ALIVE_S, Settings

# their asserts (live_exports, check_offline, walk_through) say what failed
pytest.register_assert_rewrite("exporting", "overview_checks")
from exporting import captured_bands  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    # one renderer process for every page of a site (127.0.0.1, whatever the port): with the shared
    # context's keeper page holding it open, V8 keeps Plotly compiled from page to page (below)
    "--process-per-site",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
STARTUP_TIMEOUT_S = 60


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(checkpoint: Path, data_dir: Path):
    """Run the real app on `checkpoint` with uvicorn on a free local port (a background thread);
    yields its base URL once /api/v1/health answers, and stops it on exit."""
    import uvicorn

    from gptscope.server.app import create_app

    app = create_app(Settings(checkpoint=checkpoint, data_dir=data_dir))
    port = _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_keep_alive=KEEP_ALIVE_S
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"gptscope-live-server-{port}", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last_error: Exception | None = None
    # one client for every poll: each bare httpx.get builds an SSL context (about 30 ms of CPU, even for
    # http), ten times a second while a large checkpoint loads
    with httpx.Client(timeout=2, trust_env=False) as poll:
        while True:
            if not thread.is_alive():
                pytest.fail("the live gptscope server exited during start-up (see the log above)")
            try:
                if poll.get(f"{url}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError as exc:
                last_error = exc
            if time.monotonic() > deadline:
                server.should_exit = True
                pytest.fail(
                    f"the live gptscope server did not answer /api/v1/health within "
                    f"{STARTUP_TIMEOUT_S} s (last error: {last_error!r})"
                )
            time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def one_job_thread():
    """The served app's jobs (training runs from /train, fine-tuning, ...) on one torch thread while a
    browser test module runs: beside the other test worker and Chromium, a job's second thread waits for
    a core (beside a process keeping one core busy: test_train_page.py 85 s on one thread against 95 s on
    two; with test_finetune_page.py 104 s against 109 s). The module's end gives the other test files
    the app's own count back (tests/test_training_api.py checks it)."""
    from gptscope.server import jobs

    kept, jobs.JOB_THREADS = jobs.JOB_THREADS, 1
    yield
    jobs.JOB_THREADS = kept


@pytest.fixture(scope="session")
def serve_app():
    """`serve` for a test module that needs a second server (another checkpoint)."""
    return serve


@pytest.fixture(scope="session")
def live_url(tmp_path_factory):
    # runs, uploads and checkpoints go to a temporary folder, never ~/.gptscope
    with serve(BUILTIN_CHECKPOINT, tmp_path_factory.mktemp("gptscope-data")) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        msg = f"{CHROMIUM} not found: browser tests need Debian's chromium (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(msg + "; CI is expected to install it")
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def shared_context(browser, live_url):
    """One browser context for every test's page, and a keeper page in it that stays open. Plotly.js
    (its cartesian bundle) is 1.5 MB: each new page would compile and run it again. With
    one renderer process per site (--process-per-site) kept alive by the keeper, V8 keeps it
    compiled and a page's copy runs in 0.3-0.5 s. The app keeps no cookies and no storage, so one
    test's page sees nothing of another's; a test that needs a context of its own (other settings,
    the network cut) makes one."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    keeper = context.new_page()
    keeper.goto(f"{live_url}/api/v1/health")
    context.keeper = keeper
    try:
        yield context
    finally:
        context.close()


def watched_page(context):
    """A new page of `context` that lists its console errors and uncaught page errors
    (`console_errors`) and every URL it requested (`requests`)."""
    pg = context.new_page()
    pg.console_errors = []
    pg.requests = []
    pg.on(
        "console",
        lambda msg: (
            pg.console_errors.append(f"console.{msg.type}: {msg.text} @ {msg.location}")
            if msg.type == "error"
            else None
        ),
    )
    pg.on("pageerror", lambda err: pg.console_errors.append(f"pageerror: {err}"))
    pg.on("request", lambda req: pg.requests.append(req.url))
    return pg


@pytest.fixture
def page(shared_context):
    pg = watched_page(shared_context)
    try:
        yield pg
    finally:
        for other in shared_context.pages:  # the test's page and any it opened
            if other is not shared_context.keeper:
                other.close()


@pytest.fixture
def another_page(page, shared_context):
    """A callable: another page like `page`, in the same context (closed with it)."""
    return lambda: watched_page(shared_context)


def save_screenshot(pg, name: str, full_page: bool = True) -> Path:
    """Save a PNG of the page to test-artifacts/<name>.png (repo root) and return its path.

    A full-page shot is taken from the top of the page, and the page scrolled back after it:
    Chromium draws the whole page as it stands, so a bar stuck to the top of the window (the forward
    page's, /compare's and /patch's layer/head/position bar, position: sticky) would be drawn over a
    card halfway down, its own place at the top left as a blank band. The shot must show no blank
    band between two cards (exporting.BANDS, as drawn)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    if not full_page:
        pg.screenshot(path=str(path))
        return path
    y = pg.evaluate("() => { const y = scrollY; scrollTo(0, 0); return y; }")
    try:
        pg.screenshot(path=str(path), full_page=True)
        assert captured_bands(pg) == [], path
    finally:
        pg.evaluate("(y) => scrollTo(0, y)", y)
    return path


@pytest.fixture
def screenshot():
    return save_screenshot
