"""Two models on one text: POST /api/v1/compare."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model.bpe import GPT2_PATTERN
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server.app import create_app
from gptscope.server.config import Settings

TEXT = "KING HENRY V:\nOnce more unto the breach, dear friends, once"


def test_a_model_compared_with_itself_differs_nowhere(client):
    r = client.post("/api/v1/compare", json={"a": "builtin", "b": "builtin", "text": TEXT, "layer": 1, "head": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["same_tokenizer"] and body["kl_ab"] == 0.0 and body["kl_ba"] == 0.0
    assert all(x == 0.0 for x in body["char_bits_diff"] if x is not None)
    assert all(x == 0.0 for row in body["attention_diff"] for x in row)
    assert body["common_bits_a"] == body["common_bits_b"] and body["common_chars"] > 0
    assert body["params"]["same_architecture"] and all(
        c["relative_change"] in (0.0, None) for c in body["params"]["changes"]
    )
    assert body["a"]["next_token"] == body["b"]["next_token"] and body["a"]["logit_lens"] == body["b"]["logit_lens"]


def test_per_character_bits_add_up_to_the_forward_loss(client):
    body = client.post("/api/v1/compare", json={"a": "builtin", "b": "builtin", "text": TEXT}).json()
    f = client.post("/api/v1/forward", json={"text": TEXT, "include": ["prompt_loss"]}).json()
    nats = sum(p["loss"] for p in f["prompt_loss"]["positions"])
    assert sum(x for x in body["char_bits_a"] if x is not None) == pytest.approx(nats / math.log(2), abs=1e-3)
    assert body["a"]["total_bits"] == pytest.approx(nats / math.log(2), abs=1e-3)
    first = body["a"]["tokens"][0]  # the first token is never predicted: its characters are unscored
    assert body["char_bits_a"][first["start"] : first["end"]] == [None] * (first["end"] - first["start"])
    assert body["a"]["bits_per_char"] == pytest.approx(body["a"]["total_bits"] / (len(TEXT) - first["end"]), abs=1e-4)


def save_model(folder, tokenizer: dict, vocab: int, seed: int) -> None:
    torch.manual_seed(seed)
    ckpt.save(
        folder,
        GPT(GPTConfig(vocab_size=vocab, n_ctx=16, n_layer=1, n_head=2, d_model=16)),
        {"name": folder.name, "tokenizer": tokenizer, "step": 0, "final": True},
    )


@pytest.fixture(scope="module")
def two_tokenizers(tmp_path_factory):
    """models/chars reads a, b, c one character at a time; models/pairs has a BPE whose one merge
    joins 'a' and 'b'."""
    data = tmp_path_factory.mktemp("cmp")
    save_model(data / "models" / "chars", {"kind": "chars", "chars": list("abc ")}, 4, 1)
    save_model(
        data / "models" / "pairs",
        {"kind": "bpe", "pattern": GPT2_PATTERN, "merges": [[97, 98, 1]], "special_tokens": {}},
        257,
        2,
    )
    app = create_app(Settings(allow_hosts=["testserver"], data_dir=data))
    with TestClient(app) as c:
        yield c, data


def token_losses(folder, ids: list[int]) -> list[float]:
    m = ckpt.load(folder).model.set_mode("explain")
    with torch.no_grad():
        lp = torch.log_softmax(m(torch.tensor([ids]))[0][0], -1)
    return [float(-lp[t, ids[t + 1]]) / math.log(2) for t in range(len(ids) - 1)]


def test_models_with_different_tokenizers_align_on_characters(two_tokenizers):
    client, data = two_tokenizers
    text = "abcab"
    r = client.post("/api/v1/compare", json={"a": "models/chars", "b": "models/pairs", "text": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert not body["same_tokenizer"] and body["kl_ab"] is None and body["attention_diff"] is None
    assert [t["text"] for t in body["a"]["tokens"]] == ["a", "b", "c", "a", "b"]
    assert [t["text"] for t in body["b"]["tokens"]] == ["ab", "c", "ab"]
    la = token_losses(data / "models" / "chars", [0, 1, 2, 0, 1])  # b|a, c|ab, a|abc, b|abca
    lb = token_losses(data / "models" / "pairs", [256, 99, 256])  # c|ab, ab|abc
    assert body["char_bits_a"] == pytest.approx([None, la[0], la[1], la[2], la[3]], abs=1e-4)
    # 'ab' covers two characters: half its bits each; the first token's characters are unscored
    assert body["char_bits_b"] == pytest.approx([None, None, lb[0], lb[1] / 2, lb[1] / 2], abs=1e-4)
    assert body["common_chars"] == 3
    assert body["common_bits_a"] == pytest.approx(la[1] + la[2] + la[3], abs=1e-3)
    assert body["common_bits_b"] == pytest.approx(lb[0] + lb[1], abs=1e-3)
    assert body["char_bits_diff"][:2] == [None, None]
    assert not body["params"]["same_architecture"] and body["params"]["changes"] == []
    # the next-token distributions are read after the token that holds the chosen character
    at = client.post("/api/v1/compare", json={"a": "models/chars", "b": "models/pairs", "text": text, "char": 0}).json()
    assert at["a"]["position"] == 0 and at["b"]["position"] == 0
    bad = client.post("/api/v1/compare", json={"a": "models/chars", "b": "models/pairs", "text": "abz"})
    assert bad.status_code == 422 and "'z'" in bad.json()["detail"][0]["msg"]


def test_compare_bad_input(client):
    for payload, field in [
        ({"b": "builtin", "text": TEXT}, "a"),
        ({"a": "../x", "b": "builtin", "text": TEXT}, "a"),
        ({"a": "builtin", "b": "builtin", "text": TEXT, "layer": 99}, "layer"),
        ({"a": "builtin", "b": "builtin", "text": TEXT, "char": 999}, "char"),
        ({"a": "builtin", "b": "builtin", "text": ""}, "text"),
    ]:
        r = client.post("/api/v1/compare", json=payload)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field, (payload, r.text)
    r = client.post("/api/v1/compare", json={"a": "builtin", "b": "0123456789ab", "text": TEXT})
    assert r.status_code == 404 and "0123456789ab" in r.json()["detail"]
