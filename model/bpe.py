"""Training a byte-level BPE tokenizer, the way GPT-2's was made, small enough for a laptop.

1. Split the text into pre-tokens with GPT-2's regular expression (words with their leading
   space, numbers, punctuation runs, whitespace). BPE never merges across a pre-token boundary.
2. Start from the 256 single bytes. Repeatedly count every adjacent pair of tokens inside the
   pre-tokens (weighted by how often each pre-token occurs) and merge the most frequent pair into
   a new token. Record the pair and its count at the time of the merge.

The result is a list of merges; token id 256 + i is merge i. `model.tokenizers` turns it into a
`tiktoken.Encoding` (rank = token id), so the trained tokenizer runs through the same library as
GPT-2's. Counts are kept so the app can show tokenizer training merge by merge.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import regex

from .errors import stop_if

# GPT-2's pre-tokenization pattern, as tiktoken writes it for r50k_base/gpt2.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"


@dataclass
class BPEMerges:
    pattern: str
    merges: list[tuple[int, int, int]]  # (left id, right id, pair count when merged)
    special_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def n_vocab(self) -> int:
        return 256 + len(self.merges) + len(self.special_tokens)

    def token_bytes(self) -> list[bytes]:
        """Bytes of every mergeable token, indexed by id."""
        out = [bytes([b]) for b in range(256)]
        for a, b, _ in self.merges:
            out.append(out[a] + out[b])
        return out

    def to_dict(self) -> dict:
        return {
            "kind": "bpe",
            "pattern": self.pattern,
            "merges": [list(m) for m in self.merges],
            "special_tokens": dict(self.special_tokens),
        }

    @classmethod
    def from_dict(cls, d: dict) -> BPEMerges:
        merges = [(int(a), int(b), int(n)) for a, b, n in d["merges"]]
        for i, (a, b, _) in enumerate(merges):
            if not (0 <= a < 256 + i and 0 <= b < 256 + i):
                raise ValueError(f"merge {i} refers to a token that does not exist yet")
        return cls(d["pattern"], merges, {str(k): int(v) for k, v in d.get("special_tokens", {}).items()})


CHUNK_CHARS = 1 << 18  # a long text is split or encoded this many characters at a time, for a prompt cancel


def pieces(text: str, size: int | None = None) -> list[str]:
    """text in pieces of about `size` characters, each cut just after a lone newline between two
    non-spaces. No pre-token spans such a cut: only a literal space may lead a word, and that newline
    is a whitespace run of its own (or, in cl100k_base's and o200k_base's patterns, the end of a run of
    punctuation), before a piece's end as before a non-space. So splitting each piece finds the same
    pre-tokens as splitting the whole, and encoding each the same token ids (tests/test_tokenizers.py)."""
    size = size or CHUNK_CHARS
    out, start = [], 0
    while len(text) - start > size:
        cut = _CUT.search(text, start + size)
        if cut is None:
            break
        out.append(text[start : cut.end()])
        start = cut.end()
    out.append(text[start:])
    return out


_CUT = regex.compile(r"(?<=\S)\n(?=\S)")


def _words(text: str, pattern: str, should_stop: Callable[[], bool] | None) -> tuple[list[list[int]], list[int]]:
    """text's distinct pre-tokens of two bytes or more, as byte lists, and how often each occurs."""
    counts: Counter[str] = Counter()
    for piece in pieces(text):
        stop_if(should_stop, "training the tokenizer, splitting the text")
        counts.update(regex.findall(pattern, piece))
    words: list[list[int]] = []
    freqs: list[int] = []
    for word, n in counts.items():
        ids = list(word.encode("utf-8"))
        if len(ids) > 1:
            words.append(ids)
            freqs.append(n)
    return words, freqs


def train_bpe(
    text: str,
    vocab_size: int,
    pattern: str = GPT2_PATTERN,
    special_tokens: tuple[str, ...] = (ENDOFTEXT,),
    should_stop: Callable[[], bool] | None = None,
) -> BPEMerges:
    """Learn vocab_size - 256 - len(special_tokens) merges from text. should_stop() returning True
    raises Cancelled between merges (a 2,048-token BPE of the plays takes seconds)."""
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges < 0:
        raise ValueError(f"vocab_size must be at least {256 + len(special_tokens)}")

    words, freqs = _words(text, pattern, should_stop)

    pair_count: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for w, (ids, n) in enumerate(zip(words, freqs)):
        for pair in itertools.pairwise(ids):
            pair_count[pair] += n
            where[pair].add(w)

    vocab = [bytes([b]) for b in range(256)]
    known = set(vocab)
    # max-heap by count; ties go to the pair whose bytes sort first, so training is deterministic
    heap = [(-c, vocab[a] + vocab[b], (a, b)) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges: list[tuple[int, int, int]] = []

    while len(merges) < n_merges and heap:
        if len(merges) % 32 == 0:
            stop_if(should_stop, f"training the tokenizer, at merge {len(merges)}")
        neg, _, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or -neg <= 0:
            continue  # stale heap entry
        a, b = pair
        new_bytes = vocab[a] + vocab[b]
        if new_bytes in known:
            pair_count[pair] = 0  # the same bytes already form a token: tiktoken needs them unique
            continue
        new_id = len(vocab)
        vocab.append(new_bytes)
        known.add(new_bytes)
        merges.append((a, b, -neg))

        touched: set[tuple[int, int]] = set()
        for w in list(where.pop(pair, ())):
            ids, n = words[w], freqs[w]
            if not any(x == a and y == b for x, y in itertools.pairwise(ids)):
                continue
            for p in itertools.pairwise(ids):
                pair_count[p] -= n
                touched.add(p)
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            words[w] = merged
            for p in itertools.pairwise(merged):
                pair_count[p] += n
                where[p].add(w)
                touched.add(p)
        pair_count.pop(pair, None)
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, vocab[p[0]] + vocab[p[1]], p))
            else:
                pair_count.pop(p, None)

    specials = {tok: 256 + len(merges) + i for i, tok in enumerate(special_tokens)}
    return BPEMerges(pattern, merges, specials)
