"""The tokenizer page (/tokenizer) in a real headless Chromium: every panel shows what the
/api/v1 tokenizer endpoints return for the same text, and the controls do what they say."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest

pytestmark = pytest.mark.browser

SENTENCE = "The transformer unpacks unhelpful words into smaller pieces before processing them."
TEXT = "Every effort moves you uncharacteristically.\n  Naïve café 👋 <|endoftext|>"


# An init script: the ids of the page's running intervals (setInterval not yet cleared). On this page
# only the step players start one, so an empty set means no player can step any more.
TRACK_INTERVALS = """(() => {
  const set = window.setInterval.bind(window), clear = window.clearInterval.bind(window);
  window.liveIntervals = new Set();
  window.setInterval = (...args) => { const id = set(...args); window.liveIntervals.add(id); return id; };
  window.clearInterval = (id) => { window.liveIntervals.delete(id); clear(id); };
})()"""


def visible(text: str) -> str:
    """Python twin of static/js/lib/format.js `visible`."""
    return text.replace(" ", "·").replace("\n", "↵").replace("\t", "→").replace("\r", "␍")


def label(t: dict) -> str:
    """Python twin of lib/tokens.js `tokenLabel` (text mode)."""
    if not t["valid_utf8"]:
        return " ".join(t["bytes_hex"][i : i + 2] for i in range(0, len(t["bytes_hex"]), 2))
    return visible(t["text"])


def api(page, live_url, path, **payload) -> dict:
    resp = page.request.post(f"{live_url}/api/v1{path}", data=payload)
    assert resp.ok, resp.text()
    return resp.json()


def wait_ready(page) -> None:
    page.wait_for_selector('body[data-ready="1"]', state="attached")


def wait_merges(page) -> None:
    page.wait_for_selector('body[data-merges-ready="1"]', state="attached")


def open_page(page, live_url, query: str = "") -> None:
    page.goto(f"{live_url}/tokenizer{query}")
    wait_ready(page)
    wait_merges(page)
    page.wait_for_selector('body[data-train-ready="1"]', state="attached")


def is_tokenize(r, text: str | None = None, encoding: str | None = None) -> bool:
    if not (r.url.endswith("/api/v1/tokenize") and r.request.method == "POST"):
        return False
    body = r.request.post_data_json or {}
    return (text is None or body.get("text") == text) and (encoding is None or body.get("encoding") == encoding)


def type_text(page, text: str) -> None:
    page.evaluate("delete document.body.dataset.ready")
    with page.expect_response(lambda r: is_tokenize(r, text=text)) as resp:
        page.fill("#text", text)
    assert resp.value.ok, resp.value.text()
    wait_ready(page)


def choose_encoding(page, name: str) -> None:
    page.evaluate("delete document.body.dataset.ready")
    with page.expect_response(lambda r: is_tokenize(r, encoding=name)) as resp:
        page.select_option("#encoding", name)
    assert resp.value.ok
    wait_ready(page)


def span_texts(page, sel="#tokens .tok") -> list[str]:
    return page.locator(sel).evaluate_all("els => els.map(e => e.textContent)")


def span_ids(page, sel="#tokens .tok") -> list[int]:
    return page.locator(sel).evaluate_all("els => els.map(e => +e.dataset.id)")


def merge_pieces(page) -> list[str]:
    return page.locator("#merge-pieces .piece-text").evaluate_all("els => els.map(e => e.textContent)")


def test_tokens_encodings_ids_merges_and_comparison(page, live_url):
    open_page(page, live_url)
    assert page.get_attribute('nav a[href="/tokenizer"]', "aria-current") == "page"

    # Typing: one span per token of POST /api/v1/tokenize, whitespace visible, counts from the API.
    type_text(page, TEXT)
    tok = api(page, live_url, "/tokenize", text=TEXT, encoding="gpt2")
    assert span_texts(page) == [label(t) for t in tok["tokens"]]
    assert span_ids(page) == [t["id"] for t in tok["tokens"]]
    assert "·effort" in span_texts(page) and any("↵" in s for s in span_texts(page))
    assert page.locator("#tokens .tok.partial").count() >= 1  # the emoji's bytes, split
    assert f"{tok['counts']['tokens']} tokens" in page.text_content("#token-counts")
    assert 50256 not in span_ids(page)  # typed <|endoftext|> is ordinary text ...
    page.evaluate("delete document.body.dataset.ready")
    page.check("#allow-special")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#tokens .tok')).some(e => e.dataset.id === '50256')"
    )
    wait_ready(page)
    page.uncheck("#allow-special")  # ... unless the reader allows special tokens
    page.wait_for_function(
        "() => !Array.from(document.querySelectorAll('#tokens .tok')).some(e => e.dataset.id === '50256')"
    )
    wait_ready(page)

    # Hover shows id, bytes and position.
    page.hover("#tokens .tok >> nth=1")
    info = page.text_content("#hover-info")
    t1 = tok["tokens"][1]
    assert (
        f"id {t1['id']}" in info
        and "20 65 66 66 6f 72 74" in info
        and f"characters {t1['start']} up to {t1['end']}" in info
    )

    # Pre-tokens: the API's split, as chips.
    chips = page.locator("#pretokens .pre").evaluate_all("els => els.map(e => e.dataset.text)")
    assert chips == [p["text"] for p in tok["pretokens"]]

    # Switching encoding re-tokenizes; the sentence is 15 tokens in o200k_base.
    type_text(page, SENTENCE)
    choose_encoding(page, "o200k_base")
    o200k = api(page, live_url, "/tokenize", text=SENTENCE, encoding="o200k_base")
    assert o200k["counts"]["tokens"] == 15
    assert span_ids(page) == [t["id"] for t in o200k["tokens"]]
    assert "15 tokens" in page.text_content("#token-counts")
    assert "200,019" in page.text_content("#encoding-info")

    # Toggle ids: the same spans show ids instead of text.
    page.check("#show-ids")
    assert span_texts(page) == [str(t["id"]) for t in o200k["tokens"]]
    page.uncheck("#show-ids")
    assert span_texts(page) == [label(t) for t in o200k["tokens"]]

    # The comparison table: one row per encoding, numbers from POST /api/v1/tokenize/compare.
    cmp = api(page, live_url, "/tokenize/compare", text=SENTENCE, d_model=768)
    rows = page.locator("#compare-table tbody tr")
    assert rows.evaluate_all("els => els.map(e => e.dataset.encoding)") == [
        "characters",
        "gpt2",
        "cl100k_base",
        "o200k_base",
        "model",
    ]
    assert page.locator("#compare-table tbody td.ntokens").evaluate_all("els => els.map(e => e.textContent)") == [
        f"{cmp['character_level']['positions']:,}",
        *(f"{e['counts']['tokens']:,}" for e in cmp["encodings"]),
    ]
    assert page.locator("#compare-table tbody td.params").evaluate_all("els => els.map(e => e.textContent)") == [
        "–",
        *(f"{e['embedding_params']:,}" for e in cmp["encodings"]),
    ]
    # the character "encoding": 83 positions, about 30 times the attention scores of 15 sub-word tokens
    assert cmp["character_level"] == {"positions": 83, "attention_scores": 83 * 83}
    assert page.locator("#compare-table tbody td.char-ratio").evaluate_all("els => els.map(e => e.textContent)") == [
        "–",
        *(f"× {e['character_attention_ratio']:.1f}" for e in cmp["encodings"]),
    ]
    assert page.text_content('#compare-table tr[data-encoding="o200k_base"] td.char-ratio') == "× 30.6"
    assert page.get_attribute("#compare-table tr.current", "data-encoding") == "o200k_base"
    blocks = page.locator("#compare-tokens .compare-block")
    assert blocks.count() == 4
    for i, e in enumerate(cmp["encodings"]):
        assert span_ids(page, f"#compare-tokens .compare-block:nth-child({i + 1}) .tok") == [
            t["id"] for t in e["tokens"]
        ]
    # A different width changes the parameter counts (from the API), not the token counts.
    page.evaluate("delete document.body.dataset.ready")
    with page.expect_response(
        lambda r: r.url.endswith("/tokenize/compare") and (r.request.post_data_json or {}).get("d_model") == 1024
    ):
        page.fill("#d-model", "1024")
    wait_ready(page)
    assert page.text_content('#compare-table tr[data-encoding="gpt2"] td.params') == f"{50257 * 1024:,}"

    # The URL carries the state; reloading it restores text, encoding and the id toggle.
    page.check("#show-ids")
    q = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
    assert q == {"text": SENTENCE, "encoding": "o200k_base", "ids": "1"}
    page.goto(page.url)
    wait_ready(page)
    assert page.input_value("#text") == SENTENCE and page.input_value("#encoding") == "o200k_base"
    assert span_texts(page) == [str(t["id"]) for t in o200k["tokens"]]
    assert page.console_errors == []


def test_merge_stepper_replays_uncharacteristically(page, live_url, screenshot):
    page.add_init_script(TRACK_INTERVALS)
    open_page(page, live_url)
    type_text(page, TEXT)
    merges = api(page, live_url, "/tokenize/merges", text=" uncharacteristically", encoding="gpt2")
    steps = merges["pretokens"][0]["steps"]

    # Clicking the pre-token loads its replay: 21 single bytes to start with.
    page.evaluate("delete document.body.dataset.mergesReady")
    page.click('#pretokens .pre[data-text=" uncharacteristically"]')
    wait_merges(page)
    assert page.input_value("#merge-word") == " uncharacteristically"
    assert merge_pieces(page) == list("·uncharacteristically")
    assert page.locator("#merge-steps li").count() == len(steps) == 18
    assert page.is_disabled("#merge-back")

    # One step applies the lowest-ranked merge.
    first = steps[0]["position"]
    assert page.locator("#merge-pieces .piece.next").evaluate_all("els => els.map(e => e.textContent)") == [
        merge_pieces(page)[first] + str(merges["pretokens"][0]["byte_ids"][first]),
        merge_pieces(page)[first + 1] + str(merges["pretokens"][0]["byte_ids"][first + 1]),
    ]
    page.click("#merge-step")
    assert page.get_attribute("#merge-pieces", "data-step") == "1"
    assert merge_pieces(page) == [visible(p) for p in steps[0]["pieces"]]
    assert f"rank {steps[0]['rank']:,}" in page.text_content("#merge-status")
    page.click("#merge-back")
    assert merge_pieces(page) == list("·uncharacteristically")

    # Play runs through the steps by itself; pause stops it.
    page.click("#merge-play")
    page.wait_for_function("() => +document.getElementById('merge-pieces').dataset.step >= 2")
    page.click("#merge-play")
    paused_at = int(page.get_attribute("#merge-pieces", "data-step"))
    page.wait_for_function("() => window.liveIntervals.size === 0")  # the player's timer is gone
    assert page.text_content("#merge-play") == "▶ Play"
    assert int(page.get_attribute("#merge-pieces", "data-step")) == paused_at

    # Clicking the last step shows the final tokens: ' un', 'character', 'istically'.
    page.click(f"#merge-steps li[data-step='{len(steps)}']")
    assert merge_pieces(page) == ["·un", "character", "istically"]
    assert page.locator("#merge-pieces .piece-id").evaluate_all("els => els.map(e => +e.textContent)") == [
        555,
        22769,
        16772,
    ]
    assert "18 of 18" in page.text_content("#merge-status") and page.is_disabled("#merge-step")
    assert page.locator("#merge-pieces .piece.next").count() == 0  # nothing left to merge
    assert page.locator("#merge-pieces .piece.made .piece-text").text_content() == "character"

    # The built-in tokenizer's training replay: the first merges with their corpus counts.
    record = page.request.get(f"{live_url}/api/v1/tokenizer/model/merges?offset=0&limit=50").json()
    rows = page.locator("#train-table tbody tr:not([hidden])")
    assert rows.count() == 10
    assert rows.evaluate_all("els => els.map(e => e.lastElementChild.textContent)") == [
        f"{m['count']:,}" for m in record["merges"][:10]
    ]
    page.click("#train-step")
    assert rows.count() == 11
    assert f"of {record['total']:,} merges" in page.text_content("#train-status")

    screenshot(page, "tokenizer")
    assert page.console_errors == []


def test_a_page_of_text_stays_quick_and_requests_stay_local(page, live_url):
    open_page(page, live_url)
    para = (
        "It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness; naïve tokens, 12345 numbers and émojis 🙂.\n"
    )
    text = para * 25  # about 3,700 characters
    n_before = sum(1 for u in page.requests if u.endswith("/api/v1/tokenize"))
    start = time.monotonic()
    page.evaluate("delete document.body.dataset.ready")
    # Typed in bursts faster than the debounce: the page asks for far fewer tokenizations than edits.
    for k in range(1, 11):
        page.fill("#text", text[: len(text) * k // 10])
    wait_ready(page)
    page.wait_for_function(
        "(n) => document.querySelectorAll('#tokens .tok').length === n",
        arg=api(page, live_url, "/tokenize", text=text, encoding="gpt2")["counts"]["tokens"],
    )
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"a page of text took {elapsed:.1f} s"
    n_calls = sum(1 for u in page.requests if u.endswith("/api/v1/tokenize")) - n_before
    assert n_calls <= 4, n_calls
    offsite = [u for u in page.requests if not u.startswith(live_url + "/")]
    assert offsite == []
    assert page.console_errors == []
