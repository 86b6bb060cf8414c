"""The tokenizer area through the API: known answers, the BPE replay against tiktoken, the
encodings, the comparison, single tokens, the built-in tokenizer's merge record, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptscope.model.tokenizers import get_public_encoding
from gptscope.server.config import MAX_MERGES_PRETOKEN_BYTES, MAX_MERGES_TEXT_CHARS, MAX_TEXT_CHARS
from gptscope.server.explain import merges as bpe
from gptscope.server.explain import tokens as tok
from gptscope.server.schemas.tokenize import (
    CompareResponse,
    EncodingsResponse,
    MergesResponse,
    ModelMergesResponse,
    TokenInfo,
    TokenizeResponse,
)

ENCODINGS = ["gpt2", "cl100k_base", "o200k_base", "model"]
SEEDS = Path("/work/shared/seeds")
SAMPLE_TEXTS = [
    "Every effort moves you",
    " uncharacteristically",
    "The transformer unpacks unhelpful words into smaller pieces before processing them.",
    "ROMEO:\nBut soft, what light through yonder window breaks?\n\n\tIt is the east.",
    "naïve café 👋🏽 日本語のテキスト Ελληνικά — “quotes” 12345678 3.14159 x=y+1;  \n   \n",
    "I'm you'll they've we're she'd IT'S 'quoted' don't",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa        ----------------   !!!???",
    "def f(x):\n    return x ** 2  # comment\n",
    "\u00e9\u0301 combining, zero\u200bwidth, \U0001f600\U0001f601 emoji, \x00 nul, \r\n crlf",
]


def post(client, path, **payload):
    return client.post(f"/api/v1{path}", json=payload)


def ids_of(client, text, encoding="gpt2", **kw):
    r = post(client, "/tokenize", text=text, encoding=encoding, **kw)
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["tokens"]]


def many_texts() -> list[str]:
    """The fixed samples plus every paragraph (cut to 600 characters) of the seed texts."""
    out = list(SAMPLE_TEXTS)
    for f in sorted(SEEDS.glob("*.txt")):
        out += [p[:600] for p in f.read_text(encoding="utf-8").split("\n\n") if p.strip()][:80]
    return out


# --- known answers -----------------------------------------------------------------------------


def test_gpt2_every_effort_moves_you(client):
    r = post(client, "/tokenize", text="Every effort moves you", encoding="gpt2")
    body = TokenizeResponse.model_validate(r.json())
    assert [t.id for t in body.tokens] == [6109, 3626, 6100, 345]
    assert [p.text for p in body.pretokens] == ["Every", " effort", " moves", " you"]


def test_gpt2_forward_is_one_token(client):
    assert ids_of(client, " forward") == [2651]


def test_o200k_sentence_is_15_tokens(client):
    text = "The transformer unpacks unhelpful words into smaller pieces before processing them."
    r = post(client, "/tokenize", text=text, encoding="o200k_base")
    assert r.json()["counts"]["tokens"] == 15
    assert r.json()["counts"]["characters"] == 83


def test_endoftext_is_ordinary_text_unless_allowed(client):
    ordinary = ids_of(client, "<|endoftext|>")
    assert len(ordinary) > 1 and 50256 not in ordinary
    assert ids_of(client, "<|endoftext|>", allow_special=True) == [50256]
    r = post(client, "/tokenize", text="a<|endoftext|>b", encoding="gpt2", allow_special=True)
    body = r.json()
    assert [t["id"] for t in body["tokens"]][1] == 50256 and body["tokens"][1]["special"]
    assert [p["text"] for p in body["pretokens"]] == ["a", "<|endoftext|>", "b"]


def test_empty_text_is_zero_tokens(client):
    body = post(client, "/tokenize", text="", encoding="gpt2").json()
    assert body["tokens"] == [] and body["counts"]["tokens"] == 0 and body["counts"]["characters_per_token"] is None


def test_get_twin_equals_post(client):
    got = client.get("/api/v1/tokenize", params={"text": "Good morrow, cousin", "encoding": "cl100k_base"})
    assert got.status_code == 200
    assert got.json() == post(client, "/tokenize", text="Good morrow, cousin", encoding="cl100k_base").json()
    bad = client.get("/api/v1/tokenize", params={"text": "hi", "encoding": "zz"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "encoding"]


# --- encodings -----------------------------------------------------------------------------------


def test_encodings_list_vocab_sizes_specials_and_patterns(client, service):
    body = EncodingsResponse.model_validate(client.get("/api/v1/encodings").json())
    by = {e.name: e for e in body.encodings}
    assert list(by) == ENCODINGS
    assert (by["gpt2"].vocab_size, by["cl100k_base"].vocab_size, by["o200k_base"].vocab_size) == (50257, 100277, 200019)
    assert by["gpt2"].merges == 50_000 and by["gpt2"].mergeable_tokens == 50_256
    assert [(s.text, s.id) for s in by["gpt2"].special_tokens] == [("<|endoftext|>", 50256)]
    assert by["model"].vocab_size == service.model.cfg.vocab_size == service.encoding.n_vocab
    for e in body.encodings:
        assert e.pattern == tok.resolve_encoding(service, e.name)._pat_str


# --- BPE replay ------------------------------------------------------------------------------------


def test_merges_uncharacteristically(client):
    r = post(client, "/tokenize/merges", text=" uncharacteristically", encoding="gpt2")
    assert r.status_code == 200, r.text
    body = MergesResponse.model_validate(r.json())
    (pre,) = body.pretokens
    assert pre.text == " uncharacteristically" and len(pre.bytes) == 21
    assert pre.steps[-1].pieces == [" un", "character", "istically"]
    assert [t.text for t in pre.tokens] == [" un", "character", "istically"]
    assert [t.id for t in pre.tokens] == [555, 22769, 16772]
    assert body.counts.merges == len(pre.steps) == 21 - 3
    vocab = {v.id: bytes.fromhex(v.bytes_hex) for v in body.vocab}
    before = pre.byte_ids
    for s in pre.steps:
        # one merge: the pair at `position` becomes one piece whose id is the merge's rank
        assert before[s.position] == s.left and before[s.position + 1] == s.right
        assert vocab[s.merged] == vocab[s.left] + vocab[s.right] and s.merged == s.rank
        assert s.piece_ids == [*before[: s.position], s.merged, *before[s.position + 2 :]]
        assert b"".join(vocab[i] for i in s.piece_ids) == pre.text.encode()
        before = s.piece_ids
    ranks = [s.rank for s in pre.steps]
    assert ranks == sorted(ranks)  # earlier-learned merges apply first


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_merge_steps_equal_tiktoken_for_every_pretoken_of_many_texts(service, encoding):
    enc = tok.resolve_encoding(service, encoding)
    rank_of = bpe.ranks(enc)
    n = 0
    for text in many_texts():
        for p in tok.pretokens(enc, text, allow_special=False):
            data = p.text.encode("utf-8")
            steps = bpe.merge_steps(rank_of, data)
            final = steps[-1][4] if steps else [data[i : i + 1] for i in range(len(data))]
            assert [rank_of[f] for f in final] == enc.encode_ordinary(p.text), (encoding, p.text)
            n += 1
    assert n > 5000


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_merges_api_final_tokens_equal_tokenize(client, encoding):
    for text in SAMPLE_TEXTS:
        m = post(client, "/tokenize/merges", text=text, encoding=encoding).json()
        t = post(client, "/tokenize", text=text, encoding=encoding).json()
        assert [x for p in m["pretokens"] for x in p["tokens"]] == t["tokens"]
        assert [(p["text"], p["start"], p["end"]) for p in m["pretokens"]] == [
            (p["text"], p["start"], p["end"]) for p in t["pretokens"]
        ]


def test_merges_with_a_special_token(client):
    body = post(client, "/tokenize/merges", text="hi<|endoftext|>", encoding="gpt2", allow_special=True).json()
    special = body["pretokens"][1]
    assert special["special"] and special["steps"] == [] and [t["id"] for t in special["tokens"]] == [50256]
    plain = post(client, "/tokenize/merges", text="hi<|endoftext|>", encoding="gpt2").json()
    assert not any(p["special"] for p in plain["pretokens"])


def test_merges_of_partial_characters(client):
    body = post(client, "/tokenize/merges", text=" 👋", encoding="gpt2").json()
    pieces = [t for p in body["pretokens"] for t in p["tokens"]]
    assert bytes.fromhex("".join(t["bytes_hex"] for t in pieces)) == " 👋".encode()
    assert any(not t["valid_utf8"] for t in pieces)
    assert all(len(b) == 1 for b in body["pretokens"][-1]["bytes"])  # one U+FFFD per partial byte


# --- compare -------------------------------------------------------------------------------------


def test_compare_counts_and_vocabulary_costs(client):
    text = "The transformer unpacks unhelpful words into smaller pieces before processing them."
    r = post(client, "/tokenize/compare", text=text, d_model=512)
    assert r.status_code == 200, r.text
    body = CompareResponse.model_validate(r.json())
    assert [e.encoding for e in body.encodings] == ENCODINGS and body.d_model == 512
    fewest = min(e.counts.tokens for e in body.encodings)
    for e in body.encodings:
        assert e.counts.tokens == len(ids_of(client, text, e.encoding)) == len(e.tokens)
        assert e.embedding_params == e.vocab_size * 512
        assert e.attention_scores == e.counts.tokens**2
        assert e.tokens_vs_fewest == pytest.approx(e.counts.tokens / fewest, abs=1e-4)
    by = {e.encoding: e for e in body.encodings}
    assert by["o200k_base"].counts.tokens == 15
    assert by["model"].counts.tokens > by["gpt2"].counts.tokens  # 2,048 entries learned from Shakespeare
    assert by["gpt2"].embedding_params < by["cl100k_base"].embedding_params < by["o200k_base"].embedding_params


def test_compare_defaults_and_empty_text(client):
    body = post(client, "/tokenize/compare", text="").json()
    assert body["d_model"] == 768 and body["characters"] == 0
    for e in body["encodings"]:
        assert e["counts"]["tokens"] == 0 and e["tokens"] == [] and e["tokens_vs_fewest"] is None
        assert e["embedding_params"] == e["vocab_size"] * 768
    small = post(client, "/tokenize/compare", text="hello", include_tokens=False).json()
    assert all(e["tokens"] is None for e in small["encodings"])
    r = post(client, "/tokenize/compare", text="hello", d_model=0)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "d_model"]


# --- single tokens -------------------------------------------------------------------------------


def test_token_lookup(client):
    r = client.get("/api/v1/tokens/gpt2/6100")
    assert r.status_code == 200
    body = TokenInfo.model_validate(r.json())
    assert body.text == " moves" and bytes(body.byte_values) == b" moves" and body.bytes_hex == b" moves".hex()
    left, right = (client.get(f"/api/v1/tokens/gpt2/{i}").json() for i in body.merged_from)
    assert bytes.fromhex(left["bytes_hex"] + right["bytes_hex"]) == b" moves"
    assert client.get("/api/v1/tokens/gpt2/50256").json()["special"] is True
    assert client.get("/api/v1/tokens/model/65").json()["merged_from"] is None  # a single byte


@pytest.mark.parametrize(
    "path,field,words",
    [
        ("/api/v1/tokens/gpt2/50257", "id", ["0 to 50256"]),
        ("/api/v1/tokens/gpt2/-1", "id", ["out of range"]),
        ("/api/v1/tokens/cl100k_base/100261", "id", ["not assigned"]),
        ("/api/v1/tokens/nope/5", "encoding", ["gpt2", "cl100k_base", "o200k_base", "model"]),
    ],
)
def test_token_lookup_errors_are_422_naming_the_parameter(client, path, field, words):
    r = client.get(path)
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"] == ["path", field] and all(w in d["msg"] for w in words)


# --- the built-in tokenizer's merge record -----------------------------------------------------


def test_model_merges_paged_with_counts(client, service):
    spec = service.meta.tokenizer
    r = client.get("/api/v1/tokenizer/model/merges", params={"offset": 0, "limit": 20})
    assert r.status_code == 200
    body = ModelMergesResponse.model_validate(r.json())
    assert body.total == len(spec["merges"]) and body.vocab_size == service.model.cfg.vocab_size
    assert len(body.merges) == 20
    for m, (a, b, count) in zip(body.merges, spec["merges"]):
        assert (m.left.id, m.right.id, m.count) == (a, b, count) and m.id == 256 + m.rank
        assert bytes.fromhex(m.token.bytes_hex) == bytes.fromhex(m.left.bytes_hex) + bytes.fromhex(m.right.bytes_hex)
    counts = [m.count for m in body.merges]
    assert counts == sorted(counts, reverse=True)  # the most frequent pair is merged first
    last = client.get("/api/v1/tokenizer/model/merges", params={"offset": body.total - 5, "limit": 100}).json()
    assert len(last["merges"]) == 5 and last["merges"][-1]["rank"] == body.total - 1
    assert client.get("/api/v1/tokenizer/model/merges", params={"offset": body.total}).json()["merges"] == []
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}):
        r = client.get("/api/v1/tokenizer/model/merges", params=bad)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] == "query"


def test_model_merge_record_drives_the_model_encoding(client, service):
    """The merge list is the model tokenizer: replaying a text with encoding=model uses those ranks."""
    merges = client.get("/api/v1/tokenizer/model/merges", params={"limit": 1000}).json()["merges"]
    by_id = {m["id"]: m for m in merges}
    body = post(client, "/tokenize/merges", text=" the", encoding="model").json()
    for s in body["pretokens"][0]["steps"]:
        if s["merged"] in by_id:
            assert (by_id[s["merged"]]["left"]["id"], by_id[s["merged"]]["right"]["id"]) == (s["left"], s["right"])


# --- bad input -----------------------------------------------------------------------------------


def test_merges_of_empty_text_is_422_naming_text(client):
    r = post(client, "/tokenize/merges", text="", encoding="gpt2")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "text"]


def test_over_limit_texts_are_422_naming_the_limit(client):
    r = post(client, "/tokenize", text="a" * (MAX_TEXT_CHARS + 1), encoding="gpt2")
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "text"] and str(MAX_TEXT_CHARS) in d["msg"]
    assert len(r.content) < 1000  # the text is not echoed back
    r = post(client, "/tokenize/compare", text="a" * (MAX_TEXT_CHARS + 1))
    assert r.status_code == 422 and str(MAX_TEXT_CHARS) in r.json()["detail"][0]["msg"]
    r = post(client, "/tokenize/merges", text="a " * (MAX_MERGES_TEXT_CHARS // 2 + 1), encoding="gpt2")
    assert r.status_code == 422 and str(MAX_MERGES_TEXT_CHARS) in r.json()["detail"][0]["msg"]
    r = post(client, "/tokenize/merges", text="x" * (MAX_MERGES_PRETOKEN_BYTES + 1), encoding="gpt2")
    d = r.json()["detail"][0]
    assert r.status_code == 422 and d["loc"] == ["body", "text"] and str(MAX_MERGES_PRETOKEN_BYTES) in d["msg"]
    assert post(client, "/tokenize/merges", text="x" * MAX_MERGES_PRETOKEN_BYTES, encoding="gpt2").status_code == 200


@pytest.mark.parametrize("path", ["/tokenize", "/tokenize/merges"])
def test_unknown_encoding_lists_the_valid_ones(client, path):
    r = post(client, path, text="hi", encoding="r50k")
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "encoding"] and all(n in d["msg"] for n in ENCODINGS)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udc80", "\\ud83d"])
@pytest.mark.parametrize("path", ["/api/v1/tokenize", "/api/v1/tokenize/merges", "/api/v1/tokenize/compare"])
def test_lone_surrogates_are_422_never_500(client, path, escape):
    body = (f'{{"text": "ok {escape} then", "encoding": "gpt2"}}').encode()
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "text"]
    assert "surrogate" in d["msg"] or "unicode" in d["msg"].lower()


# --- round trip, for arbitrary Unicode --------------------------------------------------------------

unicode_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=unicode_text, encoding=st.sampled_from(ENCODINGS))
def test_token_bytes_concatenate_to_the_utf8_of_the_text(client, text, encoding):
    r = post(client, "/tokenize", text=text, encoding=encoding)
    assert r.status_code == 200
    toks = r.json()["tokens"]
    assert bytes.fromhex("".join(t["bytes_hex"] for t in toks)) == text.encode("utf-8")
    assert all(0 <= t["start"] <= t["end"] <= len(text) for t in toks)
    if text:
        m = post(client, "/tokenize/merges", text=text, encoding=encoding).json()
        assert [t["id"] for p in m["pretokens"] for t in p["tokens"]] == [t["id"] for t in toks]


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_decode_encode_round_trip_for_every_public_encoding(text):
    for name in ("gpt2", "cl100k_base", "o200k_base"):
        enc = get_public_encoding(name)
        assert enc.decode(enc.encode(text, disallowed_special=())) == text


# --- the page ------------------------------------------------------------------------------------


def test_tokenizer_page_and_its_json_twin(client):
    r = client.get("/tokenizer", params={"text": "Good morrow", "encoding": "cl100k_base"})
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert '<a href="/tokenizer" aria-current="page">Tokenizer</a>' in r.text
    link = r.headers["link"]
    assert 'rel="alternate"' in link and "/api/v1/tokenize?text=Good+morrow&encoding=cl100k_base" in link
    twin = client.get(link[link.index("<") + 1 : link.index(">")])
    assert twin.status_code == 200 and twin.json()["encoding"] == "cl100k_base"
    assert "".join(t["text"] for t in twin.json()["tokens"]) == "Good morrow"
    assert 'href="/tokenizer"' in client.get("/").text  # reachable from the main page


def test_openapi_documents_the_tokenizer_endpoints(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/api/v1/encodings",
        "/api/v1/tokenize",
        "/api/v1/tokenize/merges",
        "/api/v1/tokenize/compare",
        "/api/v1/tokens/{encoding}/{id}",
        "/api/v1/tokenizer/model/merges",
    } <= set(paths)
    assert "get" in paths["/api/v1/tokenize"] and "post" in paths["/api/v1/tokenize"]
