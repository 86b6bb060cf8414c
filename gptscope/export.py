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


def _export(url: str, panel: str, timeout_s: float) -> str:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        raise ExportUnavailable(
            "a static panel is made by a headless Chromium: pip install 'gptscope[notebook]' (Playwright)"
        ) from None
    ms = timeout_s * 1000
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=chromium(), args=ARGS, headless=True)
        except Error as e:
            raise ExportUnavailable(
                f"no Chromium to make the static panel with ({e.message.splitlines()[0]}): install one "
                "(apt-get install chromium, or playwright install chromium) or set GPTSCOPE_CHROMIUM"
            ) from None
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.set_default_timeout(ms)
            page.goto(url)
            page.wait_for_function("() => window.gptscopeExport")
            if page.evaluate("(p) => !document.getElementById(`${p}-panel`)", panel):
                raise ExportFailed(f"the page has no panel {panel!r} for this model")
            page.wait_for_selector(f"body[data-ready], #{panel}-panel[data-ready]", state="attached")
            return page.evaluate("(p) => gptscopeExport(p)", panel)
        except Error as e:
            raise ExportFailed(e.message.splitlines()[0]) from None
        finally:
            browser.close()


def export_panel(url: str, panel: str, *, timeout_s: float = 180.0) -> str:
    """The exported file of panel `panel` of the page at `url` (a page URL with `?embed=panel`).
    Runs in a thread of its own: Playwright's sync API refuses a thread with a running asyncio
    loop, which a Jupyter kernel's main thread and a server's have."""
    out: dict = {}

    def work() -> None:
        try:
            out["html"] = _export(url, panel, timeout_s)
        except BaseException as e:  # raised again in the caller's thread
            out["error"] = e

    t = threading.Thread(target=work, name="gptscope-export", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["html"]


def without_plotly(html: str) -> str:
    """An exported file without its Plotly block: in a notebook it takes the Plotly that the
    notebook's first static panel shares (lib/export_html.js: window.parent.__gptscopePlotly)."""
    return PLOTLY_BLOCK.sub("", html, count=1)
