"""nanochat's <|bos|>: a text prompt on an imported nanochat model starts with it by default, as
nanochat's own code puts it before every document (training, evaluation, its engine and chat);
`bos: false` leaves it out and `bos: true` is accepted. The built-in model, which has no
beginning-of-text token, is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from gptscope.model.tokenizers import NANOCHAT_BOS, NanochatEncoding, default_bos_ids
from gptscope.server.app import create_app
from gptscope.server.cli import main as cli_main
from gptscope.server.config import Settings
from gptscope.server.explain.pair import pair_ids
from gptscope.server.explain.token_attribution import request_ids
from gptscope.server.explain.tokens import token_pieces
from gptscope.server.schemas.patch import PatchRequest
from gptscope.server.schemas.token_attribution import TokenAttributionRequest
from gptscope.server.service import ModelService

FOLDER = Path(__file__).parent / "data" / "nanochat" / "92d63d4"
TEXT = "To be, or not to be, that"


@pytest.fixture(scope="module")
def nanochat(tmp_path_factory) -> tuple[ModelService, TestClient]:
    """The tiny checkpoint nanochat's own code wrote (tests/test_import_nanochat.py), imported and served."""
    data = tmp_path_factory.mktemp("nanochat-bos")
    assert cli_main(["import", str(FOLDER), "--name", "nc", "--data-dir", str(data)]) == 0
    service = ModelService(data / "models" / "nc")
    app = create_app(Settings(checkpoint=service.path, allow_hosts=["testserver"], data_dir=data), service=service)
    with TestClient(app) as client:
        yield service, client


def _bos(service: ModelService) -> int:
    return service.encoding.encode(NANOCHAT_BOS, allowed_special="all")[0]


def _ids(body: dict, key: str = "tokens") -> list[int]:
    return [t["id"] for t in body[key]]


def test_the_nanochat_tokenizer_says_its_bos(nanochat):
    service, client = nanochat
    enc = service.encoding
    assert isinstance(enc, NanochatEncoding) and default_bos_ids(enc) == [_bos(service)]
    assert client.get("/api/v1/health").json()["info"]["bos"] == [_bos(service)]  # the pages' BOS note


@pytest.mark.parametrize("path", ["/api/v1/forward", "/api/v1/next-token"])
def test_a_text_prompt_starts_with_bos_unless_asked_not_to(nanochat, path):
    service, client = nanochat
    text_ids = service.encoding.encode_ordinary(TEXT)
    for bos, lead in ((None, [_bos(service)]), (True, [_bos(service)]), (False, [])):
        body = {"text": TEXT} if bos is None else {"text": TEXT, "bos": bos}
        r = client.post(path, json=body)
        assert r.status_code == 200, (bos, r.text)
        assert _ids(r.json()) == lead + text_ids, bos


def test_the_bos_covers_none_of_the_text_and_every_token_keeps_its_characters(nanochat):
    """Tokens laid on the prompt's own text (as /compare lines both models' tokens up on it): the
    <|bos|> spans none of it, and the text's tokens cover it from its first character to its last."""
    service, _ = nanochat
    ids = [_bos(service), *service.encoding.encode_ordinary(TEXT)]
    pieces = token_pieces(service.encoding, ids, TEXT)
    assert (pieces[0].start, pieces[0].end) == (0, 0)
    assert pieces[1].start == 0 and pieces[-1].end == len(TEXT)
    assert "".join(TEXT[p.start : p.end] for p in pieces) == TEXT


def test_a_patch_pair_and_a_token_attribution_prompt_start_with_bos(nanochat):
    """/patch and /token-attribution refuse nanochat's block before they run, so the prompts they would
    run are checked where they are made (pair.pair_ids, token_attribution.request_ids); the endpoints'
    answer stays that refusal, with bos true as without."""
    service, client = nanochat
    bos, text_ids = _bos(service), service.encoding.encode_ordinary("To be, or not")
    for asked, lead in ((None, [bos]), (True, [bos]), (False, [])):
        clean, corrupted = pair_ids(service, PatchRequest(clean="To be, or not", corrupted="To be, or nob", bos=asked))
        assert clean == lead + text_ids and corrupted[: len(lead)] == lead, asked
        assert request_ids(service, TokenAttributionRequest(text="To be, or not", bos=asked)) == (lead + text_ids, 0)
    r = client.post("/api/v1/patch", json={"clean": "To be, or not", "corrupted": "To be, or yes", "bos": True})
    assert r.status_code == 422 and "nanochat's block" in r.text
    r = client.post("/api/v1/token-attribution", json={"text": "To be, or not", "bos": True})
    assert r.status_code == 422 and "does not attribute it yet" in r.text


def test_the_logits_are_nanochats_own_after_bos(nanochat):
    """nanochat's reference logits (tests/nanochat_reference.py: its GPT on <|bos|> + the text) come
    back for the text alone, as the default puts the <|bos|> first."""
    service, client = nanochat
    ref = load_file(str(FOLDER / "reference.safetensors"))
    ids, pos = ref["ids"].tolist(), 30  # ref["positions"][10]: a row of the reference logits
    assert ids[0] == _bos(service) and int(ref["positions"][10]) == pos
    text = service.encoding.decode(ids[1 : pos + 1])
    assert service.encoding.encode_ordinary(text) == ids[1 : pos + 1]
    r = client.post("/api/v1/next-token", json={"text": text, "show": 5})
    assert r.status_code == 200 and _ids(r.json()) == ids[: pos + 1]
    for c in r.json()["candidates"]:
        assert c["logit"] == pytest.approx(float(ref["logits"][10, c["id"]]), abs=2e-4)
    without = client.post("/api/v1/next-token", json={"text": text, "show": 5, "bos": False}).json()
    assert max(abs(c["logit"] - float(ref["logits"][10, c["id"]])) for c in without["candidates"]) > 1e-2


def test_the_builtin_model_is_unchanged(client, service):
    """No beginning-of-text token: none by default, and `bos: true` is still refused."""
    assert default_bos_ids(service.encoding) == []
    ids = service.encoding.encode_ordinary(TEXT)
    for path in ("/api/v1/forward", "/api/v1/next-token", "/api/v1/token-attribution"):
        r = client.post(path, json={"text": TEXT})
        assert r.status_code == 200 and _ids(r.json()) == ids, path
        r = client.post(path, json={"text": TEXT, "bos": True})
        assert r.status_code == 422 and "has no beginning-of-text token" in r.text, path
    r = client.post("/api/v1/patch", json={"clean": "To be, or not", "corrupted": "To be, or yes", "bos": True})
    assert r.status_code == 422 and "has no beginning-of-text token" in r.text


def test_a_chat_is_refused_as_before(nanochat):
    """gptscope has no nanochat chat template (its chat format is in its code, not in the checkpoint):
    `messages` stay refused, so no chat prompt goes without its <|bos|>."""
    _, client = nanochat
    r = client.post("/api/v1/forward", json={"messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 422 and "no chat template" in r.text
