"""The tokenizer page (/tokenizer): a shell whose panels fetch /api/v1/tokenize, /tokenize/merges,
/tokenize/compare, /encodings and /tokenizer/model/merges. Its JSON twin is GET /api/v1/tokenize."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..deps import Service
from ..explain.tokens import encoding_names
from .pages import render

router = APIRouter(include_in_schema=False)

DEFAULT_TEXT = ("Every effort moves you forward, uncharacteristically.\n"
                "Naïve café owners say “héllo” 👋 in 2024!")


@router.get("/tokenizer", response_class=HTMLResponse)
def tokenizer_page(request: Request, service: Service) -> Response:
    q = request.query_params
    text = q.get("text", DEFAULT_TEXT)
    encoding = q.get("encoding") if q.get("encoding") in encoding_names() else "gpt2"
    params = {"text": text, "encoding": encoding}
    if q.get("allow_special") == "true":
        params["allow_special"] = "true"
    return render(request, service, "tokenizer.html", "tokenizer", f"/api/v1/tokenize?{urlencode(params)}",
                  text=text, encoding=encoding, encodings=encoding_names())
