"""/attribution's "Compare with another set" (issue #64) in a real headless Chromium on the built-in model: a
small random cross-layer transcoder is saved where the live server's new sets of the built-in model go (as
tests/test_clt.py does), the page's compare select offers it beside the shipped per-layer set, and the table,
the overlap and each graph's cells the other lacks are POST /api/v1/attribution/compare-sets's own answer for
the graph's request with `other`."""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest
import torch
from apihelp import api_json, decimal, pct
from exporting import layout_faults

from gptscope.model import clt as cm
from gptscope.model import transcoders as tcm
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.service import ModelService

pytestmark = pytest.mark.browser

TEXT = "To be, or not to be, that is"
CELLS = """(sel) => [...document.querySelectorAll(sel)].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent))"""


def said(t: str) -> str:
    """compare.js's said: format.js's visible (a space as ·, a newline as ↵, a tab as →) in curly quotes."""
    return f"“{t.replace(' ', '·').replace(chr(10), '↵').replace(chr(9), '→').replace(chr(13), '␍')}”"


@contextmanager
def clt_set(page, live_url):
    """A random CLT (64 features per block, TopK 4), quickly measured, saved in the live server's folder for
    the built-in model's new sets; removed at the end."""
    folder = Path(api_json(page, live_url, "GET", "/transcoders")["write_folder"]) / "zz-clt-browser"
    service = ModelService(BUILTIN_CHECKPOINT)
    model = service.model
    torch.manual_seed(0)
    clt = cm.CLT(cm.CLTConfig(model.cfg.n_layer, model.cfg.d_model, 64, "topk", 4)).requires_grad_(False)
    tc = tcm.TranscoderTrainConfig(kind="clt", expansion=2, k=4, eval_sequences=2, ce_sequences=1)
    val = torch.randint(0, model.cfg.vocab_size, (2 * model.cfg.n_ctx,))
    figures, stats = cm.quality(model, clt, clt, val, tc)
    meta = {"name": folder.name, "checkpoint": {"weights_sha256": service.meta.weights_sha256}, "quality": figures}
    cm.save_clt(folder, clt, stats, meta, "builtin")
    try:
        yield folder.name
    finally:
        shutil.rmtree(folder)


def test_two_sets_compared_on_the_prompt_are_the_apis_answer(page, live_url):
    url = f"{live_url}/attribution?{urlencode({'text': TEXT})}"
    if len(api_json(page, live_url, "GET", "/transcoders")["sets"]) == 1:
        # the shipped set alone: no control, a note that says how to train a cross-layer set
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=90_000)
        assert not page.locator("#compare-controls").is_visible()
        assert "gptscope transcoders --kind clt" in page.inner_text("#compare-help")
    with clt_set(page, live_url) as name:
        compared(page, live_url, url, name)


def compared(page, live_url, url, clt_set):
    sets = {s["name"]: s for s in api_json(page, live_url, "GET", "/transcoders")["sets"]}
    assert sets[clt_set]["kind"] == "clt" and len(sets) >= 2
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=90_000)
    first = page.input_value("#transcoders")
    assert first != clt_set and sets[first]["kind"] == "per_layer"

    # the select offers the other sets, the graph's own not among them
    assert page.locator("#compare-controls").is_visible() and not page.locator("#compare-help").is_visible()
    offered = page.eval_on_selector_all("#compare-other option", "(os) => os.map((o) => o.value)")
    assert sorted(offered) == sorted(n for n in sets if n != first)
    page.select_option("#compare-other", clt_set)
    with page.expect_request(re.compile(r"/api/v1/attribution/compare-sets$")) as sent:
        page.click("#compare-run")
    body = sent.value.post_data_json
    assert body["text"] == TEXT and body["transcoders"] == first and body["other"] == clt_set
    page.wait_for_selector(f"#compare-result[data-loaded='{clt_set}']", timeout=60_000)
    c = api_json(page, live_url, "POST", "/attribution/compare-sets", data=body)

    # one column per set, a row per figure: the answer's numbers
    heads = page.eval_on_selector_all("#compare-table thead th", "(ts) => ts.map((t) => t.textContent)")
    assert heads[1:-1] == [s["name"] for s in c["sets"]] == [first, clt_set]
    rows = {r[0]: r[1:-1] for r in page.evaluate(CELLS, "#compare-table tbody tr")}
    kinds = {"per_layer": "per-layer", "clt": "cross-layer (CLT)"}
    expected = {
        "kind": [kinds[s["kind"]] for s in c["sets"]],
        "features per block": [f"{s['features_per_block']:,}" for s in c["sets"]],
        "loss recovered": ["—" if s["loss_recovered"] is None else pct(s["loss_recovered"]) for s in c["sets"]],
        "kept features": [f"{s['kept_features']:,} of {s['active_features']:,}" for s in c["sets"]],
        "error nodes' share of the influence": [pct(s["error_share"]) for s in c["sets"]],
        "KL(real ‖ replacement) of the next token": [f"{decimal(s['kl'], 4)} nats" for s in c["sets"]],
        f"top next token (real: {said(c['top1_real'])})": [said(s["top1_replaced"]) for s in c["sets"]],
        f"target (real: {decimal(c['target_real'])})": [decimal(s["target_replaced"]) for s in c["sets"]],
    }
    assert rows == expected
    assert page.inner_text("#compare-jaccard") == pct(c["jaccard"])
    assert page.inner_text("#compare-stats").startswith(c["target"])

    # per set, the cells only its graph keeps: the share and the top cells
    for o in c["only"]:
        box = page.locator(f'#compare-only .compare-only[data-name="{o["name"]}"]')
        assert box.locator(".only-share").inner_text() == pct(o["share"])
        cells = page.evaluate(CELLS, f'#compare-only .compare-only[data-name="{o["name"]}"] tbody tr')
        assert cells == [
            [str(x["layer"]), str(x["position"]), said(x["token"]), pct(x["influence"], 2)] for x in o["cells"]
        ]

    assert page.console_errors == []
    assert layout_faults(page) == []
