"""A post-norm model (GPT-1's block: the norm after each sublayer's residual add), served by a second
live server: every page loads with no layout fault and no console error, /patch sweeps a pair, and
/circuits says why it cannot split this block into edges (its only console message is that 422)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from exporting import layout_faults

from gptscope.model.train import TrainConfig, train

pytestmark = pytest.mark.browser

LINES = [
    "ROMEO: But soft, what light through yonder window breaks?",
    "JULIET: O Romeo, Romeo, wherefore art thou Romeo?",
]
# as many tokens each in the tiny model's BPE (trained on LINES), the last word changed
PAIR = urlencode(
    {
        "clean": "JULIET: O Romeo, Romeo, wherefore art thou Romeo?",
        "corrupted": "JULIET: O Romeo, Romeo, wherefore art thou But?",
    }
)


@pytest.fixture(scope="module")
def post_norm_url(tmp_path_factory, serve_app):
    """A tiny model trained for a few steps with overrides={"norm": "post"}, served on its own port."""
    root = tmp_path_factory.mktemp("post-norm")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(LINES * 120), encoding="utf-8")
    tc = TrainConfig(
        corpus=str(corpus), preset="tiny", vocab_size=300, max_steps=20, batch_size=4, overrides={"norm": "post"},
        device="cpu",
    )  # fmt: skip
    train(tc, out=root / "checkpoint", progress=False)
    with serve_app(root / "checkpoint", tmp_path_factory.mktemp("post-norm-data")) as url:
        yield url


def loaded(page, url: str, path: str) -> None:
    page.goto(f"{url}{path}")
    sel = "#sizes-panel[data-ready='1']" if path.startswith("/learn") else "body[data-ready='1']"
    page.wait_for_selector(sel, state="attached")
    page.wait_for_load_state("networkidle")
    assert page.is_hidden("#error"), (path, page.inner_text("#error"))
    assert layout_faults(page) == [], path


def test_every_page_of_a_post_norm_model_loads_without_a_fault(page, post_norm_url):
    url = post_norm_url
    health = page.request.get(f"{url}/api/v1/health").json()
    assert health["info"]["norm"] == "post"
    for path in (
        "/?" + urlencode({"text": LINES[0][:24], "stage": "all"}),  # the overview and every stage
        "/tokenizer",
        "/learn",
        "/train",
        "/compare",
        f"/patch?{PAIR}",
        "/attribution",
        "/genealogy",
        "/features",
    ):
        loaded(page, url, path)
    assert page.console_errors == []
    page.goto(f"{url}/circuits?{PAIR}")
    page.wait_for_selector("#error:not([hidden])")
    assert "post-norm" in page.inner_text("#error") and page.evaluate("document.body.dataset.ready") is None
    assert len(page.console_errors) == 1 and "422" in page.console_errors[0]
