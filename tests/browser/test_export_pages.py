"""Every panel's "HTML" download on /tokenizer, /genealogy, /features, /circuits and /train: each page is
loaded once, every panel with a figure that addDownloads decorated and that the page drew is
exported through its last such figure's HTML button, then each file is opened from disk with every
request refused and must draw each of its figures and answer a hover with the same text (the same
numbers) as the live page did.

/train draws most of its figures only for a run: it is opened on a server of its own (the /train
tests expect an empty data folder) that holds one finished short run with two snapshots and one
small fine-tuning job, so the progress, replay, heads and fine-tuning panels are drawn, and the two
finished runs of the causal-mask experiment (its requests made 20 steps long on that small text): the
page opened with ?exp=causal-mask redraws the experiment from them, and so does its exported file."""

from __future__ import annotations

import json
import time

import pytest
from apihelp import api_json, finished_run
from exporting import check_offline, live_exports

from gptscope.server.config import BUILTIN_CHECKPOINT

pytestmark = pytest.mark.browser

# Each page's decorated figures that its default state draws (the built-in model: its shipped SAE).
PAGES = {
    "/tokenizer": {"tokens", "pretokens", "merge-pieces", "compare-tokens"},
    "/genealogy": {
        "lambada-plot",
        "params-plot",
        "nsp-plot",
        "xent-plot",
        "perceptron-plot",
        "mistakes-plot",
        "mlp-plot",
        "mlp-loss-plot",
        "reach-plot",
        "moe-plot",
    },
    "/features": {"sae-loss-plot", "sae-train-plot", "feat-passages", "feat-hist-plot"},
    "/circuits": {"graph-plot", "curve-plot", "scatter-plot", "edges-table"},  # the shipped pair, every edge exact
}
TRAIN = {
    "loss-plot",
    "lr-plot",
    "grad-plot",
    "replay-attn",
    "replay-next",
    "replay-proj",
    "heads-roles-plot",
    "heads-incontext-plot",
    "ft-curve",
    "exp-causal-mask-loss",
}

TEXT = "The quick brown fox jumps over the lazy dog. All that glitters is not gold. " * 60
RUN = {
    "preset": "tiny",
    "vocab_size": 300,
    "batch_size": 8,
    "corpus": "export-small",
    "max_steps": 20,
    "snapshots": [0, 1],
    "seed": 3,
}
# a small labelled task of its own (a built-in one's test half takes the probe far longer to score)
TASK = "\n".join(
    ["text,label"]
    + [f"a line about the {w} number {i},{'sea' if i % 2 else 'land'}" for i, w in enumerate(["ship", "field"] * 20)]
)
FINETUNE = {"task": "sea-land", "methods": ["probe"], "sizes": [16], "steps": 5}


def short_experiment(ctx, url) -> dict:
    """The API's causal-mask experiment, each variant made 20 steps on the small text (labels and
    overrides as the API has them)."""
    exp = next(e for e in api_json(ctx, url, "GET", "/experiments") if e["name"] == "causal-mask")
    for v in exp["variants"]:
        v["request"].update(corpus=RUN["corpus"], vocab_size=RUN["vocab_size"], batch_size=8, max_steps=20)
    return exp


@pytest.fixture(scope="module")
def trained(browser, serve_app, tmp_path_factory):
    """The URL of a server whose data folder holds a finished short run and a fine-tuning job."""
    with serve_app(BUILTIN_CHECKPOINT, tmp_path_factory.mktemp("gptscope-export-data")) as url:
        ctx = browser.new_context()
        try:
            run = finished_run(ctx, url, RUN["corpus"], TEXT, RUN)
            assert run["snapshots"] == [0, 20]
            api_json(ctx, url, "GET", f"/training/{run['id']}/heads")  # scored once here; the server keeps it
            upload = {
                "file": {"name": "task.csv", "mimeType": "text/csv", "buffer": TASK.encode()},
                "name": FINETUNE["task"],
            }
            api_json(ctx, url, "POST", "/finetune/tasks", multipart=upload)
            job = api_json(ctx, url, "POST", "/finetune", data=FINETUNE)
            deadline = time.monotonic() + 120
            while job["status"] == "running":
                assert time.monotonic() < deadline, job
                time.sleep(0.3)
                job = api_json(ctx, url, "GET", f"/finetune/{job['id']}")
            assert job["status"] == "done", job
            for v in short_experiment(ctx, url)["variants"]:  # trained by the API: the page only redraws them
                wait_done(ctx, url, api_json(ctx, url, "POST", "/training", data=v["request"]))
        finally:
            ctx.close()
        yield url


def wait_done(ctx, url, run: dict) -> None:
    deadline = time.monotonic() + 120
    while run["status"] not in ("done", "failed", "cancelled"):
        assert time.monotonic() < deadline, run["status"]
        time.sleep(0.3)
        run = api_json(ctx, url, "GET", f"/training/{run['id']}")
    assert run["status"] == "done", run


def exported(page, url, path, folder, expected):
    done, skipped = live_exports(page, url, path, folder)
    figures = {e[0] for e in done}
    assert figures == expected, (path, sorted(figures), skipped)
    print(path, "exported", sorted(figures), "not drawn or not shown", skipped)
    return [(path, *e) for e in done]


def test_every_drawn_panel_of_five_pages_exports_to_a_file_that_works_with_no_network(
    browser, live_url, trained, page, tmp_path
):
    exports = []
    for path, expected in PAGES.items():
        exports += exported(page, live_url, path, tmp_path, expected)
    exp = short_experiment(page.context, trained)  # the page lists the short experiment, as the API's
    body = json.dumps([exp])
    page.route("**/api/v1/experiments", lambda r: r.fulfill(status=200, content_type="application/json", body=body))
    exports += exported(page, trained, "/train?exp=causal-mask", tmp_path, TRAIN)
    assert not page.console_errors, page.console_errors

    check_offline(browser, exports)
