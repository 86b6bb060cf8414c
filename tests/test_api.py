"""The walking skeleton's API through an in-process client, paired with the HTML page."""

from __future__ import annotations

import math
import re

import pytest

from gptscope.server.config import KEEP_ALIVE_S
from gptscope.server.schemas.forward import ForwardResponse
from gptscope.server.schemas.tokenize import TokenizeResponse


def test_health_names_the_loaded_model(client, service):
    r = client.get("/api/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["model"] == service.name
    assert body["info"]["vocab_size"] == service.model.cfg.vocab_size
    assert body["info"]["params"] == service.model.num_params()


def test_tokenize_gpt2_known_answer(client):
    r = client.post("/api/v1/tokenize", json={"text": "Every effort moves you", "encoding": "gpt2"})
    assert r.status_code == 200
    body = TokenizeResponse.model_validate(r.json())
    assert [t.id for t in body.tokens] == [6109, 3626, 6100, 345]
    assert [t.text for t in body.tokens] == ["Every", " effort", " moves", " you"]
    assert [(t.start, t.end) for t in body.tokens] == [(0, 5), (5, 12), (12, 18), (18, 22)]
    assert body.counts.tokens == 4 and body.counts.characters == 22


def test_tokenize_spans_cover_text_for_the_model_encoding(client):
    text = "O Romeo, Romeo! wherefore art thou Romeo?\n"
    r = client.post("/api/v1/tokenize", json={"text": text, "encoding": "model"})
    assert r.status_code == 200
    toks = r.json()["tokens"]
    assert "".join(t["text"] for t in toks) == text
    assert all(text[t["start"] : t["end"]] == t["text"] for t in toks)


def test_forward_returns_tokens_attention_and_next_token(client, service):
    r = client.post("/api/v1/forward", json={"text": "ROMEO:\nBut soft, what light"})
    assert r.status_code == 200
    body = ForwardResponse.model_validate(r.json())
    cfg = service.model.cfg
    T = len(body.tokens)
    pat = body.attention.pattern
    assert len(pat) == cfg.n_layer and len(pat[0]) == cfg.n_head
    assert body.causal is True and len(pat[0][0]) == T
    for layer in pat:
        for head in layer:
            for q, row in enumerate(head):
                assert len(row) == q + 1  # causal: keys 0..q only (the masked ones are exactly 0)
                assert math.isclose(sum(row), 1.0, abs_tol=1e-3)
    probs = [c.prob for c in body.next_token]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001


def test_forward_can_select_a_layer_and_head(client):
    r = client.post(
        "/api/v1/forward", json={"text": "to be or not", "layers": [1], "heads": [2], "include": ["attention"]}
    )
    assert r.status_code == 200
    body = r.json()
    assert body["attention"]["layers"] == [1] and body["attention"]["heads"] == [2]
    assert len(body["attention"]["pattern"]) == 1 and len(body["attention"]["pattern"][0]) == 1
    assert body["next_token"] is None


def test_forward_empty_text_is_422_naming_the_field(client):
    r = client.post("/api/v1/forward", json={"text": ""})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "text"]


def test_forward_prompt_longer_than_context_is_422_naming_the_limit(client, service):
    n_ctx = service.model.cfg.n_ctx
    r = client.post("/api/v1/forward", json={"text": "word " * (n_ctx + 10)})
    assert r.status_code == 422
    assert f"n_ctx={n_ctx}" in r.json()["detail"][0]["msg"]
    r = client.post(
        "/api/v1/forward", json={"text": "word " * (n_ctx + 10), "truncate": True, "include": ["next_token"]}
    )
    assert r.status_code == 200
    assert len(r.json()["tokens"]) == n_ctx and r.json()["truncated"] > 0


def test_bad_layer_and_encoding_are_422(client, service):
    r = client.post("/api/v1/forward", json={"text": "hi", "layers": [service.model.cfg.n_layer]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "layers"]
    r = client.post("/api/v1/tokenize", json={"text": "hi", "encoding": "nope"})
    assert r.status_code == 422 and "gpt2" in r.json()["detail"][0]["msg"]


def test_lone_surrogate_is_422_not_500(client):
    r = client.post(
        "/api/v1/tokenize",
        content=b'{"text": "a\\ud800b", "encoding": "gpt2"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "text"]
    assert "unicode" in r.json()["detail"][0]["msg"].lower()


def test_page_and_its_json_twin(client):
    r = client.get("/", params={"text": "Good morrow"})
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "Good morrow" in r.text
    link = r.headers["link"]
    assert 'rel="alternate"' in link and "/api/v1/forward?text=Good+morrow" in link
    twin = client.get(link[link.index("<") + 1 : link.index(">")])
    assert twin.status_code == 200 and twin.json()["tokens"][0]["text"] == "Good"


def test_plotly_is_served_locally(client):
    r = client.get("/vendor/plotly.min.js")  # httpx asks for gzip and decodes it
    assert r.status_code == 200 and len(r.content) > 1_000_000
    assert b"plotly" in r.content[:2000].lower()
    assert r.content.startswith(b"//# allFunctionsCalledOnLoad\n")  # compiled off the main thread
    assert r.headers["content-encoding"] == "gzip" and int(r.headers["content-length"]) < len(r.content) / 2
    plain = client.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == r.content


# `type: "..."` values in the pages' code that are not Plotly trace types: axis types, shapes, inputs
NOT_TRACES = {"linear", "log", "date", "category", "multicategory", "line", "rect", "circle", "path"}
NOT_TRACES |= {"button", "checkbox", "text", "number", "range", "radio", "submit", "file"}


def test_the_vendored_plotly_has_every_trace_type_the_pages_draw():
    """static/vendor holds Plotly's cartesian bundle, not the full one: a trace type the pages use
    that it lacks would draw nothing."""
    from gptscope.server.config import STATIC_DIR

    bundle = (STATIC_DIR / "vendor" / "plotly-cartesian.min.js").read_text()
    registered = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', bundle))
    assert {"scatter", "bar", "heatmap", "contour"} <= registered
    used = set()
    for f in (STATIC_DIR / "js").rglob("*.js"):
        used |= set(re.findall(r'\btype: *"([a-z0-9]+)"', f.read_text()))
    assert used - NOT_TRACES, used  # the pattern finds the pages' traces at all
    assert used - NOT_TRACES <= registered, used - NOT_TRACES - registered


def test_openapi_docs(client):
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/health", "/api/v1/tokenize", "/api/v1/forward"} <= set(paths)


def test_the_default_prompt_is_in_the_corpus_format_and_its_top_guess_is_a_word(client, service):
    from gptscope.server.routers.pages import DEFAULT_PROMPT

    speaker, _, speech = DEFAULT_PROMPT.partition("\n")
    assert speaker.endswith(":") and speech  # a NAME: line, then the speech, as in the corpus
    assert f"\n{speaker}\n" in corpus_text()
    r = client.post("/api/v1/next-token", json={"text": DEFAULT_PROMPT, "show": 5})
    assert r.status_code == 200
    top = r.json()["candidates"][0]
    assert re.fullmatch(r" ?[A-Za-z]+", top["text"]), top  # a word, not whitespace or punctuation
    page = client.get("/")
    assert DEFAULT_PROMPT.replace("\n", "&#10;") in page.text or DEFAULT_PROMPT in page.text


def corpus_text() -> str:
    from gptscope.model import corpus

    return corpus.shakespeare().text


@pytest.mark.parametrize("own_process", [True, False])
def test_only_an_app_that_is_its_own_process_freezes_its_startup_heap(service, tmp_path, own_process):
    """`gptscope serve` (own_process) moves what it loaded at start out of the collector's full
    collections, and again once it serves another model; an app inside another program (a test, a
    notebook) leaves that program's heap alone."""
    from unittest import mock

    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    settings = Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path, allow_hosts=["testserver"])
    with mock.patch("gc.freeze") as freeze, TestClient(create_app(settings, service, own_process)) as c:
        assert c.get("/api/v1/health").status_code == 200
        assert freeze.call_count == (1 if own_process else 0)
        # serving another model: the heap is collected and frozen again, the new model with it
        assert c.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200
        assert freeze.call_count == (2 if own_process else 0)


def test_gptscope_serve_is_an_app_in_its_own_process():
    from unittest import mock

    from gptscope.server import cli

    with (
        mock.patch("gptscope.server.app.create_app") as make,
        mock.patch("uvicorn.run") as run,
        mock.patch("logging.basicConfig"),
    ):
        assert cli.main(["serve", "--port", "8123"]) == 0
    assert make.call_args.kwargs["own_process"] is True and run.call_args.args[0] is make.return_value
    assert run.call_args.kwargs["timeout_keep_alive"] == KEEP_ALIVE_S


def test_the_servers_keep_idle_connections_longer_than_clients_do():
    """An idle connection closed by the server at the moment a client reuses it is an ECONNRESET for
    that request (Playwright's request context and httpx do not retry a POST): every server the
    project starts keeps idle connections open longer than those clients' 5-s idle expiry."""
    import httpx

    from gptscope.background_server import BackgroundServer

    assert KEEP_ALIVE_S > httpx.Limits().keepalive_expiry == 5.0
    assert BackgroundServer(object())._server.config.timeout_keep_alive == KEEP_ALIVE_S


def test_a_replaced_model_is_not_kept_in_memory_by_what_was_worked_out_from_it(tmp_path):
    """POST /api/v1/model serves another checkpoint; the results worked out from the one it replaced
    (head roles, the embedding projection, the tokenizer's merges) go with it, so it can be freed."""
    import gc
    import weakref

    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    settings = Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path, allow_hosts=["testserver"])
    app = create_app(settings)
    with TestClient(app) as c:
        for path in ("/api/v1/heads?text=To%20be%2C%20or%20not%20to%20be", "/api/v1/embeddings/projection?limit=10"):
            assert c.get(path).status_code == 200, path
        assert c.get("/api/v1/tokenizer/model/merges?limit=5").status_code == 200
        assert c.post("/api/v1/forward", json={"text": "ROMEO: hi"}).status_code == 200
        old = weakref.ref(app.state.models.served)
        assert old().memo  # the roles, the projection and the merges were kept on it
        assert c.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200
        gc.collect()
        assert old() is None


def test_per_model_keeps_the_most_recent_results_of_each_model(service):
    from gptscope.server.service import per_model

    calls = []

    @per_model(maxsize=2)
    def work(svc, x):
        calls.append(x)
        return x * 10

    assert [work(service, x) for x in (1, 2, 1, 3, 2, 1)] == [10, 20, 10, 30, 20, 10]
    # 1 was used again before 3 came, so 3 dropped 2 (not 1); coming back, 2 dropped 1
    assert calls == [1, 2, 3, 2, 1]
    service.memo.pop(work.__qualname__)
