"""BPE made visible: the encodings, the merges applied step by step, one text under every
encoding, single tokens, and the built-in tokenizer's own training record.

The merge walk is tiktoken's algorithm written out in Python: start from the pre-token's single bytes,
then repeatedly merge the adjacent pair whose concatenation has the lowest rank (the leftmost such
pair on a tie) until no adjacent pair is a token. tests/test_tokenize.py checks that the final
pieces equal tiktoken's own encode for many texts. An imported tokenizer.json walks as `tokenizers`'
BPE does (`HFEncoding.merge_walk`: from its characters, the pair of lowest merge rank first), checked
against tokenizers' own encode in tests/test_import_llama.py.
"""

from __future__ import annotations

from collections.abc import Callable

import tiktoken

from gptscope.model import lessons as model_lessons
from gptscope.model.bpe import BPEMerges
from gptscope.model.tokenizers import AnyEncoding, CharEncoding, HFEncoding, lowest_rank_merges

from ..config import MAX_MERGES_PRETOKEN_BYTES
from ..digits import COARSE
from ..errors import InputError
from ..schemas.tokenize import (
    CharacterLevel,
    CompareResponse,
    EncodingComparison,
    EncodingInfo,
    EncodingsResponse,
    MergesCounts,
    MergesResponse,
    MergeStep,
    ModelMerge,
    ModelMergesResponse,
    PreToken,
    PreTokenMerges,
    SpecialToken,
    TokenBytes,
    TokenCounts,
    TokenInfo,
)
from ..service import ModelService, per_model
from . import tokens as tok

TITLES = {
    "gpt2": "GPT-2 (2019), reused by GPT-3",
    "cl100k_base": "GPT-3.5 and GPT-4",
    "o200k_base": "GPT-4o and later OpenAI models",
}


class NoTrainedTokenizer(LookupError):
    """The loaded model uses a public encoding, so there is no training record to show."""


def title(service: ModelService, name: str) -> str:
    if name == "model":
        corpus = (service.meta.corpus or {}).get("name", "its corpus")
        return f"this app's model, trained here on {corpus}"
    return TITLES.get(name, name)


def ranks(enc: tiktoken.Encoding) -> dict[bytes, int]:
    """Bytes -> rank of every mergeable token (tiktoken's ranks are also the token ids)."""
    return enc._mergeable_ranks


def _text(b: bytes) -> tuple[str, bool]:
    try:
        return b.decode("utf-8"), True
    except UnicodeDecodeError:
        return b.decode("utf-8", errors="replace"), False


def token_bytes(enc: AnyEncoding, token_id: int) -> TokenBytes:
    b = enc.decode_single_token_bytes(token_id)
    text, ok = _text(b)
    return TokenBytes(
        id=token_id, text=text, bytes_hex=b.hex(), valid_utf8=ok, special=token_id in enc._special_tokens.values()
    )


# --- the merge walk -----------------------------------------------------------------------------


def merge_steps(rank_of: dict[bytes, int], data: bytes) -> list[tuple[int, int, bytes, bytes, list[bytes]]]:
    """BPE on one pre-token's bytes: [(rank, position, left, right, pieces after), ...]; a pair's
    rank is the rank of the token its bytes make (tiktoken's rule)."""
    return lowest_rank_merges([data[i : i + 1] for i in range(len(data))], lambda a, b: rank_of.get(a + b))


def _check_pretoken_sizes(pre) -> None:
    for i, p in enumerate(pre):
        n = len(p.text.encode("utf-8"))
        if n > MAX_MERGES_PRETOKEN_BYTES:
            raise InputError(
                "text",
                f"pre-token {i} ({p.text[:24]!r}…) is {n:,} bytes; the merge walk takes pre-tokens of at "
                f"most {MAX_MERGES_PRETOKEN_BYTES} bytes (MAX_MERGES_PRETOKEN_BYTES); /tokenize has no such limit",
            )


def _as_steps(raw: list, id_of: Callable, show: Callable) -> list[MergeStep]:
    """A walk's raw steps (rank, position, left, right, pieces after) as MergeSteps, the pieces
    named by id_of (their ids) and show (their text)."""
    return [
        MergeStep(
            step=s,
            rank=rank,
            position=pos,
            left=id_of(left),
            right=id_of(right),
            merged=id_of(left + right),
            pieces=[show(a) for a in after],
            piece_ids=[id_of(a) for a in after],
        )
        for s, (rank, pos, left, right, after) in enumerate(raw, start=1)
    ]


def _walk(rank_of: dict[bytes, int], data: bytes, raw: list) -> tuple[list[str], list[int], list[MergeStep], list[int]]:
    """One pre-token's bytes, its merges as steps (from merge_steps' raw list) and its final ids."""
    single = [data[k : k + 1] for k in range(len(data))]
    steps = _as_steps(raw, rank_of.__getitem__, lambda b: _text(b)[0])
    final = raw[-1][4] if raw else single
    return [_text(b)[0] for b in single], [rank_of[b] for b in single], steps, [rank_of[f] for f in final]


def _hf_walk(enc: HFEncoding, piece: str) -> tuple[list[str], list[int], list[MergeStep], list[int]]:
    """`_walk` for an imported tokenizer.json: its first symbols (characters, or byte-fallback
    tokens), its merges by merge rank, and its final ids."""
    first, raw, final = enc.merge_walk(piece)
    vid = enc.vocab

    def show(symbol: str) -> str:
        return _text(enc.piece_bytes(symbol))[0]

    return (
        [show(b) for b in first],
        [vid[b] for b in first],
        _as_steps(raw, vid.__getitem__, show),
        [vid[f] for f in final],
    )


def _pieces_to_walk(enc: AnyEncoding, text: str, allow_special: bool) -> list[tuple[PreToken, str | bytes | None]]:
    """Each pre-token with what its walk starts from: its UTF-8 bytes (tiktoken), its piece in the
    vocabulary's alphabet (an imported tokenizer.json), or None for a special token matched whole."""
    pre: list[tuple[PreToken, str | bytes | None]]
    if isinstance(enc, HFEncoding):
        if not enc.walkable:
            raise InputError("encoding", f"the merge walk needs a BPE tokenizer; this model's is {enc.model_type}")
        pre = [
            (PreToken(text=text[a:b], start=a, end=b), piece) for a, b, piece in enc.pretokenize(text, allow_special)
        ]
        sizes = [PreToken(text=piece, start=p.start, end=p.end) for p, piece in pre if piece is not None]
    else:
        specials = enc._special_tokens if allow_special else {}
        pre = [
            (p, None if p.text in specials else p.text.encode("utf-8")) for p in tok.pretokens(enc, text, allow_special)
        ]
        sizes = [p for p, _ in pre]
    _check_pretoken_sizes(sizes)
    return pre


def _walk_one(
    enc: AnyEncoding, p: PreToken, data: str | bytes | None, cache: dict
) -> tuple[list[int], list, list, list]:
    """(ids, first pieces' texts, their ids, merge steps) of one pre-token."""
    if data is None:  # a special (or added) token, matched whole
        return enc.encode(p.text, allowed_special="all"), [], [], []
    if isinstance(enc, HFEncoding):
        if data not in cache:
            cache[data] = _hf_walk(enc, str(data))
        first, first_ids, hf_steps, hf_ids = cache[data]
        return hf_ids, first, first_ids, hf_steps
    data = data.encode("utf-8") if isinstance(data, str) else data
    rank_of = ranks(enc)
    if isinstance(enc, CharEncoding):  # one character, one token: nothing to merge
        return [rank_of[data]], [p.text], [rank_of[data]], []
    if data not in cache:
        cache[data] = merge_steps(rank_of, data)
    byte_strs, byte_ids, steps, ids = _walk(rank_of, data, cache[data])
    return ids, byte_strs, byte_ids, steps


def merges(service: ModelService, text: str, encoding: str, allow_special: bool = False) -> MergesResponse:
    tok.check_text(text)
    enc = tok.resolve_encoding(service, encoding)
    tok.encode(enc, text, allow_special)  # a character vocabulary refuses characters it lacks, naming them
    seen: set[int] = set()
    cache: dict = {}
    out: list[PreTokenMerges] = []
    n_bytes = n_steps = n_tokens = 0
    for i, (p, data) in enumerate(_pieces_to_walk(enc, text, allow_special)):
        n_bytes += len(p.text.encode("utf-8"))
        ids, byte_strs, byte_ids, steps = _walk_one(enc, p, data, cache)
        pieces = tok.token_pieces(enc, ids, p.text)
        seen.update(byte_ids, *(st.piece_ids for st in steps))
        for t in pieces:  # spans and positions relative to the whole text
            t.start += p.start
            t.end += p.start
            t.index += n_tokens
        seen.update(ids)
        n_steps += len(steps)
        n_tokens += len(ids)
        out.append(
            PreTokenMerges(
                index=i,
                text=p.text,
                start=p.start,
                end=p.end,
                special=data is None,
                bytes=byte_strs,
                byte_ids=byte_ids,
                steps=steps,
                tokens=pieces,
            )
        )
    return MergesResponse(
        encoding=encoding,
        pretokens=out,
        vocab=[token_bytes(enc, t) for t in sorted(seen)],
        counts=MergesCounts(pretokens=len(out), bytes=n_bytes, merges=n_steps, tokens=n_tokens),
    )


# --- the encodings, one token -----------------------------------------------------------------


def encoding_info(service: ModelService, name: str) -> EncodingInfo:
    enc = tok.resolve_encoding(service, name)
    specials = sorted(enc._special_tokens.items(), key=lambda x: x[1])
    if isinstance(enc, HFEncoding):  # its own vocabulary (special tokens may sit inside it) and merge list
        assigned = set(enc.vocab.values()) | set(enc.added.values())
        n_merge, merges_learned = len(assigned - {i for _, i in specials}), enc.n_merges
    else:
        n_merge = len(ranks(enc))
        merges_learned = 0 if isinstance(enc, CharEncoding) else n_merge - 256
    return EncodingInfo(
        name=name,
        title=title(service, name),
        vocab_size=enc.n_vocab,
        mergeable_tokens=n_merge,
        merges=merges_learned,
        special_tokens=[SpecialToken(text=t, id=i) for t, i in specials],
        unassigned_ids=enc.n_vocab - n_merge - len(specials),
        pattern=enc._pat_str,
        runs_as=f"{enc.runs.note}; {enc.bos_note}." if isinstance(enc, HFEncoding) else None,
    )


def encodings(service: ModelService) -> EncodingsResponse:
    return EncodingsResponse(encodings=[encoding_info(service, n) for n in tok.encoding_names()])


def token_info(service: ModelService, encoding: str, token_id: int) -> TokenInfo:
    enc = tok.resolve_encoding(service, encoding)
    if not 0 <= token_id < enc.n_vocab:
        raise InputError("id", f"{token_id} is out of range for {encoding}: ids run from 0 to {enc.n_vocab - 1}")
    try:
        base = token_bytes(enc, token_id)
    except KeyError:
        raise InputError("id", f"{token_id} is not assigned in {encoding}: no token has this id") from None
    b = bytes.fromhex(base.bytes_hex)
    merged_from = None
    if isinstance(enc, HFEncoding):
        piece = enc._by_id.get(token_id)
        if not base.special and piece is not None and enc.walkable:
            _first, steps_hf, final = enc.merge_walk(piece, take_whole=False)
            if steps_hf and final == [piece]:
                merged_from = [enc.vocab[steps_hf[-1][2]], enc.vocab[steps_hf[-1][3]]]
    elif not base.special and len(b) > 1 and not isinstance(enc, CharEncoding):
        steps = merge_steps(ranks(enc), b)
        if steps and steps[-1][4] == [b]:
            rank_of = ranks(enc)
            merged_from = [rank_of[steps[-1][2]], rank_of[steps[-1][3]]]
    return TokenInfo(**base.model_dump(), encoding=encoding, byte_values=list(b), merged_from=merged_from)


# --- one text, every encoding ------------------------------------------------------------------


def compare(
    service: ModelService, text: str, d_model: int, allow_special: bool = False, include_tokens: bool = True
) -> CompareResponse:
    tok.check_text(text)
    n_chars, n_bytes = len(text), len(text.encode("utf-8"))
    rows = []
    for name in tok.encoding_names():
        enc = tok.resolve_encoding(service, name)
        ids = tok.encode(enc, text, allow_special)
        rows.append((name, enc, ids))
    fewest = min(len(ids) for _, _, ids in rows)
    out = []
    for name, enc, ids in rows:
        n = len(ids)
        out.append(
            EncodingComparison(
                encoding=name,
                title=title(service, name),
                vocab_size=enc.n_vocab,
                counts=TokenCounts(
                    characters=n_chars,
                    bytes=n_bytes,
                    tokens=n,
                    characters_per_token=round(n_chars / n, COARSE) if n else None,
                ),
                bytes_per_token=round(n_bytes / n, COARSE) if n else None,
                tokens_vs_fewest=round(n / fewest, COARSE) if fewest else None,
                embedding_params=enc.n_vocab * d_model,
                attention_scores=model_lessons.attention_scores(n),
                character_attention_ratio=round(
                    model_lessons.attention_scores(n_chars) / model_lessons.attention_scores(n), COARSE
                )
                if n
                else None,
                tokens=tok.token_pieces(enc, ids, text) if include_tokens else None,
            )
        )
    chars = CharacterLevel(positions=n_chars, attention_scores=model_lessons.attention_scores(n_chars))
    return CompareResponse(characters=n_chars, character_level=chars, bytes=n_bytes, d_model=d_model, encodings=out)


# --- the built-in tokenizer's training record -------------------------------------------------


@per_model(maxsize=1)
def _trained(service: ModelService) -> BPEMerges:
    spec = service.meta.tokenizer or {}
    if spec.get("kind") == "huggingface":
        raise NoTrainedTokenizer(
            "the loaded model's tokenizer was imported with it (its tokenizer.json): it has merges but no record "
            "of training them here; the merge walk (/tokenize/merges) applies them"
        )
    if spec.get("kind") != "bpe":
        raise NoTrainedTokenizer(
            f"the loaded model uses the public encoding {spec.get('name')!r}; "
            "only a tokenizer trained here has a merge record"
        )
    return BPEMerges.from_dict(spec)


def model_merges(service: ModelService, offset: int, limit: int) -> ModelMergesResponse:
    bpe = _trained(service)
    table = bpe.token_bytes()
    specials = bpe.special_tokens

    def entry(i: int) -> TokenBytes:
        text, ok = _text(table[i])
        return TokenBytes(id=i, text=text, bytes_hex=table[i].hex(), valid_utf8=ok)

    page = []
    for rank in range(offset, min(offset + limit, len(bpe.merges))):
        a, b, count = bpe.merges[rank]
        page.append(
            ModelMerge(rank=rank, id=256 + rank, left=entry(a), right=entry(b), token=entry(256 + rank), count=count)
        )
    return ModelMergesResponse(
        corpus=str((service.meta.corpus or {}).get("name", "?")),
        pattern=bpe.pattern,
        total=len(bpe.merges),
        vocab_size=bpe.n_vocab,
        special_tokens=[SpecialToken(text=t, id=i) for t, i in specials.items()],
        offset=offset,
        limit=limit,
        merges=page,
    )
