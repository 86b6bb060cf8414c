"""Every caption the app serves is in its own words (issue #62): no run of six words of a served string
is a run of the seed texts, unless the string is a quote (a fact's `quote`, an example sentence the
text gives). Words are lower-cased letters and digits; a run counts only with at least four real words
(three letters or more), so that formulas (W_Q, W_K, W_V and W_O) and numbers do not."""

from __future__ import annotations

import re
import time

import pytest
from seedtext import SEEDS, text

pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed texts (../shared/seeds/) are not here")

RUN = 6
QUOTED = {"quote", "seed", "paper", "sentence", "text", "title", "reference", "source", "also", "who", "url"}


def words(s: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", s.lower())


def runs(ws: list[str]) -> set[tuple[str, ...]]:
    return {
        tuple(ws[i : i + RUN])
        for i in range(len(ws) - RUN + 1)
        if sum(len(w) >= 3 and w.isalpha() for w in ws[i : i + RUN]) >= 4
    }


def strings(x, key: str = ""):
    """(key, string) of every string in an answer, but those under a quote's key."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k not in QUOTED and not k.endswith("_source") and not k.endswith("_quote"):
                yield from strings(v, k)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v, key)
    elif isinstance(x, str):
        yield key, x


def get_answers(client) -> dict[str, object]:
    """Every GET of /api/v1 that needs no parameter, answered."""
    out = {}
    for path, ops in client.app.openapi()["paths"].items():
        get = ops.get("get")
        if not path.startswith("/api/v1") or "{" in path or not get:
            continue
        if any(p.get("required") for p in get.get("parameters", [])):
            continue
        r = client.get(path)
        if r.status_code == 200 and r.headers["content-type"].startswith("application/json"):
            out[path] = r.json()
    return out


def test_no_served_caption_copies_a_run_of_the_texts(client):
    seeds = set()
    for name in sorted(p.name for p in SEEDS.glob("*.txt")):
        seeds |= runs(words(text(name)))
    t0 = time.perf_counter()
    answers = get_answers(client)
    assert len(answers) > 20 and "/api/v1/genealogy" in answers, sorted(answers)
    copied = []
    for path, body in answers.items():
        for key, s in strings(body):
            shared = runs(words(s)) & seeds
            if shared:
                copied.append((path, key, s[:100], " ".join(sorted(shared)[0])))
    assert not copied, copied
    assert time.perf_counter() - t0 < 60
