from __future__ import annotations

from fastapi import APIRouter

from ..deps import Service
from ..explain import tokens
from ..schemas.common import ERROR_RESPONSES
from ..schemas.tokenize import TokenizeRequest, TokenizeResponse

router = APIRouter(tags=["tokenize"])


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERROR_RESPONSES,
             summary="Split a text into tokens: ids, exact bytes, character spans, pre-tokens")
def tokenize(req: TokenizeRequest, service: Service) -> TokenizeResponse:
    return tokens.tokenize(service, req.text, req.encoding, req.allow_special)
