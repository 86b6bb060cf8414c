"""Every page with an imported Llama-family model, in a real headless Chromium.

The model is built by `transformers` with random weights in SmolLM2-135M's grid and vocabulary (30
layers x 9 query heads sharing 3 key/value heads, 49,152 token ids, tied embeddings; only the width is
small, 72, so it builds in seconds), imported with `gptscope import` together with a byte-level BPE
tokenizer.json trained here by `tokenizers` (a few hundred tokens: the model's other ids name no
token, as Qwen's padded rows do). Each page loads, draws what it draws for any model, and logs no
console error; the forward page shows the RoPE, RMSNorm, SwiGLU and grouped-query panels with the
model's own numbers and all 270 heads in its grid."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from apihelp import api_json
from exporting import layout_faults

pytestmark = [pytest.mark.browser, pytest.mark.slow]

N_LAYER, N_HEAD, N_KV, VOCAB = 30, 9, 3, 49152
N_PARAMS: list[int] = []  # filled by the fixture
PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"
CORPUS = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and "
    "arrows of outrageous fortune, or to take arms against a sea of troubles, and by opposing end them. "
) * 10


@pytest.fixture(scope="module")
def llama(tmp_path_factory, serve_app):
    transformers = pytest.importorskip("transformers")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from gptscope.model import importers

    folder = tmp_path_factory.mktemp("smollm-shaped") / "smollm2-grid"
    cfg = transformers.LlamaConfig(
        hidden_size=72,
        intermediate_size=192,
        num_hidden_layers=N_LAYER,
        num_attention_heads=N_HEAD,
        num_key_value_heads=N_KV,
        vocab_size=VOCAB,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    )
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg)
    m.save_pretrained(folder)
    N_PARAMS.append(sum(p.numel() for p in m.parameters()))  # transformers' own count (tied once)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    tok.save(str(folder / "tokenizer.json"))
    data = tmp_path_factory.mktemp("llama-data")
    dest, _summary = importers.import_model(folder, "smollm2-grid", data)
    with serve_app(dest, data) as url:
        yield url


def ready(page, url: str, path: str) -> None:
    page.goto(f"{url}{path}")
    # /learn's panels each say when they are drawn; the other pages say it once, on the body
    sel = '#sizes-panel[data-ready="1"]' if path.startswith("/learn") else 'body[data-ready="1"]'
    page.wait_for_selector(sel, state="attached", timeout=120_000)
    page.wait_for_load_state("networkidle", timeout=120_000)
    assert page.is_hidden("#error"), page.inner_text("#error")


def api(page, url: str, path: str, body: dict | None = None) -> dict:
    return api_json(page, url, "GET" if body is None else "POST", path, data=body, timeout=120_000)


def drawn(page, plot_id: str) -> None:
    page.locator(f"#{plot_id}").scroll_into_view_if_needed()
    page.wait_for_function(
        "(id) => +(document.getElementById(id).dataset.drawn || 0) >= 1", arg=plot_id, timeout=60_000
    )


def test_forward_page_draws_the_modern_block_and_all_270_heads(page, llama, screenshot):
    info = api(page, llama, "/health")["info"]
    assert (info["n_layer"], info["n_head"], info["n_kv_head"], info["vocab_size"]) == (N_LAYER, N_HEAD, N_KV, VOCAB)
    assert (info["pos"], info["norm_type"], info["mlp"], info["tokenizer"]) == (
        "rope",
        "rmsnorm",
        "swiglu",
        "tokenizer.json",
    )
    layer, head = 29, 8
    ready(page, llama, f"/?{urlencode({'text': PROMPT, 'layer': layer, 'head': head, 'stage': 'all'})}")
    full = api(
        page, llama, "/forward", {"text": PROMPT, "include": ["rope", "head_detail"], "layer": layer, "head": head}
    )
    n_tokens = len(full["tokens"])
    assert page.evaluate("document.querySelectorAll('#tokens .tok').length") == n_tokens
    # RoPE with the model's own q and k; grouped-query attention: head 8 reads key/value head 2
    drawn(page, "rope-q-plot")
    q = page.evaluate("document.getElementById('rope-q-plot').data.map(t => t.z)")
    assert q == [full["rope"]["q"], full["rope"]["q_rotated"]]
    assert full["head_detail"]["kv_head"] == 2
    page.wait_for_function("document.getElementById('block-panel').dataset.kvHead === '2'")
    drawn(page, "ln-plot")
    assert page.text_content("#ln-title") == "a · RMSNorm"
    # the layer x head grid: every head is a canvas, painted as it scrolls into view
    grid = page.locator("#model-view-plot")
    grid.scroll_into_view_if_needed()
    page.wait_for_function("() => document.getElementById('model-view-plot').dataset.grid", timeout=60_000)
    assert page.locator("#model-view-plot canvas.hg-map").count() == N_LAYER * N_HEAD
    screenshot(page, "llama-import-forward")
    assert layout_faults(page) == []
    assert page.console_errors == []


@pytest.mark.parametrize(
    "path",
    [
        "/tokenizer?" + urlencode({"text": PROMPT, "encoding": "model"}),
        "/learn",
        "/compare?" + urlencode({"a": "builtin", "b": "models/smollm2-grid", "text": PROMPT}),
        "/train",
        "/genealogy",
    ],
)
def test_every_other_page_loads_with_no_console_error(page, llama, path):
    ready(page, llama, path)
    if path.startswith("/tokenizer"):
        page.wait_for_selector('body[data-merges-ready="1"]', state="attached", timeout=60_000)
        assert "tokenizer.json" in page.inner_text("#training-panel")
        assert not [u for u in page.requests if "/tokenizer/model/merges" in u]
    if path == "/learn":  # the loaded model's parameter count is the file's own
        page.wait_for_function("document.querySelectorAll('#presets-table tbody tr').length > 0")
        rows = page.eval_on_selector_all(
            "#presets-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent.trim()))"
        )
        loaded = [r for r in rows if r[0].startswith("the loaded model")]
        assert len(loaded) == 1 and loaded[0][5] == f"{N_PARAMS[0]:,}", loaded
        # an imported model records no schedule: the page says so without asking the API for one
        assert "Nothing to draw for this model" in page.inner_text("#model-schedule-summary")
        assert not [u for u in page.requests if "kind=model" in u]
    assert page.console_errors == []


def test_generation_stepper_heads_and_interventions_answer(page, llama):
    ids = [t["id"] for t in api(page, llama, "/tokenize", {"text": PROMPT, "encoding": "model"})["tokens"]]
    step = api(page, llama, "/generate/step", {"ids": ids, "seed": 1})
    assert 0 <= step["token"]["id"] < VOCAB
    again = api(page, llama, "/generate/step", {"ids": [*ids, step["token"]["id"]], "seed": 1, "step": 1})
    assert again["token"]["id"] < VOCAB
    heads = api(page, llama, "/heads?" + urlencode({"text": PROMPT}))
    assert len(heads["heads"]) == N_LAYER * N_HEAD
    out = api(page, llama, "/intervene", {"text": PROMPT, "ablate_heads": [{"layer": 3, "head": 4}]})
    assert out["kl_divergence"] >= 0 and out["compared"]
