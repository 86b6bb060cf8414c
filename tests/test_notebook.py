"""gptscope inside Jupyter: examples/tour.ipynb runs top to bottom (so it cannot rot), its panels
are IFrames of the pages in embed mode, and the data functions return the API's own JSON."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest


@pytest.mark.slow  # runs the notebook in a fresh kernel
def test_the_tour_runs_top_to_bottom_and_shows_embedded_panels(executed_tour, tour_embeds):
    text = "".join(
        out.get("text", "")
        for cell in executed_tour.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )
    assert "the last token attends most to token" in text
    assert "422" in text and "layer" in text  # the bad layer came back as the API's detail
    srcs = tour_embeds
    pages = [(urlsplit(s).path, parse_qs(urlsplit(s).query)) for s in srcs]
    assert [p for p, _ in pages] == ["/tokenizer", "/", "/", "/learn", "/compare"]
    assert [q["embed"][0] for _, q in pages] == ["merges", "attention", "next", "loss", "chars"]
    attention = pages[1][1]
    assert attention["layer"] == ["1"] and attention["head"] == ["2"] and attention["text"][0].startswith("ROMEO:")
    assert all(urlsplit(s).hostname == "127.0.0.1" for s in srcs)


def test_embed_mode_shows_one_panel_without_the_header(client):
    whole = client.get("/", params={"text": "ROMEO:"}).text
    assert '<header class="topbar">' in whole and "data-embed" not in whole
    html = client.get("/", params={"text": "ROMEO:", "embed": "attention"}).text
    assert '<header class="topbar">' not in html and 'data-embed="attention"' in html
    assert "main > :not(#attention-panel) { display: none !important; }" in html
    bad = client.get("/", params={"embed": '"><script>alert(1)</script>'}).text  # not a panel name: ignored
    assert "<script>alert" not in bad and '<header class="topbar">' in bad


def test_trace_returns_the_api_json(client, monkeypatch):
    from gptscope import notebook

    calls = []

    def fake_api(method, path, payload=None, **query):
        calls.append((method, path, payload))
        r = client.request(method, "/api/v1" + path, json=payload)
        if r.status_code >= 400:
            raise notebook.ApiError(r.status_code, r.json()["detail"])
        return r.json()

    monkeypatch.setattr(notebook, "api", fake_api)
    got = notebook.trace("ROMEO:\nBut soft", include=["next_token"], top_k=3)
    assert (
        got
        == client.post(
            "/api/v1/forward", json={"text": "ROMEO:\nBut soft", "include": ["next_token"], "top_k": 3}
        ).json()
    )
    assert calls[0] == ("POST", "/forward", {"text": "ROMEO:\nBut soft", "top_k": 3, "include": ["next_token"]})
    with pytest.raises(notebook.ApiError) as e:
        notebook.trace("ROMEO:", layer=99)
    assert e.value.status == 422 and e.value.detail[0]["loc"] == ["body", "layer"]


def test_a_panel_name_that_the_page_lacks_is_refused_naming_the_panels(monkeypatch):
    from gptscope import notebook

    monkeypatch.setattr(notebook, "panels", lambda page: ["tokens", "attention"])
    monkeypatch.setattr(notebook, "_base_url", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="no panel 'atention'; its panels: tokens, attention"):
        notebook.url("forward", stage="atention")
    with pytest.raises(ValueError, match="unknown page 'forwards'"):
        notebook.url("forwards")
    assert (
        notebook.url("forward", stage="attention", text="a b", layer=1, truncate=True)
        == "http://127.0.0.1:1/?text=a+b&layer=1&truncate=true&embed=attention"
    )
