"""The binary answers (server/wire.py): negotiated by Accept, the JSON's tree with its numeric
arrays as MessagePack extension values, and every number the JSON's own. Each heavy endpoint is
decoded in both forms and compared value for value."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptscope.server import wire
from gptscope.server.schemas.arrays import Arr

BIN = {"Accept": wire.MSGPACK}


def same(json_value, decoded, where: str = "") -> None:
    """The decoded binary tree equals the JSON tree: a numpy array against nested (maybe ragged,
    causal) lists holds the same numbers, the rest is equal as it is."""
    if isinstance(decoded, np.ndarray):
        assert decoded.dtype == np.float64, where
        flat: list[float] = []

        def walk(x, arr, path):
            if isinstance(x, list) and x and isinstance(x[0], list):
                assert len(x) == len(arr), path
                for i, (a, b) in enumerate(zip(x, arr)):
                    walk(a, b, f"{path}[{i}]")
            else:  # a row: a causal row is a prefix of the full one, the rest zeros
                assert list(arr[: len(x)]) == x, path
                assert not arr[len(x) :].any(), path
                flat.extend(x)

        walk(json_value, decoded, where)
        return
    if isinstance(json_value, dict):
        assert isinstance(decoded, dict) and set(json_value) == set(decoded), where
        for k in json_value:
            same(json_value[k], decoded[k], f"{where}.{k}")
    elif isinstance(json_value, list):
        assert isinstance(decoded, list) and len(decoded) == len(json_value), where
        for i, (a, b) in enumerate(zip(json_value, decoded)):
            same(a, b, f"{where}[{i}]")
    else:  # a number is a number (1 and 1.0 alike), a bool a bool, a string a string
        assert json_value == decoded, (where, json_value, decoded)
        assert isinstance(json_value, bool) == isinstance(decoded, bool), where
        assert isinstance(json_value, (int, float)) == isinstance(decoded, (int, float)), where


def both(client, method: str, path: str, **kw):
    j = client.request(method, path, **kw)
    b = client.request(method, path, headers=BIN, **kw)
    assert j.status_code == b.status_code == 200, (j.text[:300], b.status_code)
    assert j.headers["content-type"] == "application/json"
    assert b.headers["content-type"] == wire.MSGPACK
    assert "Accept" in j.headers["vary"].split(", ") and "Accept" in b.headers["vary"].split(", ")
    return j.json(), wire.decode(b.content), len(j.content), len(b.content)


ALL_PARTS = [
    "embeddings",
    "attention",
    "layernorm",
    "head_detail",
    "mlp",
    "residual",
    "logit_lens",
    "next_token",
    "prompt_loss",
    "decomposition",
]


def test_every_part_of_a_trace_decodes_to_the_jsons_numbers(client):
    j, b, nj, nb = both(
        client, "POST", "/api/v1/forward", json={"text": "ROMEO:\nBut soft, what light", "include": ALL_PARTS}
    )
    same(j, b)
    assert isinstance(b["attention"]["pattern"], np.ndarray) and b["attention"]["pattern"].ndim == 4
    assert isinstance(b["head_detail"]["scores"], np.ndarray)
    assert nb < nj / 2.5  # the logit lens candidates and the token pieces are objects in either form


@pytest.mark.parametrize(
    "method, path, kw",
    [
        ("GET", "/api/v1/forward", {"params": {"text": "To be, or not to be"}}),
        ("POST", "/api/v1/logit-lens", {"json": {"text": "To be, or not to be"}}),
        ("GET", "/api/v1/heads", {"params": {"text": "To be, or not to be, that is the question", "ablate": "false"}}),
        ("POST", "/api/v1/compare", {"json": {"a": "builtin", "b": "builtin", "text": "To be, or not to be"}}),
        ("POST", "/api/v1/patch", {"json": {"clean": "Long live King Edward", "corrupted": "Long live King Henry"}}),
        ("POST", "/api/v1/forward", {"json": {"text": "To be, or not to be", "include": ["logit_lens", "tuned_lens"]}}),
        ("POST", "/api/v1/token-attribution", {"json": {"text": "To be, or not to be", "every_position": True}}),
    ],
)
def test_each_heavy_endpoint_sends_both_forms(client, method, path, kw):
    j, b, _, _ = both(client, method, path, **kw)
    for volatile in ("runs", "seconds"):  # /patch: the second request finds its runs in the cache
        j.pop(volatile, None), b.pop(volatile, None)
    same(j, b)


def test_the_built_in_models_256_token_trace_is_under_a_megabyte(client, service):
    ids = (service.encoding.encode("ROMEO:\nBut soft, what light through yonder window breaks? ") * 40)[:256]
    j, b, nj, nb = both(client, "POST", "/api/v1/forward", json={"ids": ids})
    same(j, b)
    assert b["attention"]["pattern"].shape == (6, 4, 256, 256)
    assert nb <= 1_000_000 < nj


@pytest.mark.parametrize(
    "accept, binary",
    [
        (wire.MSGPACK, True),
        ("application/msgpack", True),
        ("application/x-msgpack;q=0.5, application/json", True),
        (f"{wire.MSGPACK};q=0, application/json", False),
        ("application/json", False),
        ("*/*", False),
        ("", False),
    ],
)
def test_json_is_the_default_and_msgpack_is_asked_for(client, accept, binary):
    r = client.get("/api/v1/forward", params={"text": "To be"}, headers={"Accept": accept} if accept else {})
    assert r.status_code == 200
    assert r.headers["content-type"] == (wire.MSGPACK if binary else "application/json")


def test_errors_stay_json_whatever_is_asked_for(client):
    r = client.post("/api/v1/forward", json={"text": "To be", "layer": 99}, headers=BIN)
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert r.json()["detail"][0]["loc"][-1] == "layer"


def test_the_openapi_documents_the_binary_form(client):
    spec = client.get("/openapi.json").json()
    for path, method in [("/api/v1/forward", "post"), ("/api/v1/heads", "get"), ("/api/v1/compare", "post")]:
        content = spec["paths"][path][method]["responses"]["200"]["content"]
        assert set(content) == {"application/json", wire.MSGPACK}
        assert content[wire.MSGPACK]["schema"] == content["application/json"]["schema"]


def test_every_answer_says_how_long_the_server_took(client):
    r = client.get("/api/v1/health")
    name, dur = r.headers["server-timing"].split(";dur=")
    assert name == "app" and float(dur) >= 0


def test_json_is_gzipped_and_the_binary_form_is_not(client):
    body = {"text": "ROMEO:\nBut soft, what light through yonder window breaks"}
    gz = {"Accept-Encoding": "gzip"}
    with client.stream("POST", "/api/v1/forward", json=body, headers=gz) as r:
        assert r.headers["content-encoding"] == "gzip"
    with client.stream("POST", "/api/v1/forward", json=body, headers={**gz, **BIN}) as r:
        assert r.headers["content-type"] == wire.MSGPACK and "content-encoding" not in r.headers
        assert wire.decode(r.read())["tokens"] == client.post("/api/v1/forward", json=body).json()["tokens"]


# --- the extension type itself -----------------------------------------------------------------


def leb128(n: int) -> bytes:
    """The textbook LEB128 of one unsigned integer, a byte at a time."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def roundtrip(a: Arr):
    return wire.decode_array(wire.array_payload(a))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**50), 2**50), min_size=0, max_size=300),
    st.integers(0, 12),
)
def test_varints_round_trip_any_integers(ns, digits):
    n = np.array(ns, dtype=np.int64)
    for zigzag in (True, False):
        if not zigzag and (n < 0).any():
            continue
        assert wire.decode_varints(wire.varints(n, zigzag), len(n), zigzag).tolist() == ns
    zig = [(v << 1) ^ (v >> 63) for v in ns]
    assert wire.varints(n, True) == b"".join(leb128(z) for z in zig)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 3), st.integers(0, 8), st.booleans())
def test_arrays_round_trip_to_the_jsons_numbers(t, lead, digits, tril):
    g = torch.Generator().manual_seed(t * 100 + lead * 10 + digits)
    x = torch.randn(lead, t, t, generator=g) * 10 ** (digits % 4)
    a = Arr(x, digits, tril=tril)
    got = roundtrip(a)
    want = a.tolist()
    for i in range(lead):
        for q in range(t):
            row = want[i][q]
            assert got[i, q, : len(row)].tolist() == row
            assert not got[i, q, len(row) :].any()


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (2, 3, 6, 6), (2, 0, 3, 3), (1, 1)])
def test_a_triangular_arrays_json_rows_stop_at_the_diagonal(shape):
    """tolist() of a causal array gives each matrix's rows cut at the diagonal, the full matrix's
    rounded numbers (NaN and -0.0 as 0.0), whatever the leading dimensions."""
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(*shape, generator=g)
    if x.numel():
        x.view(-1)[0], x.view(-1)[-1] = float("nan"), -0.0
    full = Arr(x, 3).tolist()

    def cut(rows, depth):
        return [r[: q + 1] for q, r in enumerate(rows)] if depth == 2 else [cut(r, depth - 1) for r in rows]

    got = Arr(x, 3, tril=True).tolist()
    assert got == cut(full, len(shape))
    flat = np.asarray(full, dtype=float).reshape(-1)
    assert not np.isnan(flat).any() and not np.signbit(flat[flat == 0]).any()


def test_the_page_of_bytes_is_as_documented():
    a = Arr(torch.tensor([[0.5, 0.0], [0.25, 0.75]]), 4, tril=True)
    data = wire.array_payload(a)
    # layout 1 (triangular), 4 digits, 2 dimensions, unsigned; shape 2 x 2; then 5000, 2500, 7500
    assert data[:4] == bytes([1, 4, 2, 1]) and data[4:12] == (2).to_bytes(4, "little") * 2
    assert data[12:] == bytes([0x88, 0x27, 0xC4, 0x13, 0xCC, 0x3A])
    signed = wire.array_payload(Arr(torch.tensor([-1.0, 1.0]), 0))
    assert signed[3] == 0 and signed[8:] == bytes([1, 2])  # zigzag: -1 -> 1, 1 -> 2
    assert roundtrip(Arr(torch.tensor(math.pi), 3)).tolist() == 3.142  # no dimensions: one number


def test_the_readers_in_docs_api_md_read_what_the_server_writes():
    """The standalone Python reader printed in docs/api.md (for a tool without gptscope) gives the
    same arrays as wire.decode_array."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    start = doc.index("def array(data: bytes)")
    code = doc[start : doc.index("\n\nr = httpx", start)]
    ns: dict = {"np": np}
    exec(code, ns)
    g = torch.Generator().manual_seed(0)
    for a in (
        Arr(torch.rand(2, 3, 5, 5, generator=g), 4, tril=True),
        Arr(torch.randn(7, 3, generator=g) * 100, 5),
        Arr(torch.tensor([1.0, -2.0, 3.0]), 0),
        Arr(torch.zeros(6, 0, 3, 3), 4, tril=True),  # no heads selected
    ):
        data = wire.array_payload(a)
        assert np.array_equal(ns["array"](data), wire.decode_array(data))


@pytest.mark.parametrize("sel", [{"layers": []}, {"heads": []}, {"layers": [], "heads": []}])
def test_an_empty_selection_is_an_empty_array_in_both_forms(client, sel):
    j, b, _, _ = both(client, "POST", "/api/v1/forward", json={"text": "To be", "include": ["attention"], **sel})
    same(j, b)
