"""Tokens of a text: ids, exact bytes, character spans, pre-tokens."""

from __future__ import annotations

import regex

from gptscope.model.tokenizers import (
    PUBLIC_ENCODINGS,
    AnyEncoding,
    HFEncoding,
    UnknownCharacters,
    default_bos_ids,
    get_public_encoding,
)

from ..digits import COARSE
from ..errors import InputError
from ..schemas.common import TokenPiece
from ..schemas.tokenize import PreToken, TokenCounts, TokenizeResponse
from ..service import ModelService


def encoding_names() -> list[str]:
    return [*PUBLIC_ENCODINGS, "model"]


def resolve_encoding(service: ModelService, name: str, field: str = "encoding") -> AnyEncoding:
    if name == "model":
        return service.encoding
    if name in PUBLIC_ENCODINGS:
        return get_public_encoding(name)
    raise InputError(field, f"unknown encoding {name!r}; valid encodings: {', '.join(encoding_names())}")


def check_text(text: str, field: str = "text") -> None:
    """Lone surrogates (possible in JSON's \\ud800 escapes) are not text: refuse them clearly."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(field, f"contains an unpaired surrogate at character {e.start}; send valid Unicode") from None


def _byte_to_char(text: str) -> list[int]:
    """For every byte offset of text's UTF-8 (and one past the end), the index of its character."""
    out: list[int] = []
    for i, ch in enumerate(text):
        out.extend([i] * len(ch.encode("utf-8")))
    out.append(len(text))
    return out


def token_bytes(enc: AnyEncoding, tid: int) -> bytes:
    """One token's bytes; an id no token has (a model's vocabulary padded beyond its tokenizer's,
    as Qwen's is) stands for no bytes."""
    try:
        return enc.decode_single_token_bytes(tid)
    except KeyError:
        return b""


def _spells(enc: AnyEncoding, text: str, ids: list[int]) -> bool:
    """Whether ids are text's tokens: an imported tokenizer's own encoding, or exactly its bytes."""
    if isinstance(enc, HFEncoding):
        return enc.spans(text, ids) is not None
    return b"".join(token_bytes(enc, i) for i in ids) == text.encode("utf-8")


def token_pieces(enc: AnyEncoding, ids: list[int], text: str | None = None) -> list[TokenPiece]:
    """Pieces for ids; spans refer to `text` (the decoded ids when text is None). A beginning-of-text
    token the prompt was given (server/explain/common.py: bos_ids) covers none of the text."""
    lead = default_bos_ids(enc)
    if text is not None and lead and ids[: len(lead)] == lead:
        k = len(lead)
        if not _spells(enc, text, ids) and _spells(enc, text, ids[k:]):
            first = [p.model_copy(update={"start": 0, "end": 0}) for p in token_pieces(enc, ids[:k])]
            rest = token_pieces(enc, ids[k:], text)
            return first + [p.model_copy(update={"index": p.index + k}) for p in rest]
    raw = [token_bytes(enc, i) for i in ids]
    full = b"".join(raw)
    # an imported tokenizer's own offsets (its normaliser may change the text: SentencePiece's "▁")
    spans = enc.spans(text, ids) if isinstance(enc, HFEncoding) and text is not None else None
    if spans is not None:
        b2c = None
    elif text is None or text.encode("utf-8") != full:
        text = full.decode("utf-8", errors="replace")
        b2c = _byte_to_char(text) if text.encode("utf-8") == full else None
    else:
        b2c = _byte_to_char(text)
    specials = enc.special_tokens_set
    pieces, pos = [], 0
    for k, (tid, b) in enumerate(zip(ids, raw)):
        try:
            piece, ok = b.decode("utf-8"), True
        except UnicodeDecodeError:
            piece, ok = b.decode("utf-8", errors="replace"), False
        if spans is not None:
            start, end = spans[k]
        elif b2c is not None:
            start = b2c[pos]
            end_b = pos + len(b)
            end = b2c[end_b] if end_b == len(full) or b2c[end_b] != b2c[end_b - 1] else b2c[end_b] + 1
        else:
            start = end = 0
        pieces.append(
            TokenPiece(
                index=k,
                id=tid,
                text=piece,
                bytes_hex=b.hex(),
                valid_utf8=ok,
                start=start,
                end=end,
                special=piece in specials,
            )
        )
        pos += len(b)
    return pieces


def pretokens(enc: AnyEncoding, text: str, allow_special: bool) -> list[PreToken]:
    """The regex split of the encoding (special tokens, when allowed, are their own pieces); an
    imported tokenizer's own normaliser and pre-tokeniser (tokenizers' pieces, spans in the text)."""
    if isinstance(enc, HFEncoding):
        return [PreToken(text=text[a:b], start=a, end=b) for a, b, _ in enc.pretokenize(text, allow_special)]
    pat = regex.compile(enc._pat_str)
    out: list[PreToken] = []
    segments: list[tuple[int, str | PreToken]] = [(0, text)]  # (offset, text to split or a special token)
    if allow_special and enc.special_tokens_set:
        sp = regex.compile("|".join(regex.escape(s) for s in sorted(enc.special_tokens_set, key=len, reverse=True)))
        segments, last = [], 0
        for m in sp.finditer(text):
            segments.append((last, text[last : m.start()]))
            out_special = PreToken(text=m.group(), start=m.start(), end=m.end())
            segments.append((m.start(), out_special))
            last = m.end()
        segments.append((last, text[last:]))
    for offset, seg in segments:
        if isinstance(seg, PreToken):
            out.append(seg)
            continue
        for m in pat.finditer(seg):
            out.append(PreToken(text=m.group(), start=offset + m.start(), end=offset + m.end()))
    return out


def encode(
    enc: AnyEncoding, text: str, allow_special: bool = False, field: str = "text", where: str = "body"
) -> list[int]:
    """Token ids of a text; a character a character-level vocabulary lacks is a 422 naming the field."""
    try:
        if not allow_special:
            return enc.encode_ordinary(text)
        return enc.encode(text, allowed_special="all", disallowed_special=())
    except UnknownCharacters as e:
        raise InputError(field, str(e), where=where) from None


def tokenize(service: ModelService, text: str, encoding: str, allow_special: bool = False) -> TokenizeResponse:
    check_text(text)
    enc = resolve_encoding(service, encoding)
    ids = encode(enc, text, allow_special)
    n_bytes = len(text.encode("utf-8"))
    return TokenizeResponse(
        encoding=encoding,
        tokens=token_pieces(enc, ids, text),
        pretokens=pretokens(enc, text, allow_special),
        counts=TokenCounts(
            characters=len(text),
            bytes=n_bytes,
            tokens=len(ids),
            characters_per_token=round(len(text) / len(ids), COARSE) if ids else None,
        ),
    )
