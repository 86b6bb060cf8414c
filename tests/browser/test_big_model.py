"""The pages at GPT-2 small's size, in a real headless Chromium: random checkpoints shaped like GPT-2
small (12 layers x 12 heads, a 50,257-token vocabulary, 1,024 positions) and a 128-token prompt.
The first test opens the forward page on GPT-2 small's whole shape (width 768) and walks every
stage: no task may cost the tab's main thread a second of CPU time. The others use width 96 (so the
fixture builds in a second): every stage draws what the API returns, the 144 small attention maps are canvases painted
as they scroll into view, axes carry thinned labels, and /learn, /tokenizer and /train work with
this model. A 24-layer x 16-head model (width 64, a character vocabulary) checks that the overview
still lays out its first screen and that its walk goes through every step.

Timings measured here (the longest task, each drawing, the page's node count) are written to
test-artifacts/big-model-timings.json."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest
from exporting import layout_faults
from overview_checks import walk_through

pytestmark = pytest.mark.browser

N_LAYER, N_HEAD, T = 12, 12, 128
DEEP = (24, 16)  # the `deep` fixture's layers and heads: the overview draws most blocks compact
D_GPT2 = 768  # GPT-2 small's width (the `gpt2_small` fixture; `big` is narrower, see there)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TIMINGS: dict[str, object] = {}
# No single task may block the tab longer (issue #28), counted in the CPU time the tab's main thread
# spent on it (Chromium's trace: a task's `tdur`), so that what is measured is the page's own work:
# on a shared 2-core machine the same task's wall time was 1.0-2.5x that (the thread waiting for a
# core while the other test worker, the server and Playwright ran), and failed the walk on CI with
# 2.4 s. Both are reported. On 2 cores of an Intel Xeon the longest task of the every-stage walk at
# width 768 took 530 ms of CPU (700 ms wall); on an AMD EPYC 440-500 ms wall, and under Chromium's
# 2x CPU throttling 690 ms. (Before Plotly's cartesian bundle and the token axes that stopped Plotly
# measuring each tick label, single drawings took 0.8-2.9 s.)
LONG_TASK_LIMIT_MS = 1000
TASK_TRACE = ["toplevel"]  # the trace category of each task a thread runs (ThreadControllerImpl::RunTask)
# A poll of the page (tests/browser: wait_responsive) may wait out two tasks in a row and the test's own
# round trip: it only has to show that the tab never stops answering.
ROUND_TRIP_LIMIT_S = 4
NODE_LIMIT = 40_000  # an O(heads x T^2) page (one element per weight) is far above this
SLANTED_GAP_PX = 18  # slanted (-60 degree) token labels need more room than level ones
MASKED_RGB = (0xEE, 0xEE, 0xEE)
# Plotly's Viridis stops (as static/js/lib/palette.js has them for the canvases): position in 0..255, colour
VIRIDIS = [
    (0, "#440154"),
    (16, "#48186a"),
    (32, "#472d7b"),
    (48, "#424086"),
    (64, "#3b528b"),
    (80, "#33638d"),
    (96, "#2c728e"),
    (112, "#26828e"),
    (128, "#21918c"),
    (144, "#1fa088"),
    (160, "#28ae80"),
    (176, "#3fbc73"),
    (192, "#5ec962"),
    (208, "#84d44b"),
    (224, "#addc30"),
    (240, "#d8e219"),
    (255, "#fde725"),
]
STAGE_PLOTS = {
    1: ["emb-token-plot", "emb-pos-plot", "emb-sum-plot"],
    2: ["proj-plot", "pos-learned-plot", "pos-sin-plot"],
    3: ["ln-plot", "qkv-plot", "scores-plot", "masked-plot", "pattern-plot", "z-plot", "result-plot", "resid-add-plot"],
    4: ["model-view-plot", "attention-plot", "query-bars-plot"],
    5: ["mlp-hist-plot", "mlp-top-plot"],
    6: ["resid-norm-plot", "lens-plot"],
    7: ["next-plot", "sampling-plot", "loss-plot"],
    9: ["iv-plot"],
    10: ["dc-plot"],
}
# Collects every long task and every drawing of the page (lib/draw_queue.js measures each as "draw <key>").
OBSERVE = """
window.__longtasks = []; window.__draws = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longtasks.push([Math.round(e.startTime), Math.round(e.duration)]); })
  .observe({ type: "longtask", buffered: true });
new PerformanceObserver((list) => { for (const e of list.getEntries()) if (e.name.startsWith("draw ")) window.__draws.push([e.name.slice(5), Math.round(e.duration)]); })
  .observe({ type: "measure", buffered: true });
"""


def gpt2_prompt() -> str:
    """English text cut at exactly 128 GPT-2 tokens (the packaged gpt2 encoding, offline)."""
    from gptscope.model.tokenizers import get_public_encoding

    enc = get_public_encoding("gpt2")
    text = (
        "The quick brown fox jumps over the lazy dog while the old king counts his gold in the tower. "
        "Meanwhile, a young scholar reads about transformers, attention heads and the residual stream, "
        "wondering why a small model can predict the next word so well. "
    ) * 4
    prompt = enc.decode(enc.encode(text)[:T])
    assert len(enc.encode(prompt)) == T
    return prompt


PROMPT = gpt2_prompt()


@contextmanager
def gpt2_shaped(tmp_path_factory, serve_app, d_model: int):
    """A random GPT-2-small-shaped gptscope checkpoint of width `d_model` (no importer involved),
    served on its own port."""
    import torch

    from gptscope.model import checkpoint
    from gptscope.model.gpt import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=N_LAYER, n_head=N_HEAD, d_model=d_model, gelu="tanh")
    torch.manual_seed(0)
    meta = {
        "name": "gpt2-shaped",
        "tokenizer": {"kind": "tiktoken", "name": "gpt2"},
        "step": 0,
        "final": True,
        "evals": [],
        "command": "test fixture",
        "corpus": {"name": "unknown (imported)"},
        "source": {"kind": "huggingface-gpt2"},
    }
    # in memory where the machine has a tmpfs (/dev/shm), removed afterwards: the save fsyncs its
    # files, and at width 768 that was a 500-MB write to disk, whose writeback then took CPU from
    # the tab being timed (up to 127 of 200 ticks in 2 s)
    shm = Path("/dev/shm")
    ram = shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * 4 * cfg_params(cfg)
    with tempfile.TemporaryDirectory(prefix=f"gptscope-gpt2-shaped-{d_model}-", dir=shm if ram else None) as tmp:
        folder = checkpoint.save(Path(tmp) / "checkpoint", GPT(cfg), meta)
        with serve_app(folder, tmp_path_factory.mktemp(f"gpt2-shaped-{d_model}-data")) as url:
            yield {"url": url, "cfg": cfg}


def cfg_params(cfg) -> int:
    """About how many parameters a GPT of cfg has (its checkpoint is 4 bytes each)."""
    return cfg.vocab_size * cfg.d_model + cfg.n_ctx * cfg.d_model + 12 * cfg.n_layer * cfg.d_model**2


@pytest.fixture(scope="module")
def big(tmp_path_factory, serve_app):
    """GPT-2 small's layers, heads, vocabulary and context at width 96: the checkpoint builds in a
    second and each trace is quick, which is all most of these tests need."""
    with gpt2_shaped(tmp_path_factory, serve_app, 96) as b:
        yield b
    write_timings()


@pytest.fixture(scope="module")
def deep(tmp_path_factory, serve_app):
    """A tiny GPT-2 with 24 layers x 16 heads, as narrow as that allows (width 64), built by transformers
    with random weights and brought in by `gptscope import` as GPT-2's own folders are: more blocks
    than the overview can draw whole at 1440 px. Builds and imports in a few seconds."""
    transformers = pytest.importorskip("transformers")
    import torch

    from gptscope.model import importers

    torch.manual_seed(0)
    hf = transformers.GPT2Config(n_layer=DEEP[0], n_head=DEEP[1], n_embd=64, n_positions=64)
    root = tmp_path_factory.mktemp("deep")
    transformers.GPT2LMHeadModel(hf).save_pretrained(root / "hf")
    folder, _ = importers.import_model(root / "hf", "deep-gpt2", root / "data")
    with serve_app(folder, tmp_path_factory.mktemp("deep-data")) as url:
        yield url


@pytest.fixture(scope="module")
def gpt2_small(tmp_path_factory, serve_app):
    """GPT-2 small's whole shape, width 768 included (124,439,808 parameters): the embeddings,
    LayerNorm, q/k/v and projection panels draw T x 768 (and T x 2,304) heatmaps, as they would for
    the real model."""
    with gpt2_shaped(tmp_path_factory, serve_app, D_GPT2) as b:
        yield b
    write_timings()


def write_timings() -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "big-model-timings.json").write_text(json.dumps(TIMINGS, indent=1), encoding="utf-8")


def observed(page):
    """`page`, patient enough for a 9 MB trace on a busy CPU, observing long tasks."""
    page.set_default_timeout(90_000)
    page.add_init_script(OBSERVE)
    return page


@pytest.fixture
def bpage(page):
    return observed(page)


def api(page, url: str, path: str, body: dict | None = None) -> dict:
    resp = (
        page.request.post(f"{url}/api/v1{path}", data=body, timeout=120_000)
        if body is not None
        else page.request.get(f"{url}/api/v1{path}", timeout=120_000)
    )
    assert resp.ok, (
        f"{path} {body and {k: v for k, v in body.items() if k != 'text'}}: {resp.status} {resp.text()[:500]}"
    )
    return resp.json()


def open_forward(page, url: str, **params) -> float:
    """Open / on the 128-token prompt, every stage shown under the overview (stage=all); returns the
    seconds until the page had applied the trace."""
    t0 = time.monotonic()
    page.goto(f"{url}/?{urlencode({'text': PROMPT, 'stage': 'all', **params})}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    return time.monotonic() - t0


def wait_responsive(page, js: str, arg=None, timeout_s: float = 90.0) -> float:
    """Poll `js` until it is true; returns the slowest round trip of one poll in seconds (a busy
    main thread answers late, so this is the tab's responsiveness while it draws)."""
    worst = 0.0
    deadline = time.monotonic() + timeout_s
    while True:
        t0 = time.monotonic()
        done = page.evaluate(js, arg)
        worst = max(worst, time.monotonic() - t0)
        if done:
            return worst
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {js} ({arg}); console: {page.console_errors}")
        time.sleep(0.05)


def drawn(page, plot_id: str) -> float:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    return wait_responsive(page, "(id) => +(document.getElementById(id).dataset.drawn || 0) >= 1", plot_id)


def go_stage(page, n: int) -> float:
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("0" if n == 10 else str(n))
    worst = wait_responsive(page, "(n) => document.body.dataset.stage === String(n)", n)
    for plot in STAGE_PLOTS.get(n, []):
        worst = max(worst, drawn(page, plot))
    return worst


def plot_data(page, plot_id: str) -> list[dict]:
    return page.evaluate(
        "(id) => document.getElementById(id).data.map(t => ({type: t.type, name: t.name, x: t.x, y: t.y, z: t.z}))",
        plot_id,
    )


def visible(text: str) -> str:
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍")


def square(rows: list[list]) -> list[list]:
    return [r + [None] * (len(rows) - len(r)) for r in rows]


def tick_labels(page, plot_id: str, axis: str) -> list[dict]:
    """The tick labels Plotly drew on an axis (the first x or y axis): text and where on the axis (px)."""
    return page.evaluate(
        """([id, axis]) => { const gd = document.getElementById(id); const ax = gd._fullLayout[axis + 'axis'];
        return [...gd.querySelectorAll(`.${axis}axislayer-above .${axis}tick text`)]
          .map((t) => ({ text: t.textContent, px: ax.l2p(t.__data__.x) })).sort((a, b) => a.px - b.px); }""",
        [plot_id, axis],
    )


def assert_thinned(page, plot_id: str, axis: str, n: int = T, gap_px: float = 14.0) -> int:
    """A token axis of n tokens shows well under n labels, at least gap_px apart."""
    ticks = tick_labels(page, plot_id, axis)
    assert 4 <= len(ticks) <= (n + 1) // 2, f"#{plot_id} {axis}: {len(ticks)} tick labels for {n} tokens"
    pos = sorted(t["px"] for t in ticks)
    gaps = [b - a for a, b in itertools.pairwise(pos)]
    assert min(gaps) >= gap_px, f"#{plot_id} {axis}: labels {min(gaps):.1f} px apart"
    return len(ticks)


def viridis(v: float) -> tuple[int, int, int]:
    i = max(0, min(255, round(255 * v)))
    for (a, ca), (b, cb) in itertools.pairwise(VIRIDIS):
        if a <= i <= b:
            x = [int(ca[j : j + 2], 16) for j in (1, 3, 5)]
            y = [int(cb[j : j + 2], 16) for j in (1, 3, 5)]
            f = (i - a) / (b - a)
            return tuple(round(x[c] + f * (y[c] - x[c])) for c in range(3))
    raise ValueError(v)


def long_tasks(page) -> list[list[int]]:
    return page.evaluate("window.__longtasks")


def errors_of(page) -> list[str]:
    return list(page.console_errors)


# --- the forward page ------------------------------------------------------------------------------


@contextmanager
def main_thread_tasks(browser, page, at_least_ms: int = 50):
    """Trace Chromium while the block runs; the list it yields is then filled with [wall_ms, cpu_ms]
    of every task of a renderer's main thread that took at least `at_least_ms` of wall time."""
    tasks: list[list[int]] = []
    browser.start_tracing(page=page, categories=TASK_TRACE)
    try:
        yield tasks
    finally:
        events = json.loads(browser.stop_tracing())["traceEvents"]
    mains = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain"
    }
    for e in events:
        if (
            e.get("name") == "ThreadControllerImpl::RunTask"
            and (e["pid"], e["tid"]) in mains
            and e.get("dur", 0) >= at_least_ms * 1000
        ):
            assert "tdur" in e, f"Chromium's trace has no thread time for its tasks: {e}"
            tasks.append([round(e["dur"] / 1000), round(e["tdur"] / 1000)])
    tasks.sort(key=lambda t: -t[1])


def walk_every_stage(browser, page, url: str) -> tuple[list[list[int]], dict[int, float]]:
    """Open the forward page on the 128-token prompt and walk its ten stages, every plot drawn: the
    [wall_ms, cpu_ms] of each task of 50 ms or more and the slowest poll of each stage (and TIMINGS)."""
    traces = []
    page.on(
        "response",
        lambda r: traces.append(r.headers.get("content-type")) if r.url.endswith("/api/v1/forward") else None,
    )
    with main_thread_tasks(browser, page) as tasks:
        TIMINGS["open_to_ready_s"] = round(open_forward(page, url, layer=11, head=11), 2)
        assert traces and set(traces) == {"application/vnd.gptscope+msgpack"}, (
            traces
        )  # the page fetched the binary form
        assert page.text_content("#token-count") == f"{T} tokens"
        assert page.evaluate("document.querySelectorAll('#tokens .tok').length") == T
        worst = {}
        for n in range(1, 11):
            worst[n] = round(go_stage(page, n), 3)
        wait_responsive(page, "document.body.dataset.drawn === '1'")
    TIMINGS["slowest_round_trip_s_per_stage"] = worst
    TIMINGS["long_tasks_ms"] = sorted((d for _, d in long_tasks(page)), reverse=True)  # wall, as the page saw them
    TIMINGS["tasks_wall_cpu_ms"] = tasks
    TIMINGS["draw_ms"] = dict(page.evaluate("window.__draws"))
    return tasks, worst


@pytest.mark.timed  # run last among the browser tests, when no other test shares the cores
def test_every_stage_draws_a_128_token_trace_without_freezing_the_tab(browser, bpage, gpt2_small, screenshot):
    """GPT-2 small's whole shape: no task of the walk costs the tab's main thread a second of CPU
    (its wall time is reported beside it: on a shared machine it includes the waits for a core)."""
    page, url = bpage, gpt2_small["url"]
    tasks, worst = walk_every_stage(browser, page, url)
    assert tasks, "the trace saw no task of 50 ms or more: it did not watch the page"
    longest = max(cpu for _, cpu in tasks)
    nodes = page.evaluate("document.getElementsByTagName('*').length")
    TIMINGS["dom_nodes"] = nodes
    print("\nbig model timings:", json.dumps(TIMINGS))
    assert longest < LONG_TASK_LIMIT_MS, f"a task took {longest} ms of the tab's CPU ([wall, cpu] ms): {tasks}"
    assert max(worst.values()) < ROUND_TRIP_LIMIT_S, f"the tab answered late: {worst}"
    assert nodes < NODE_LIMIT, f"{nodes} elements on the page"
    # the model view is canvases, not 144 Plotly subplots
    assert page.locator("#model-view-plot canvas.hg-map").count() == N_LAYER * N_HEAD
    assert page.locator("#model-view-plot .main-svg").count() == 0
    # the 12 layers' MLP histograms: a grid of 3 x 4 subplots, none drawn over another
    assert page.get_attribute("#mlp-hist-plot", "data-grid") == "3x4"
    assert layout_faults(page) == []
    screenshot(page, "big-model-forward")
    assert errors_of(page) == []


def test_the_task_trace_counts_a_busy_task_in_full(browser, page):
    """The measure above can fail: a task that keeps the main thread busy for 3 s of wall time is
    counted as a task over the limit. (Its CPU time is less than its wall time wherever something
    else wants the cores: here the kernel's writeback and Chromium's other processes took up to a
    third of a 1.2-s loop's time while other tests ran.)"""
    page.set_content("<p>a page with a renderer of its own</p>")
    for _ in range(2):  # a trace that holds no task of the tab's main thread at all is taken again, once
        with main_thread_tasks(browser, page) as tasks:
            page.evaluate(
                "() => new Promise((done) => setTimeout(() => "
                "{ const t = performance.now(); while (performance.now() - t < 3000); done(); }, 0))"
            )
        if tasks:
            break
    assert tasks, "two traces in a row held no task of the tab's main thread (CrRendererMain)"
    wall, cpu = max(tasks, key=lambda t: t[1])
    assert wall >= 3000 and LONG_TASK_LIMIT_MS <= cpu <= wall, tasks


def test_the_layer_by_head_grid_has_all_144_heads_painted_as_they_scroll_into_view(bpage, big):
    page, url = bpage, big["url"]
    open_forward(page, url)
    full = api(page, url, "/forward", {"text": PROMPT, "include": ["attention"]})
    assert full["n_layer"] == N_LAYER and full["n_head"] == N_HEAD and len(full["tokens"]) == T
    # lazily painted: with the grid's top at the bottom of the screen, its first rows are painted, the last wait
    # (the plots above it are drawn meanwhile and push it down: scroll again until the page settles)
    t0 = time.monotonic()
    first = 'document.querySelector(\'#model-view-plot canvas[data-row="0"][data-col="0"]\')'
    for _ in range(10):
        page.evaluate("""() => { const g = document.getElementById('model-view-plot');
                                 scrollBy({ top: g.getBoundingClientRect().top - innerHeight + 80, behavior: 'instant' }); }""")
        page.wait_for_timeout(200)
        wait_responsive(page, "document.body.dataset.drawn === '1'")
        if page.evaluate(f"!!{first} && {first}.dataset.painted === '1'"):
            break
    wait_responsive(page, f"!!{first} && {first}.dataset.painted === '1'")
    first_rows_s = time.monotonic() - t0
    assert (
        page.evaluate(
            'document.querySelector(\'#model-view-plot canvas[data-row="11"][data-col="11"]\').dataset.painted'
        )
        is None
    )
    grid = page.locator("#model-view-plot")
    painted = int(grid.get_attribute("data-painted"))
    assert 0 < painted < N_LAYER * N_HEAD
    TIMINGS["grid_painted_when_its_top_shows"] = painted
    assert grid.get_attribute("data-grid") == f"{N_LAYER}x{N_HEAD}"
    cells = page.evaluate(
        "[...document.querySelectorAll('#model-view-plot canvas.hg-map')].map(c => [+c.dataset.row, +c.dataset.col, c.width])"
    )
    assert sorted((r, c) for r, c, _ in cells) == [(r, c) for r in range(N_LAYER) for c in range(N_HEAD)]
    assert all(w == T for _, _, w in cells)  # one pixel per weight
    heads = page.evaluate("[...document.querySelectorAll('#model-view-plot .hg-col')].map(e => e.textContent)")
    layers = page.evaluate("[...document.querySelectorAll('#model-view-plot .hg-row')].map(e => e.textContent)")
    assert heads == [f"H{h}" for h in range(N_HEAD)] and layers == [f"L{layer}" for layer in range(N_LAYER)]
    # ... and appear as they scroll into view
    t0 = time.monotonic()
    for r in range(N_LAYER):
        page.evaluate(
            "(r) => document.querySelector(`#model-view-plot canvas[data-row='${r}'][data-col='0']`).scrollIntoView({ block: 'center' })",
            r,
        )
        wait_responsive(
            page,
            "(r) => [...document.querySelectorAll(`#model-view-plot canvas[data-row='${r}']`)].every(c => c.dataset.painted === '1')",
            r,
        )
    TIMINGS["grid_first_rows_painted_s"] = round(first_rows_s, 3)
    TIMINGS["grid_all_rows_scrolled_and_painted_s"] = round(time.monotonic() - t0, 3)
    assert grid.get_attribute("data-painted") == str(N_LAYER * N_HEAD)

    # the pixels are the API's weights on Viridis; the masked upper triangle is the mask's grey
    pattern = full["attention"]["pattern"][11][11]
    probes = [(0, 0), (5, 2), (64, 10), (127, 0), (127, 127), (100, 99)]
    pixels = page.evaluate(
        """(probes) => { const c = document.querySelector('#model-view-plot canvas[data-row="11"][data-col="11"]');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        return probes.map(([q, k]) => [...d.slice(4 * (q * c.width + k), 4 * (q * c.width + k) + 3)]); }""",
        [*probes, (3, 90)],
    )
    for (q, k), px in zip(probes, pixels):
        want = viridis(pattern[q][k])
        assert all(abs(a - b) <= 2 for a, b in zip(px, want)), f"cell ({q}, {k}) weight {pattern[q][k]}: {px} != {want}"
    assert tuple(pixels[-1]) == MASKED_RGB

    # hover names the cell and the API's weight
    box = page.locator("#model-view-plot canvas[data-row='11'][data-col='11']").bounding_box()
    q, k = 100, 37
    page.mouse.move(box["x"] + (k + 0.5) * box["width"] / T, box["y"] + (q + 0.5) * box["height"] / T)
    tip = page.locator("#model-view-plot .hg-tip")
    tip.wait_for(state="visible")
    m = re.fullmatch(r"layer 11, head 11 · query (\d+) “(.*)” → key (\d+) “(.*)” · weight (.+)", tip.text_content())
    assert m, tip.text_content()
    hq, hk = int(m[1]), int(m[3])  # a map cell is under a pixel wide: the mouse lands within a cell or two
    assert abs(hq - q) <= 2 and abs(hk - k) <= 2
    assert m[2] == visible(full["tokens"][hq]["text"]) and m[4] == visible(full["tokens"][hk]["text"])
    assert float(m[5]) == pattern[hq][hk]

    # a click opens that head: one request for what the selection changes, the big map and the outline follow
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        page.click("#model-view-plot canvas[data-row='11'][data-col='11']")
    sent = resp.value.request.post_data_json
    assert sent["layer"] == 11 and sent["head"] == 11
    assert sorted(sent["include"]) == ["head_detail", "layernorm", "mlp"]
    wait_responsive(page, "document.getElementById('attention-plot').layout.title.text === 'Layer 11, head 11'")
    assert grid.get_attribute("data-selected") == "11.11"
    assert page.evaluate(
        "[...document.querySelectorAll('#model-view-plot canvas.sel')].map(c => c.dataset.row + '.' + c.dataset.col)"
    ) == ["11.11"]
    # the download bar: the whole grid as one PNG (no SVG for canvases), the API's data as JSON
    bar = ".dl-bar[data-for='model-view-plot']"
    assert page.eval_on_selector_all(f"{bar} button", "bs => bs.map(b => b.dataset.format)") == ["png", "json", "html"]
    with page.expect_download() as dl:
        page.click(f"{bar} button[data-format='png']")
    assert dl.value.suggested_filename == "attention-all-heads.png"
    png = Path(dl.value.path()).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # the keyboard reaches every map: Enter on a focused one opens it
    page.focus("#model-view-plot canvas[data-row='3'][data-col='7']")
    page.keyboard.press("Enter")
    wait_responsive(page, "document.getElementById('model-view-plot').dataset.selected === '3.7'")
    assert page.input_value("#layer") == "3" and page.input_value("#head") == "7"
    assert errors_of(page) == []


def test_the_head_view_and_the_big_map_of_layer_11_head_11(bpage, big, screenshot):
    page, url = bpage, big["url"]
    open_forward(page, url, layer=11, head=11, position=100)
    go_stage(page, 4)
    full = api(page, url, "/forward", {"text": PROMPT, "include": ["attention"], "layer": 11, "head": 11})
    pattern = full["attention"]["pattern"][11][11]
    assert plot_data(page, "attention-plot")[0]["z"] == square(pattern)
    # the big map's axes: thinned labels, each naming its position
    for axis, gap in (("x", SLANTED_GAP_PX), ("y", 14)):  # the keys' labels along the top are slanted
        n = assert_thinned(page, "attention-plot", axis, gap_px=gap)
        TIMINGS[f"attention_plot_{axis}_labels"] = n
    assert tick_labels(page, "attention-plot", "y")[1]["text"].split(" ", 1)[0].isdigit()

    # the head view: every line above the drawing threshold, the selected query's one by one, the rest in a few paths
    page.locator("#head-view").scroll_into_view_if_needed()
    wait_responsive(page, "!!document.querySelector('#head-view svg')")
    page.wait_for_function(
        "document.querySelector('#head-view svg').getAttribute('aria-label') === 'head view of layer 11, head 11'"
    )
    drawn_lines = sum(1 for q in range(T) for k in range(q + 1) if pattern[q][k] >= 0.005)
    assert int(page.get_attribute("#head-view", "data-lines")) == drawn_lines > T
    hv = page.evaluate("""() => { const s = document.querySelector('#head-view svg');
        return { elements: s.getElementsByTagName('*').length, lines: s.querySelectorAll('line').length,
                 segments: [...s.querySelectorAll('path')].reduce((n, p) => n + (p.getAttribute('d').match(/M/g) || []).length, 0),
                 labels: s.querySelectorAll('text.hv-tok').length }; }""")
    assert hv["lines"] == sum(1 for k in range(101) if pattern[100][k] >= 0.005)  # position 100's lines
    assert hv["lines"] + hv["segments"] == drawn_lines
    assert hv["labels"] == T
    assert hv["elements"] < 4 * T + 200, f"the head view has {hv['elements']} elements"
    TIMINGS["head_view_elements"] = hv["elements"]
    # its query bars: position 100's row, labels thinned
    drawn(page, "query-bars-plot")
    page.wait_for_function("document.getElementById('query-bars-plot').layout.title.text.startsWith('query 100 ')")
    assert plot_data(page, "query-bars-plot")[0]["x"] == pattern[100][:101]
    assert_thinned(page, "query-bars-plot", "y", n=101)
    # clicking a token in the head view selects that position
    page.click("#head-view text.hv-tok[data-index='7']")
    page.wait_for_function("document.getElementById('position').value === '7'")
    page.wait_for_function("document.querySelectorAll('#head-view svg line').length === 8")
    screenshot(page, "big-model-attention")
    assert errors_of(page) == []


def test_logit_lens_residual_and_loss_axes_are_thinned(bpage, big):
    page, url = bpage, big["url"]
    open_forward(page, url, position=50)
    full = api(
        page, url, "/forward", {"text": PROMPT, "include": ["residual", "logit_lens", "prompt_loss"], "position": 50}
    )
    go_stage(page, 6)
    lens = plot_data(page, "lens-plot")[0]
    assert lens["z"] == full["logit_lens"]["actual_next_prob"]
    assert len(lens["z"]) == N_LAYER + 1 and len(lens["z"][0]) == T
    assert plot_data(page, "resid-norm-plot")[0]["z"] == full["residual"]["norms"]
    table = page.inner_text("#lens-table")
    assert "position 50" in table and table.count("after block") == N_LAYER
    top = full["logit_lens"]["top"][N_LAYER][50][0]
    assert f"“{top['text'].replace(' ', '·')}”" in table
    for plot in ("lens-plot", "resid-norm-plot"):
        assert_thinned(page, plot, "x", gap_px=SLANTED_GAP_PX)
    go_stage(page, 7)
    assert plot_data(page, "loss-plot")[0]["y"] == [p["prob"] for p in full["prompt_loss"]["positions"]]
    assert_thinned(page, "loss-plot", "x", n=T - 1, gap_px=SLANTED_GAP_PX)
    go_stage(page, 1)
    assert_thinned(page, "emb-sum-plot", "y")
    go_stage(page, 3)
    for plot in ("qkv-plot", "z-plot", "result-plot"):
        assert_thinned(page, plot, "y")
    for plot in ("scores-plot", "masked-plot", "pattern-plot"):
        assert_thinned(page, plot, "y")
    assert errors_of(page) == []


def test_the_self_check_adds_up_over_170_parts(bpage, big, screenshot):
    page, url = bpage, big["url"]
    open_forward(page, url)
    full = api(page, url, "/forward", {"text": PROMPT, "include": ["decomposition", "next_token"], "top_k": 10})
    d = full["decomposition"]
    assert d["exact"]
    go_stage(page, 10)
    assert float(page.get_attribute("#dc-total", "data-value")) == d["total"]
    assert float(page.get_attribute("#dc-logit", "data-value")) == d["logit"]
    assert math.isclose(d["total"], d["logit"], abs_tol=1e-3)
    bars = plot_data(page, "dc-plot")
    parts = d["contributions"]
    assert (
        len(parts) == 1 + N_LAYER * (N_HEAD + 2) + 1
    )  # embeddings, per layer heads + attention bias + MLP, final bias
    assert bars[0]["y"] == [c["value"] for c in parts]
    assert bars[1]["y"] == [d["total"]] and bars[2]["y"] == [d["logit"]]
    # one label per layer (and the two totals), not 170 names
    ticks = [t["text"] for t in tick_labels(page, "dc-plot", "x")]
    assert ticks == [f"L{layer}" for layer in range(N_LAYER)] + ["sum", "logit"]
    # another target from the select: the self-check follows
    second = full["next_token"][1]
    with page.expect_response(lambda r: r.url.endswith("/api/v1/forward") and r.request.method == "POST") as resp:
        page.select_option("#dc-target", str(second["id"]))
    assert resp.value.ok
    page.wait_for_function(
        "(id) => document.getElementById('decomposition-panel').dataset.target === String(id)", arg=second["id"]
    )
    screenshot(page, "big-model-self-check")
    assert errors_of(page) == []


def test_zeroing_layer_11_head_11_and_an_mlp(bpage, big):
    page, url = bpage, big["url"]
    open_forward(page, url)
    go_stage(page, 9)
    assert page.locator("#iv-heads input[type=checkbox]").count() == N_LAYER * N_HEAD
    assert page.locator("#iv-mlps input[type=checkbox]").count() == N_LAYER
    wait_responsive(page, "document.getElementById('intervene-panel').dataset.state === 'ready'")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/intervene")) as resp:
        page.check('#iv-heads input[data-layer="11"][data-head="11"]')
    assert resp.value.ok, resp.value.text()
    assert resp.value.request.post_data_json["ablate_heads"] == [{"layer": 11, "head": 11}]
    wait_responsive(
        page,
        "() => { const r = document.getElementById('intervene-panel').dataset.request;"
        " return r && JSON.parse(r).ablate_heads.length === 1 && document.getElementById('intervene-panel').dataset.state === 'ready'; }",
    )
    expected = api(page, url, "/intervene", {"text": PROMPT, "ablate_heads": [{"layer": 11, "head": 11}], "top_k": 10})
    bars = {t["name"]: t for t in plot_data(page, "iv-plot")}
    assert bars["with the interventions"]["x"] == [c["altered"] for c in reversed(expected["compared"])]
    assert float(page.get_attribute("#iv-stats", "data-kl")) == expected["kl_divergence"]
    with page.expect_response(lambda r: r.url.endswith("/api/v1/intervene")) as resp:
        page.check('#iv-mlps input[data-mlp="11"]')
    assert resp.value.ok, resp.value.text()
    page.wait_for_function("new URLSearchParams(location.search).get('ablate') === 'L11H11,MLP11'")
    assert errors_of(page) == []


def test_generation_stepper_with_144_heads(bpage, big):
    page, url = bpage, big["url"]
    open_forward(page, url, seed=3)
    go_stage(page, 8)
    prompt_ids = json.loads(page.get_attribute("#generate-panel", "data-ids"))
    assert len(prompt_ids) == T
    for i in (1, 2):
        page.click("#gen-next")
        wait_responsive(page, "(n) => document.getElementById('generate-panel').dataset.steps === String(n)", i)
        page.wait_for_function("!document.getElementById('gen-next').disabled")
    replay, cur = [], prompt_ids
    for step in range(2):
        r = api(
            page,
            url,
            "/generate/step",
            {"ids": cur, "step": step, "seed": 3, "temperature": 1.0, "top_k": None, "top_p": None, "top": 10},
        )
        replay.append(r)
        cur = r["ids"]
    assert json.loads(page.get_attribute("#generate-panel", "data-ids")) == cur
    drawn(page, "gen-attn-plot")
    attn = plot_data(page, "gen-attn-plot")[0]["z"]
    assert attn == [w for layer in replay[-1]["attention"] for w in layer]
    assert len(attn) == N_LAYER * N_HEAD and len(attn[0]) == T + 1
    # 144 rows: one label per layer, not per head; the key axis thinned
    ys = [t["text"] for t in tick_labels(page, "gen-attn-plot", "y")]
    assert ys == [f"L{layer}" for layer in range(N_LAYER)]
    assert_thinned(page, "gen-attn-plot", "x", n=T + 1, gap_px=SLANTED_GAP_PX)
    assert page.evaluate("document.getElementById('gen-attn-plot').layout.height") < 1400
    assert errors_of(page) == []


def test_24_blocks_of_16_heads_fit_the_overviews_first_screen(page, deep):
    """A tiny GPT-2 import of 24 x 16: every block drawn (the selected one whole, 23 compact), no label on
    another, the probabilities still on the first screen; a click on a compact block's attention makes
    it the whole one; the walk goes through every step (a part a compact block does not draw lights
    up its block)."""
    page.set_viewport_size({"width": 1440, "height": 900})
    text = "To be, or not to be, that is the question."
    page.goto(f"{deep}/?{urlencode({'text': text})}")
    page.wait_for_selector('body[data-overview="1"]', state="attached")
    page.wait_for_selector('#overview-probs[data-state="ready"]', state="attached")
    blocks = "#overview-svg g.ov-block"
    assert page.locator(blocks).count() == DEEP[0]
    assert page.locator(f"{blocks}.compact").count() == DEEP[0] - 1
    assert page.get_attribute(f"{blocks}.full", "data-layer") == "0"
    assert page.locator("#overview-svg .ov-head-cell").count() == DEEP[0] * DEEP[1]
    assert layout_faults(page) == []
    on_screen = """(sel) => [...document.querySelectorAll(sel)].every((e) => { const r = e.getBoundingClientRect();
        return r.width > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth; })"""
    for sel in (blocks, "#overview-probs", '#overview-svg [data-node="probs"]'):
        assert page.evaluate(on_screen, sel), sel
    # a compact block's attention: the first click selects that layer and draws its block whole
    page.locator(f'{blocks}.compact [data-node="block.17.attn"]').click(position={"x": 2, "y": 2})
    page.wait_for_selector(f'{blocks}.full[data-layer="17"]', state="attached")
    assert page.locator(f"{blocks}.compact").count() == DEEP[0] - 1
    assert page.input_value("#layer") == "17" and page.evaluate("document.body.dataset.openStage") == ""
    assert layout_faults(page) == []
    assert page.evaluate(on_screen, "#overview-probs")
    assert errors_of(page) == []
    steps = walk_through(page, deep, {"text": text})
    assert any(s["lit"][0].startswith("block.") and s["lit"][0].count(".") == 1 for s in steps), steps


# --- the other pages ------------------------------------------------------------------------------


def test_learn_shows_the_loaded_models_parameter_count(bpage, big):
    from gptscope.model.gpt import count_params

    page, url = bpage, big["url"]
    total = count_params(big["cfg"])["total"]
    page.goto(f"{url}/learn")
    page.wait_for_selector('#sizes-panel[data-ready="1"]', state="attached")
    assert api(page, url, "/health")["info"]["params"] == total
    # the table of known models has the loaded one
    page.wait_for_function("document.querySelectorAll('#presets-table tbody tr').length > 0")
    rows = page.eval_on_selector_all(
        "#presets-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent.trim()))"
    )
    loaded = [r for r in rows if r[0].startswith("the loaded model")]
    assert len(loaded) == 1 and "gpt2-shaped" in loaded[0][0]
    assert loaded[0][1] == str(N_LAYER) and loaded[0][3] == "50,257" and loaded[0][5] == f"{total:,}"
    # the parameter form on the loaded model
    page.evaluate("delete document.getElementById('sizes-panel').dataset.ready")
    page.select_option("#params-preset", "model")
    page.wait_for_selector('#sizes-panel[data-ready="1"]', state="attached")
    table = page.inner_text("#params-table")
    assert f"Every parameter\t{total:,}" in table
    assert f"{total:,} counting everything" in page.inner_text("#params-summary")
    # every panel draws; the loaded model's schedule box says there is none instead of an error
    for panel in [
        "schedule-panel",
        "gelu-panel",
        "loss-panel",
        "smoothing-panel",
        "softmax-panel",
        "kv-panel",
        "scaling-panel",
        "optimizers-panel",
    ]:
        page.wait_for_selector(f'#{panel}[data-ready="1"]', state="attached")
    page.wait_for_selector('#model-schedule-box[data-ready="1"]', state="attached")
    schedule = page.get_attribute("#model-schedule-box", "data-schedule")
    if schedule == "none":
        assert "Nothing to draw for this model" in page.inner_text("#model-schedule-summary")
    assert page.is_hidden("#error")
    # The server answers GET /schedules/lr?kind=model with 422 for a checkpoint that records no
    # schedule; the page says so calmly, but Chromium still logs the refused request.
    errors = [e for e in errors_of(page) if not ("status of 422" in e and "/schedules/lr?kind=model" in e)]
    assert errors == []


def test_tokenizer_and_train_pages_load_with_this_model(bpage, big):
    page, url = bpage, big["url"]
    page.goto(f"{url}/tokenizer?{urlencode({'text': PROMPT, 'encoding': 'model'})}")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    page.wait_for_selector('body[data-merges-ready="1"]', state="attached")
    page.wait_for_load_state("networkidle")
    assert f"{T} tokens ·" in page.inner_text("#token-counts")
    # a public encoding has no training record here: the section says so and asks the API nothing
    assert "public gpt2 encoding" in " ".join(page.inner_text("#training-panel").split())
    assert not [u for u in page.requests if "/tokenizer/model/merges" in u]
    assert page.is_hidden("#error")
    assert errors_of(page) == []

    page.goto(f"{url}/train")
    page.wait_for_load_state("networkidle")
    assert page.is_hidden("#error")
    assert "gpt2-shaped" in page.inner_text("header")
    assert errors_of(page) == []
