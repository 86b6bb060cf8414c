"""The API's contract in /openapi.json (server/contract.py), checked directly and fast; the
schemathesis run in tests/test_fuzz.py checks it against the answers."""

from __future__ import annotations

import pytest

ERROR = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture(scope="module")
def operations(client):
    doc = client.get("/openapi.json").json()
    ops = [
        (path, method, op)
        for path, item in doc["paths"].items()
        if path.startswith("/api/v1/")
        for method, op in item.items()
        if method in ("get", "post", "put", "delete", "patch")
    ]
    assert len(ops) > 40
    return ops


def test_every_operation_documents_its_error_answers_with_one_shape(operations):
    for path, method, op in operations:
        codes = set(op["responses"])
        want = {"400", "503"} | ({"413", "415"} if method != "get" else set()) | ({"404"} if "{" in path else set())
        want |= {"422"} if op.get("parameters") or "requestBody" in op else set()
        assert want <= codes, (method, path, sorted(want - codes))
        for code in want - {"422"}:
            assert op["responses"][code]["content"]["application/json"]["schema"] == ERROR, (method, path, code)


def test_apps_built_alike_share_one_document_and_a_new_route_makes_another(client, tmp_path):
    """The document is made once for every app built alike (server/contract.py's one slot); an app given
    another route gets a document of its own, with that route, and the first apps' is made again."""
    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    first = client.app.openapi()

    def another():
        return create_app(Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=tmp_path, allow_hosts=["testserver"]))

    assert another().openapi() is first
    extra = another()

    @extra.get("/api/v1/only-here")
    def only_here() -> dict:
        return {}

    doc = extra.openapi()
    assert "/api/v1/only-here" in doc["paths"] and "/api/v1/only-here" not in first["paths"]
    again = another().openapi()
    assert again is not doc and again == first


def test_405_names_every_method_of_the_path(client):
    for path, allowed in (
        ("/api/v1/forward", "GET, HEAD, POST"),
        ("/api/v1/training/0123456789ab", "DELETE, GET, HEAD"),
        ("/api/v1/training", "GET, HEAD, POST"),
        ("/api/v1/health", "GET, HEAD"),
    ):
        r = client.request("OPTIONS", path)
        assert r.status_code == 405 and r.headers["allow"] == allowed, (path, r.headers.get("allow"))
        assert r.json() == {"detail": "Method Not Allowed"}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": "ROMEO:", "truncate": 0}, "truncate"),  # 0 is not false
        ({"text": "ROMEO:", "top_k": "5"}, "top_k"),  # "5" is not a number
        ({"text": "ROMEO:", "layer": True}, "layer"),  # true is not 1
        ({"text": "ROMEO:", "layer": 1.5}, "layer"),
        ({"ids": [-1]}, "ids"),
        ({}, "text"),  # a prompt or ids
    ],
)
def test_a_body_is_validated_as_its_schema_says(client, body, field):
    r = client.post("/api/v1/forward", json=body)
    assert r.status_code == 422 and field in r.json()["detail"][0]["loc"], r.text


def test_json_numbers_stand_for_what_json_schema_allows(client):
    a = client.post("/api/v1/forward", json={"text": "ROMEO:", "layer": 1.0, "top_k": 3.0, "include": ["next_token"]})
    b = client.post("/api/v1/forward", json={"text": "ROMEO:", "layer": 1, "top_k": 3, "include": ["next_token"]})
    assert a.status_code == 200 and a.json() == b.json()
    r = client.post("/api/v1/next-token", json={"text": "ROMEO:", "temperature": 1})  # an integer for a float
    assert r.status_code == 200
