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
    assert "main > :not(#attention-panel):not(.export-note) { display: none !important; }" in html
    # the forward page's first screen, the model at a glance, is a panel too (show("forward", stage="overview"))
    html = client.get("/", params={"text": "ROMEO:", "embed": "overview"}).text
    assert 'data-embed="overview"' in html and 'id="overview-svg"' in html
    assert "main > :not(#overview-panel):not(.export-note) { display: none !important; }" in html
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
    # the model at a glance by its own name: the forward page's overview panel
    monkeypatch.setattr(notebook, "panels", lambda page: ["prompt", "overview", "tokens"])
    assert notebook.url("overview", text="a b") == notebook.url("forward", stage="overview", text="a b")
    assert notebook.url("overview", text="a b").endswith("/?text=a+b&embed=overview")


def test_embed_mode_is_static_where_the_browser_cannot_reach_the_kernels_loopback(monkeypatch):
    from gptscope import notebook

    for k in (*notebook.REMOTE_ENV, "GPTSCOPE_EMBED"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delitem(__import__("sys").modules, "google.colab", raising=False)
    assert notebook.embed_mode() == "live" and notebook.embed_mode("static") == "static"
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api")
    assert notebook.embed_mode() == "static" and notebook.embed_mode("live") == "live"
    monkeypatch.setenv("GPTSCOPE_EMBED", "live")
    assert notebook.embed_mode() == "live"
    with pytest.raises(ValueError, match="embed must be one of auto, live, static"):
        notebook.embed_mode("png")
    monkeypatch.setenv("GPTSCOPE_EMBED", "frame")
    with pytest.raises(ValueError, match="GPTSCOPE_EMBED must be one of"):
        notebook.embed_mode()


def test_static_panels_carry_plotly_once_per_notebook(monkeypatch):
    """The first static panel keeps the exported file's Plotly block, later ones leave it out (they
    take the one the first shares); each is a frame whose srcdoc is the file, naming its live page."""
    from gptscope import export, notebook

    doc = (
        '<!doctype html><body><script type="application/gzip" id="gptscope-bundle">QUJD</script>\n'
        '<script type="application/gzip" id="gptscope-plotly">UExPVExZ</script>\n<script>boot()</script></body>'
    )
    monkeypatch.setattr(export, "export_panel", lambda src, stage: doc)
    monkeypatch.setattr(notebook, "_plotly_shown", False)
    first = notebook.static_html("http://127.0.0.1:1/?text=a&embed=attention", "attention")
    second = notebook.static_html("http://127.0.0.1:1/learn?embed=gelu", "gelu", height=300)
    assert (
        first.startswith('<iframe class="gptscope-static"')
        and 'data-src="http://127.0.0.1:1/?text=a&amp;embed=attention"' in first
    )
    assert "UExPVExZ" in first and "UExPVExZ" not in second and "QUJD" in second and "height: 300px" in second
    assert html_unescape(second.split('srcdoc="')[1]).startswith("<!doctype html>")


def html_unescape(s: str) -> str:
    import html

    return html.unescape(s)


def test_export_refuses_an_unknown_page_or_panel_by_name(client):
    r = client.get("/api/v1/export", params={"page": "forwards", "panel": "attention"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "page"]
    r = client.get("/api/v1/export", params={"page": "forward"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "panel"]
    r = client.get("/api/v1/export", params={"page": "forward", "panel": "atention"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "panel"]
    assert "its panels: prompt, overview, classifier, tokens" in r.json()["detail"][0]["msg"]
