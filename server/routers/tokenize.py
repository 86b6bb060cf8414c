from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from ..config import MAX_MERGES_PAGE, MAX_TEXT_CHARS
from ..deps import Service
from ..errors import InputError
from ..explain import merges as bpe
from ..explain import tokens
from ..schemas.common import ERROR_RESPONSES
from ..schemas.tokenize import (
    CompareRequest,
    CompareResponse,
    Encoding,
    EncodingsResponse,
    MergesRequest,
    MergesResponse,
    ModelMergesResponse,
    TokenInfo,
    TokenizeRequest,
    TokenizeResponse,
)

router = APIRouter(tags=["tokenize"])


def _in(where: str, fn, *args):
    """Run fn; an InputError names the query or path parameter (not a body field)."""
    try:
        return fn(*args)
    except InputError as e:
        e.where = where
        raise


@router.post(
    "/tokenize",
    response_model=TokenizeResponse,
    responses=ERROR_RESPONSES,
    summary="Split a text into tokens: ids, exact bytes, character spans, pre-tokens",
)
def tokenize(req: TokenizeRequest, service: Service) -> TokenizeResponse:
    return tokens.tokenize(service, req.text, req.encoding, req.allow_special)


@router.get(
    "/tokenize",
    response_model=TokenizeResponse,
    responses=ERROR_RESPONSES,
    summary="The same, for a text given in the URL (the tokenizer page's JSON twin)",
)
def tokenize_get(
    service: Service,
    text: Annotated[
        str,
        Query(
            max_length=MAX_TEXT_CHARS,
            description="the text; a long one goes in the "
            "POST body: the HTTP server refuses a request head over 16 KiB (a plain-text 400)",
        ),
    ] = "",
    encoding: Annotated[Encoding, Query(description="gpt2, cl100k_base, o200k_base or model")] = "gpt2",
    allow_special: bool = False,
) -> TokenizeResponse:
    return _in("query", tokens.tokenize, service, text, encoding, allow_special)


@router.get(
    "/encodings",
    response_model=EncodingsResponse,
    responses=ERROR_RESPONSES,
    summary="Every encoding: vocabulary size, special tokens, pre-token pattern ('model' is the loaded model's own)",
)
def encodings(service: Service) -> EncodingsResponse:
    return bpe.encodings(service)


@router.post(
    "/tokenize/merges",
    response_model=MergesResponse,
    responses=ERROR_RESPONSES,
    summary="BPE step by step: for each pre-token, every merge from single bytes to the final tokens, with its rank",
)
def merges(req: MergesRequest, service: Service) -> MergesResponse:
    return bpe.merges(service, req.text, req.encoding, req.allow_special)


@router.post(
    "/tokenize/compare",
    response_model=CompareResponse,
    responses=ERROR_RESPONSES,
    summary="One text under every encoding: token counts, and what each vocabulary costs in embedding parameters",
)
def compare(req: CompareRequest, service: Service) -> CompareResponse:
    return bpe.compare(service, req.text, req.d_model, req.allow_special, req.include_tokens)


@router.get(
    "/tokens/{encoding}/{id}",
    response_model=TokenInfo,
    responses=ERROR_RESPONSES,
    summary="One token: its bytes, its text, and the two tokens it was merged from",
)
def token(
    service: Service,
    encoding: Annotated[Encoding, Path(description="gpt2, cl100k_base, o200k_base or model")],
    id: Annotated[int, Path(description="the token id; out of range (or unassigned) is a 422")],
) -> TokenInfo:
    return _in("path", bpe.token_info, service, encoding, id)


@router.get(
    "/tokenizer/model/merges",
    response_model=ModelMergesResponse,
    responses={**ERROR_RESPONSES, 404: {"description": "the loaded model uses a public encoding: no merge record"}},
    summary="The loaded model's own BPE: its merges in the order learned, with the corpus pair count at each",
)
def model_merges(
    service: Service,
    offset: Annotated[int, Query(ge=0, description="first merge rank to return")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_MERGES_PAGE, description=f"at most {MAX_MERGES_PAGE}")] = 100,
) -> ModelMergesResponse:
    try:
        return bpe.model_merges(service, offset, limit)
    except bpe.NoTrainedTokenizer as e:
        raise HTTPException(404, str(e)) from None
