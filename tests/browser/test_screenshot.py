"""The README's picture of the forward page, made by the real page: the built-in model's forward
page as it opens in a 1440 x 900 window, its first screen (header, prompt, stage bar and the model at a
glance with the next token's probabilities), checked against the API, then written to
docs/img/forward-page.png whenever it looks different from the committed one, so the picture stays
current. Commit the PNG when the test rewrites it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from exporting import layout_faults

pytestmark = pytest.mark.browser

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "forward-page.png"
WINDOW = {"width": 1440, "height": 900}  # the picture is the first screen of this window
# Chromium's anti-aliasing moves a few edge pixels by one level from one load to the next; a change
# to the page moves many pixels by far more. Pictures within this of each other are the same picture.
NOISE_LEVELS = 2

# the largest difference of any channel of any pixel between two PNGs (255 if their sizes differ)
MAX_DIFF_JS = """async ([a, b]) => {
  const load = (src) => new Promise((ok, bad) => { const i = new Image(); i.onload = () => ok(i);
    i.onerror = bad; i.src = src; });
  const [x, y] = await Promise.all([load(a), load(b)]);
  if (x.width !== y.width || x.height !== y.height) return 255;
  const pixels = (img) => { const c = document.createElement('canvas'); c.width = img.width;
    c.height = img.height; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
    return g.getImageData(0, 0, c.width, c.height).data; };
  const p = pixels(x), q = pixels(y);
  let max = 0;
  for (let i = 0; i < p.length; i++) max = Math.max(max, Math.abs(p[i] - q[i]));
  return max;
}"""


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def max_difference(page, a: bytes, b: bytes) -> int:
    blank = page.context.new_page()  # about:blank: no page script or policy in the way
    try:
        return blank.evaluate(MAX_DIFF_JS, [data_url(a), data_url(b)])
    finally:
        blank.close()


def open_as_a_reader_does(page, live_url: str) -> None:
    page.set_viewport_size(WINDOW)
    page.goto(f"{live_url}/")
    page.wait_for_selector('body[data-ready="1"][data-overview="1"]', state="attached")
    page.wait_for_selector('#overview-probs[data-state="ready"]', state="attached")
    page.evaluate("document.activeElement && document.activeElement.blur()")  # no caret in the picture
    page.wait_for_function("document.body.dataset.animating !== '1'")  # no token on its way through


def test_max_difference_tells_noise_from_a_change(page):
    page.set_content("<div id=a style='width:40px;height:20px;background:rgb(10,10,10)'></div>")
    dark = page.locator("#a").screenshot()
    page.evaluate("document.getElementById('a').style.background = 'rgb(11,10,10)'")
    near = page.locator("#a").screenshot()
    page.evaluate("document.getElementById('a').style.background = 'rgb(200,10,10)'")
    red = page.locator("#a").screenshot()
    assert max_difference(page, dark, dark) == 0
    assert max_difference(page, dark, near) == 1
    assert max_difference(page, dark, red) == 190


def test_the_forward_page_as_it_opens_is_the_readmes_screenshot(page, live_url):
    open_as_a_reader_does(page, live_url)
    prompt = page.input_value("#prompt")
    assert prompt.startswith("KING HENRY V:\n")  # the page's own default prompt
    health = page.request.get(f"{live_url}/api/v1/health").json()
    assert health["model"] in page.inner_text("header")
    trace = page.request.post(f"{live_url}/api/v1/forward", data={"text": prompt, "include": ["next_token"]})
    assert trace.ok, trace.text()
    assert page.locator("#ov-tokens .tok").count() == len(trace.json()["tokens"])
    assert page.locator("#overview-svg g.ov-block").count() == health["info"]["n_layer"]
    assert page.evaluate("scrollY") == 0 and layout_faults(page) == []
    assert not page.console_errors, page.console_errors

    data = page.screenshot()  # the first screen, as the window shows it
    assert png_size(data) == (WINDOW["width"], WINDOW["height"])

    if not SCREENSHOT.exists() or max_difference(page, SCREENSHOT.read_bytes(), data) > NOISE_LEVELS:
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        SCREENSHOT.write_bytes(data)
