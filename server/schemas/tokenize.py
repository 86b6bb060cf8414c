from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..config import MAX_MERGES_PRETOKEN_BYTES, MAX_MERGES_TEXT_CHARS, MAX_TEXT_CHARS
from .common import StrictRequest, TokenPiece

Encoding = Literal["gpt2", "cl100k_base", "o200k_base", "model"]  # 'model': the loaded model's own tokenizer


class TokenizeRequest(StrictRequest):
    text: str = Field(
        max_length=MAX_TEXT_CHARS,
        description=f"any text, at most {MAX_TEXT_CHARS:,} characters; empty gives zero tokens",
        examples=["Every effort moves you"],
    )
    encoding: Encoding = Field(
        "gpt2", description="gpt2, cl100k_base, o200k_base, or 'model' for the loaded model's own tokenizer"
    )
    allow_special: bool = Field(
        False,
        description="treat '<|endoftext|>' and other special-token strings as special tokens; otherwise they are ordinary text",
    )


class PreToken(BaseModel):
    text: str
    start: int
    end: int


class TokenCounts(BaseModel):
    characters: int
    bytes: int
    tokens: int
    characters_per_token: float | None = Field(description="null for an empty text")


class TokenizeResponse(BaseModel):
    encoding: str
    tokens: list[TokenPiece]
    pretokens: list[PreToken] = Field(description="the regex split that BPE never merges across")
    counts: TokenCounts


# --- encodings ---------------------------------------------------------------------------------


class SpecialToken(BaseModel):
    text: str
    id: int


class EncodingInfo(BaseModel):
    name: str = Field(description="the name to pass as `encoding`")
    title: str = Field(description="who uses it, in a few words")
    vocab_size: int = Field(description="number of token ids (one past the largest id), special tokens included")
    mergeable_tokens: int = Field(
        description="tokens BPE can produce: the 256 single bytes plus one per learned merge (an imported "
        "tokenizer.json: every token that is not special)"
    )
    merges: int = Field(
        description="learned merges (mergeable tokens minus the 256 single bytes; an imported tokenizer.json: "
        "the length of its merge list)"
    )
    special_tokens: list[SpecialToken]
    unassigned_ids: int = Field(
        description="ids below vocab_size that name no token at all (neither mergeable nor special): "
        "vocab_size = mergeable_tokens + special tokens + unassigned_ids"
    )
    pattern: str = Field(
        description="the pre-token regular expression; BPE never merges across its matches (empty for a "
        "SentencePiece-style tokenizer.json, which splits no pre-tokens by a pattern)"
    )
    runs_as: str | None = Field(
        None,
        description="an imported Hugging Face tokenizer: how transformers 5 runs it, which gptscope follows "
        "(the class AutoTokenizer picks and what it rebuilds; where the beginning-of-text token comes from, "
        "and what transformers 4 did where it differs); null for the others",
    )


class EncodingsResponse(BaseModel):
    default: str = "gpt2"
    encodings: list[EncodingInfo]


# --- merges: BPE applied step by step ---------------------------------------------------------


class TokenBytes(BaseModel):
    """One vocabulary entry: id, exact bytes, and its text."""

    id: int
    text: str = Field(
        description="bytes decoded as UTF-8; U+FFFD stands in for bytes that are not valid UTF-8 on their own"
    )
    bytes_hex: str
    valid_utf8: bool
    special: bool = False


class MergesRequest(StrictRequest):
    text: str = Field(
        min_length=1,
        max_length=MAX_MERGES_TEXT_CHARS,
        description=f"1 to {MAX_MERGES_TEXT_CHARS:,} characters (the merge walk lists every intermediate step, so it "
        f"takes less text than /tokenize); empty text is a 422 naming `text`. Each pre-token may be "
        f"at most {MAX_MERGES_PRETOKEN_BYTES} bytes.",
        examples=[" uncharacteristically"],
    )
    encoding: Encoding = Field("gpt2", description="gpt2, cl100k_base, o200k_base, or 'model'")
    allow_special: bool = Field(False, description="as in /tokenize")


class MergeStep(BaseModel):
    step: int = Field(description="1 for the first merge applied to this pre-token")
    rank: int = Field(description="the merge's rank: lower ranks were learned earlier and are applied first")
    position: int = Field(description="index (in the pieces before this step) of the left piece that was merged")
    left: int = Field(description="id of the left piece")
    right: int = Field(description="id of the right piece")
    merged: int = Field(
        description="id of the new piece (tiktoken's encodings: its rank and id agree; an imported "
        "tokenizer.json numbers its merges apart from its ids)"
    )
    pieces: list[str] = Field(description="the pieces after this merge, as text (U+FFFD for partial characters)")
    piece_ids: list[int] = Field(description="the same pieces as token ids")


class PreTokenMerges(BaseModel):
    index: int
    text: str
    start: int = Field(description="first character of the text this pre-token covers")
    end: int
    special: bool = Field(description="a special token (only with allow_special): never split, no merges")
    bytes: list[str] = Field(description="the starting pieces: one per UTF-8 byte (U+FFFD for a partial character)")
    byte_ids: list[int] = Field(description="the token id of each single byte")
    steps: list[MergeStep]
    tokens: list[TokenPiece] = Field(
        description="the final tokens; equal to /tokenize's tokens for this stretch of text"
    )


class MergesCounts(BaseModel):
    pretokens: int
    bytes: int
    merges: int = Field(description="merge steps over all pre-tokens")
    tokens: int


class MergesResponse(BaseModel):
    encoding: str
    pretokens: list[PreTokenMerges]
    vocab: list[TokenBytes] = Field(description="every token id that appears in the steps, with its bytes and text")
    counts: MergesCounts


# --- compare: one text under every encoding ----------------------------------------------------


class CompareRequest(StrictRequest):
    text: str = Field(
        max_length=MAX_TEXT_CHARS,
        description=f"at most {MAX_TEXT_CHARS:,} characters; empty text gives zero tokens everywhere "
        "(the vocabulary costs are still reported)",
        examples=["The transformer unpacks unhelpful words into smaller pieces before processing them."],
    )
    d_model: int = Field(768, ge=1, le=65_536, description="embedding width for the parameter count (GPT-2 small: 768)")
    allow_special: bool = False
    include_tokens: bool = Field(True, description="list every encoding's tokens (false: counts only)")


class EncodingComparison(BaseModel):
    encoding: str
    title: str
    vocab_size: int
    counts: TokenCounts
    bytes_per_token: float | None = Field(description="null for an empty text")
    tokens_vs_fewest: float | None = Field(
        description="this encoding's token count divided by the smallest count here; null when a count is 0"
    )
    embedding_params: int = Field(
        description="vocab_size × d_model: the token embedding matrix (an untied output layer costs as much again)"
    )
    attention_scores: int = Field(
        description="tokens²: query-key scores one attention head computes for this text (the causal mask then hides about half)"
    )
    character_attention_ratio: float | None = Field(
        None,
        description="characters² / tokens²: how many times more attention "
        "scores a character-level model computes for the same text; null for 0 tokens",
    )
    tokens: list[TokenPiece] | None = None


class CharacterLevel(BaseModel):
    """The same text read one character per position, as a character-level model would."""

    positions: int = Field(description="one per character (code point)")
    attention_scores: int = Field(description="characters²: query-key scores per head")


class CompareResponse(BaseModel):
    characters: int
    character_level: CharacterLevel | None = Field(
        None, description="the character 'encoding': one position per character"
    )
    bytes: int
    d_model: int
    encodings: list[EncodingComparison]


# --- one token ----------------------------------------------------------------------------------


class TokenInfo(TokenBytes):
    encoding: str
    byte_values: list[int] = Field(description="the token's bytes as numbers 0-255")
    merged_from: list[int] | None = Field(
        None,
        description="the two ids whose merge made this token (the last step of BPE on its own bytes); null for single bytes and special tokens",
    )


# --- the loaded model's own tokenizer: its training, merge by merge -----------------------------


class ModelMerge(BaseModel):
    rank: int = Field(description="0 for the first merge learned")
    id: int = Field(description="the new token's id (256 + rank)")
    left: TokenBytes
    right: TokenBytes
    token: TokenBytes = Field(description="the new token")
    count: int = Field(
        description="how often the pair occurred in the training corpus (within pre-tokens) when it was merged"
    )


class ModelMergesResponse(BaseModel):
    encoding: str = "model"
    corpus: str
    pattern: str
    base_tokens: int = 256
    total: int = Field(description="number of merges the tokenizer learned")
    vocab_size: int
    special_tokens: list[SpecialToken]
    offset: int
    limit: int
    merges: list[ModelMerge]
