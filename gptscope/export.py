"""One panel of a gptscope page as a self-contained HTML file, made without a person at a browser.

    html = export_panel("http://127.0.0.1:8000/?text=ROMEO%3A&embed=attention", "attention")

The page is opened in embed mode by a headless Chromium (through Playwright), and once it has drawn
and its requests have settled the page's own exporter (static/js/lib/export_html.js, the same one
behind every panel's "HTML" download) writes the file: the panel's shell, styles, modules, the API
answers it drew from and Plotly, gzipped; no network is needed to open it. `notebook.show(...,
embed="static")` and `GET /api/v1/export` both use this.

The browser: `GPTSCOPE_CHROMIUM` (a path), else the first of CHROMIUMS that exists, else Playwright's
own (`playwright install chromium`). Playwright itself: `pip install 'gptscope[notebook]'`.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import threading
from pathlib import Path

CHROMIUMS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--process-per-site",  # one renderer for the app's pages: the page kept open keeps Plotly compiled
]
# the <script> that carries Plotly in an exported file (lib/export_html.js writes exactly this)
PLOTLY_BLOCK = re.compile(r'<script type="application/gzip" id="gptscope-plotly">[A-Za-z0-9+/=]*</script>\n')


class ExportUnavailable(RuntimeError):
    """No headless browser to make the file with (Playwright or Chromium missing)."""


class ExportFailed(RuntimeError):
    """The page did not draw the panel, or refused to export it (its message says why)."""


def chromium() -> str | None:
    """The Chromium to run: GPTSCOPE_CHROMIUM, a system one, or None (Playwright's own)."""
    if os.environ.get("GPTSCOPE_CHROMIUM"):
        return os.environ["GPTSCOPE_CHROMIUM"]
    found = [p for p in CHROMIUMS if Path(p).exists()] or [shutil.which("chromium") or ""]
    return found[0] or None


def _launch(pw):
    from playwright.sync_api import Error

    try:
        return pw.chromium.launch(executable_path=chromium(), args=ARGS, headless=True)
    except Error as e:
        raise ExportUnavailable(
            f"no Chromium to make the static panel with ({e.message.splitlines()[0]}): install one "
            "(apt-get install chromium, or playwright install chromium) or set GPTSCOPE_CHROMIUM"
        ) from None


def _export(browser, url: str, panel: str, timeout_s: float, headers: dict[str, str] | None = None):
    """Open `url` in a new page of `browser` and have the page export `panel`: (html, the page);
    `headers` go with each of its requests (a server's token)."""
    from playwright.sync_api import Error

    page = browser.new_page(viewport={"width": 1100, "height": 900})
    try:
        page.set_default_timeout(timeout_s * 1000)
        if headers:
            page.set_extra_http_headers(headers)
        page.goto(url)
        page.wait_for_function("() => window.gptscopeExport")
        if page.evaluate("(p) => !document.getElementById(`${p}-panel`)", panel):
            raise ExportFailed(f"the page has no panel {panel!r} for this model")
        page.wait_for_selector(f"body[data-ready], #{panel}-panel[data-ready]", state="attached")
        return page.evaluate("(p) => gptscopeExport(p)", panel), page
    except Error as e:
        page.close()
        raise ExportFailed(e.message.splitlines()[0]) from None
    except BaseException:
        page.close()
        raise


class _Exporter:
    """One headless Chromium for the exports of this process, driven by a thread of its own
    (Playwright's sync API refuses a thread with a running asyncio loop, which a Jupyter kernel's
    main thread and a server's have). Launching it and compiling Plotly's 4.8 MB on a fresh page
    take seconds, so the browser stays up between exports, and the last page stays open until the
    next one has loaded: with one renderer process per site, V8 keeps Plotly compiled. The
    browser closes after IDLE_S seconds without an export."""

    IDLE_S = 60.0

    def __init__(self) -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def run(self, url: str, panel: str, timeout_s: float, headers: dict[str, str] | None = None) -> str:
        out: dict = {}
        done = threading.Event()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self.work, name="gptscope-export", daemon=True)
                self.thread.start()
            self.jobs.put((url, panel, timeout_s, headers, out, done))
        done.wait()
        if "error" in out:
            raise out["error"]
        return out["html"]

    def next_job(self):
        """The next export, or None once none came for IDLE_S seconds (the thread then ends)."""
        while True:
            try:
                return self.jobs.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self.lock:
                    if self.jobs.empty():
                        self.thread = None
                        return None

    def work(self) -> None:
        pw, failed = _start_playwright()
        browser = last = None
        try:
            while (job := self.next_job()) is not None:
                url, panel, timeout_s, headers, out, done = job
                try:
                    if failed is not None:
                        raise failed
                    if browser is None or not browser.is_connected():
                        browser, last = _launch(pw), None
                    out["html"], page = _export(browser, url, panel, timeout_s, headers)
                    if last is not None:
                        last.close()
                    last = page
                except BaseException as e:  # raised again in the caller's thread
                    out["error"] = e
                finally:
                    done.set()
        finally:
            with self.lock:  # a thread that ends otherwise than idle must not be waited for
                if self.thread is threading.current_thread():
                    self.thread = None
            if browser is not None:
                browser.close()
            if pw is not None:
                pw.stop()


def _start_playwright():
    """(Playwright started, None), or (None, the ExportUnavailable each export then raises): Playwright
    missing, or its driver would not start."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, ExportUnavailable(
            "a static panel is made by a headless Chromium: pip install 'gptscope[notebook]' (Playwright)"
        )
    try:
        return sync_playwright().start(), None
    except Exception as e:
        return None, ExportUnavailable(f"Playwright could not start ({str(e).splitlines()[0] if str(e) else e!r})")


_EXPORTER = _Exporter()


def export_panel(url: str, panel: str, *, timeout_s: float = 180.0, headers: dict[str, str] | None = None) -> str:
    """The exported file of panel `panel` of the page at `url` (a page URL with `?embed=panel`);
    `headers` go with every request the page makes (`Authorization` for a server with a token).
    Exports run one at a time, in the exporter's thread (see _Exporter)."""
    return _EXPORTER.run(url, panel, timeout_s, headers)


def without_plotly(html: str) -> str:
    """An exported file without its Plotly block: in a notebook it takes the Plotly that the
    notebook's first static panel shares (lib/export_html.js: window.parent.__gptscopePlotly)."""
    return PLOTLY_BLOCK.sub("", html, count=1)
