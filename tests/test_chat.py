"""Beginning-of-text tokens and chat templates (issue #45): a prompt starts with the BOS token its
model's tokenizer config says (add_bos_token, or the tokenizer.json post-processor, as Llama 3's),
switchable per request; a list of messages is rendered by the model's chat template in Jinja2's
immutable sandbox and read with its special tokens as tokens; a template the sandbox refuses is a 422
naming the template. A tiny Llama-shaped model with a Llama-3-shaped tokenizer.json, built here by
`tokenizers` (no transformers, nothing downloaded)."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient
from hf_families import BOS, LLAMA3_TEMPLATE, byte_level_tokenizer

from gptscope.model import checkpoint as ckpt
from gptscope.model.chat import ChatTemplateError, render
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.app import create_app
from gptscope.server.config import Settings

CHAT = [{"role": "system", "content": "Answer in verse."}, {"role": "user", "content": "To be, or not to be?"}]
TEXT = "To be, or not to be, that is the question"
CFG = dict(
    vocab_size=300, n_ctx=64, n_layer=2, n_head=4, d_model=32, pos="rope", norm_type="rmsnorm", mlp="swiglu", bias=False
)


def checkpoint(folder, tok, config: dict | None = None):
    torch.manual_seed(0)
    spec = {"kind": "huggingface", "name": "tiny", "json": tok.to_str(), **({"config": config} if config else {})}
    ckpt.save(folder, GPT(GPTConfig(**CFG)), {"name": folder.name, "tokenizer": spec, "step": 0, "final": True})
    return folder


@pytest.fixture(scope="module")
def tokenizers_(tmp_path_factory):
    """(Llama 3's kind: a post-processor that adds the BOS, Llama 2's kind: none, add_bos_token says)"""
    return byte_level_tokenizer(bos=BOS), byte_level_tokenizer()


@pytest.fixture(scope="module")
def llama3(tmp_path_factory, tokenizers_):
    with_post, _ = tokenizers_
    folder = checkpoint(
        tmp_path_factory.mktemp("chat") / "llama3",
        with_post,
        {"bos_token": BOS, "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE},
    )
    app = create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=folder.parent / "data"))
    with TestClient(app) as client:
        yield client, with_post


def forward(client, **body):
    r = client.post("/api/v1/forward", json={"include": ["next_token"], **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_llama3_shaped_prompt_starts_with_its_bos_by_default(llama3):
    client, tok = llama3
    bos = tok.token_to_id(BOS)
    assert client.get("/api/v1/health").json()["info"]["bos"] == [bos]
    body = forward(client, text=TEXT)
    plain = tok.encode(TEXT, add_special_tokens=False).ids
    assert [t["id"] for t in body["tokens"]] == [bos, *plain] == tok.encode(TEXT).ids  # as tokenizers adds it
    first = body["tokens"][0]
    assert (first["text"], first["special"]) == (BOS, True)
    without = forward(client, text=TEXT, bos=False)
    assert [t["id"] for t in without["tokens"]] == plain
    assert without["next_token"] != body["next_token"]  # the model reads a different sequence


def test_every_prompt_endpoint_takes_the_switch(llama3):
    client, tok = llama3
    bos = tok.token_to_id(BOS)
    for path, extra in (("/api/v1/next-token", {}), ("/api/v1/intervene", {"ablate_mlps": [0]})):
        on = client.post(path, json={"text": TEXT, **extra}).json()
        off = client.post(path, json={"text": TEXT, "bos": False, **extra}).json()
        tokens = on["tokens"] if "tokens" in on else on["clean"]["tokens"]
        tokens_off = off["tokens"] if "tokens" in off else off["clean"]["tokens"]
        assert tokens[0]["id"] == bos and tokens_off[0]["id"] != bos, path


def test_truncation_keeps_the_bos_first(llama3):
    client, tok = llama3
    long = " ".join([TEXT] * 12)
    body = client.post("/api/v1/forward", json={"text": long, "truncate": True, "include": []}).json()
    ids = [t["id"] for t in body["tokens"]]
    assert len(ids) == 64 and ids[0] == tok.token_to_id(BOS)
    assert ids[1:] == tok.encode(long, add_special_tokens=False).ids[-63:]
    assert body["truncated"] == len(tok.encode(long, add_special_tokens=False).ids) - 63


def test_the_post_processor_decides_the_bos_as_in_transformers_5(tmp_path, tokenizers_):
    """transformers 5 takes the beginning-of-text token from tokenizer.json's post-processor alone; its
    Llama and Gemma classes in transformers 4 read add_bos_token instead. The app follows 5 and says
    where 4 differed (the tokenizer page's runs_as)."""
    with_post, without = tokenizers_
    for tok, config, expect, t4 in (
        (without, {"add_bos_token": True, "bos_token": BOS}, False, "(true) and added " + BOS),
        (with_post, {"add_bos_token": False, "bos_token": BOS}, True, "(false) and added none"),  # Phi-3's files
        (without, {"bos_token": BOS}, False, None),  # a BOS named but not added (Pythia's <|endoftext|>)
    ):
        folder = checkpoint(tmp_path / f"m{len(list(tmp_path.iterdir()))}", tok, config)
        app = create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
        with TestClient(app) as client:
            ids = [t["id"] for t in forward(client, text=TEXT)["tokens"]]
            assert (ids[0] == tok.token_to_id(BOS)) == expect, config
            forced = [t["id"] for t in forward(client, text=TEXT, bos=True)["tokens"]]
            assert forced[0] == tok.token_to_id(BOS) and forced.count(tok.token_to_id(BOS)) == 1
            info = next(e for e in client.get("/api/v1/encodings").json()["encodings"] if e["name"] == "model")
            assert (t4 in info["runs_as"]) if t4 else ("transformers 4" not in info["runs_as"]), info["runs_as"]


def test_a_model_without_a_bos_refuses_one_by_name(client):
    """The built-in model's tokenizer has none: asking for one is a 422 naming bos; by default none is added."""
    r = client.post("/api/v1/forward", json={"text": TEXT, "bos": True, "include": []})
    assert r.status_code == 422 and "bos" in r.text and "no beginning-of-text token" in r.text
    assert client.get("/api/v1/health").json()["info"]["bos"] == []


def test_a_two_message_chat_renders_through_the_template_with_its_special_tokens(llama3):
    client, tok = llama3
    body = forward(client, messages=CHAT)
    want = render(LLAMA3_TEMPLATE, CHAT, True, bos_token=BOS, eos_token="<|eot_id|>")
    assert body["chat_text"] == want and want.startswith(
        BOS + "<|start_header_id|>system<|end_header_id|>\n\nAnswer in verse."
    )
    ids = [t["id"] for t in body["tokens"]]
    assert ids == tok.encode(want, add_special_tokens=False).ids  # the special tokens read as tokens, one BOS
    specials = [t["text"] for t in body["tokens"] if t["special"]]
    assert specials == [
        BOS,
        *["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] * 2,
        "<|start_header_id|>",
        "<|end_header_id|>",
    ]
    assert ids.count(tok.token_to_id(BOS)) == 1
    # the same chat on the other prompt endpoints, and without the generation prompt
    nt = client.post("/api/v1/next-token", json={"messages": CHAT}).json()
    assert [t["id"] for t in nt["tokens"]] == ids
    short = forward(client, messages=CHAT, add_generation_prompt=False)
    assert short["chat_text"] == render(LLAMA3_TEMPLATE, CHAT, False, bos_token=BOS)
    assert len(short["tokens"]) < len(ids)


REFUSED = [
    (
        "{{ messages.append({'role': 'x'}) }}",
        "sandbox refuses",
    ),  # the immutable sandbox: no list method that changes it
    ("{{ ''.__class__.__mro__ }}", "sandbox refuses"),  # no attribute starting with _
    ("{{ raise_exception('System role not supported') }}", "refuses these messages: System role not supported"),
    ("{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}", "cannot be rendered"),
    # bounded as it renders (issue #59: these answered 500, or took gigabytes before the cap was checked)
    ("{% for i in range(10**9) %}x{% endfor %}", "asks for too much: Range too big"),
    ("{{ 'a' * 10**12 }}", "makes a str of 1,000,000,000,000 items with *"),
    ("{{ 2 ** 100000 }}", "a number of more than 4,096 bits"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "wrote more than 200,000 characters"),
]


@pytest.mark.parametrize(
    "template,words", REFUSED, ids=["append", "dunder", "raise", "filter", "range", "times", "power", "output"]
)
def test_a_template_the_sandbox_refuses_is_a_422_naming_the_template(tmp_path, tokenizers_, template, words):
    folder = checkpoint(tmp_path / "bad", tokenizers_[0], {"bos_token": BOS, "chat_template": template})
    app = create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        r = client.post("/api/v1/forward", json={"messages": CHAT, "include": []})
        assert r.status_code == 422, r.text
        detail = str(r.json()["detail"])
        assert "messages" in detail and "chat template (tokenizer_config.json field chat_template)" in detail, detail
        assert words in detail, detail
    with pytest.raises(ChatTemplateError):
        render(template, CHAT)


def test_a_template_that_runs_away_without_writing_is_stopped_in_time(monkeypatch):
    """Three nested loops of 100,000 that write nothing kept a thread busy until shutdown: the clock is
    read on every line the template runs, and the thread's own tracing is given back afterwards."""
    import sys
    import time

    from gptscope.model import chat

    monkeypatch.setattr(chat, "MAX_RENDER_S", 0.3)
    nested = "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}{% endfor %}{% endfor %}{% endfor %}"
    before, t0 = sys.gettrace(), time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"ran longer than 0.3 s"):
        render(nested, CHAT)
    assert time.monotonic() - t0 < 1.5
    assert sys.gettrace() is before
    assert render("{% for m in messages %}{{ m.content }}{% endfor %}", CHAT) == "".join(m["content"] for m in CHAT)


def test_a_model_without_a_template_refuses_messages(client):
    r = client.post("/api/v1/forward", json={"messages": CHAT, "include": []})
    assert r.status_code == 422 and "no chat template" in r.text
    r = client.post("/api/v1/forward", json={"include": []})
    assert r.status_code == 422 and "give a prompt" in r.text


def test_the_analyses_take_the_switch_too(llama3):
    """Patching (and edge circuits, which share its pair), token attribution: the BOS first by default,
    none when asked."""
    client, tok = llama3
    bos = tok.token_to_id(BOS)
    pair = {"clean": "that is the question: whether the mind", "corrupted": "that is the question: whether the king"}
    for flag, first in ((None, True), (False, False)):
        extra = {} if flag is None else {"bos": flag}
        r = client.post("/api/v1/patch", json={**pair, **extra, "kinds": ["resid_pre"]})
        assert r.status_code == 200, r.text
        assert (r.json()["clean_tokens"][0]["id"] == bos) == first
        r = client.post("/api/v1/token-attribution", json={"text": TEXT, "steps": 4, **extra})
        assert r.status_code == 200, r.text
        assert (r.json()["tokens"][0]["id"] == bos) == first
