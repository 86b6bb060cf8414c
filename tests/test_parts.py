"""The registry of forward parts (server/explain/parts.py) is the one place a part is declared: the
request's enumeration, the answer's fields and GET /api/v1/forward/parts come from it, each part's
declared hooks are enough for its builder, and its declared staleness is the truth."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.app import create_app
from gptscope.server.config import Settings
from gptscope.server.explain import parts as registry
from gptscope.server.schemas.forward import ForwardResponse

SMALL = dict(vocab_size=61, n_ctx=24, n_layer=2, n_head=4, d_model=32)
KINDS = {  # one model of each kind whose parts differ
    "gpt2-like": {},
    "llama-like": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
    "moe": dict(n_expert=4, top_k_experts=2),
}
TEXT = "HELLO: THE NEW BLOCK!"


@pytest.fixture(
    scope="module",
    params=[pytest.param(k, marks=pytest.mark.slow) if k == "moe" else k for k in KINDS],  # llama-like stays fast
)
def kind_client(request, tmp_path_factory):
    torch.manual_seed(0)
    m = GPT(GPTConfig(**{**SMALL, **KINDS[request.param]})).eval()
    folder = tmp_path_factory.mktemp(request.param)
    chars = [chr(32 + i) for i in range(61)]
    ckpt.save(folder, m, {"name": request.param, "tokenizer": {"kind": "chars", "chars": chars}, "step": 0})
    app = create_app(Settings(checkpoint=folder, allow_hosts=["testserver"], data_dir=folder / "data"))
    with TestClient(app) as client:
        yield request.param, client


def test_the_enumeration_and_the_answer_come_from_the_registry(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    include = schema["ForwardRequest"]["properties"]["include"]["items"]
    assert include["enum"] == list(registry.NAMES)
    part_fields = [f for f in ForwardResponse.model_fields if f in registry.BY_NAME]
    assert part_fields == list(registry.NAMES)
    assert set(schema["ForwardResponse"]["properties"]) >= set(registry.NAMES)
    listed = client.get("/api/v1/forward/parts").json()["parts"]
    assert [p["name"] for p in listed] == list(registry.NAMES)
    assert all(set(p["stale_on"]) <= set(registry.SELECTION_FIELDS) for p in listed)


def test_an_unknown_part_is_refused_naming_the_field(client):
    r = client.post("/api/v1/forward", json={"text": "ROMEO:", "include": ["attention", "lens"]})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-2:] == ["include", 1]


def test_parts_say_which_the_loaded_model_has(kind_client):
    name, client = kind_client
    applies = {p["name"]: p["applies"] for p in client.get("/api/v1/forward/parts").json()["parts"]}
    assert applies["rope"] == (name == "llama-like")
    assert applies["moe"] == (name == "moe") and applies["mlp"] == (name != "moe")
    assert applies["classifier"] is False
    body = client.post("/api/v1/forward", json={"text": TEXT, "include": list(registry.NAMES)}).json()
    assert {n for n in registry.NAMES if body[n] is not None} == {n for n, a in applies.items() if a}


def test_each_parts_declared_hooks_are_enough_for_its_builder(kind_client):
    """Asked for alone, a part gets only its own hooks: its block must equal the one it has in a trace
    of every part (whose hooks are the union)."""
    _, client = kind_client
    sel = {"layer": 1, "head": 3, "position": 4}
    every = client.post("/api/v1/forward", json={"text": TEXT, "include": list(registry.NAMES), **sel}).json()
    for name in registry.NAMES:
        alone = client.post("/api/v1/forward", json={"text": TEXT, "include": [name], **sel})
        assert alone.status_code == 200, (name, alone.text)
        assert alone.json()[name] == every[name], name


@pytest.mark.parametrize(("field", "a", "b"), [("layer", 0, 1), ("head", 0, 3), ("position", 2, 6), ("target", 10, 20)])
def test_a_part_that_a_selection_changes_declares_it(kind_client, field, a, b):
    """The page re-requests only the parts stale_on a changed field: every other part must come back
    the same, and every declared one must in fact change on these models."""
    _, client = kind_client
    base = {"text": TEXT, "include": list(registry.NAMES), "layer": 0, "head": 0, "position": 6, "target": 10}
    one = client.post("/api/v1/forward", json={**base, field: a}).json()
    two = client.post("/api/v1/forward", json={**base, field: b}).json()
    for part in registry.PARTS:
        if one[part.name] is None:
            continue
        changed = one[part.name] != two[part.name]
        assert changed == (field in part.stale_on), (part.name, field)
