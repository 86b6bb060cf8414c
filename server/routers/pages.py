"""HTML pages, made from their declaration (server/pages.py: PAGES). Each is a shell whose panels
fetch the same /api/v1 JSON a tool would; the response carries a Link header to that JSON twin
(rel="alternate"), and the page a <link rel="alternate"> to it. A page whose URL carries state has a
data function here (`@data("name")`): it reads the query and returns the twin and the template's
context; the others answer with their declared twin.

    /           the forward pass       twin: GET /api/v1/forward?text=...
    /tokenizer  BPE step by step       twin: GET /api/v1/tokenize?text=...&encoding=...
    /compare    two models, one text   twin: GET /api/v1/compare?a=...&b=...&text=...
    /patch      activation patching    twin: GET /api/v1/patch/pairs (the sweep itself is a POST)
    /circuits   edge circuits          twin: GET /api/v1/patch/pairs (the scores come from a POST)
    /attribution  attribution graphs   twin: GET /api/v1/transcoders (the graph comes from a POST)
    /train      training runs          twin: GET /api/v1/checkpoints (and the gradient clip's limit)
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from gptscope.model.train import TrainConfig

from ..config import STATIC_DIR, TEMPLATES_DIR
from ..deps import Service
from ..explain import patch_pairs
from ..explain.model_info import model_info
from ..explain.tokens import encoding_names
from ..pages import NUMBERED, PAGES, STAGE_NO, STAGES, Page
from ..schemas.attribution import AttributionRequest
from ..schemas.circuits import CircuitRequest
from ..service import ModelService

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
# what base.html's nav and the forward page's stages are made from
templates.env.globals.update(PAGES=PAGES, STAGES=STAGES, STAGE_NO=STAGE_NO, NUMBERED=NUMBERED)

# In the corpus's format (speaker line, then the speech), ending mid-line so the model's first
# guess is a word: the built-in model says " more" (Henry V, in the training split).
DEFAULT_PROMPT = "KING HENRY V:\nOnce more unto the breach, dear friends, once"
DEFAULT_TOKENIZER_TEXT = (
    "Every effort moves you forward, uncharacteristically.\nNaïve café owners say “héllo” 👋 in 2024!"
)


EMBED = re.compile(r"^[a-z0-9-]{1,40}$")

Data = Callable[[Request, ModelService], tuple[str, dict]]  # -> (the JSON twin, the template's context)
DATA: dict[str, Data] = {}


def data(page: str) -> Callable[[Data], Data]:
    """Registers `page`'s data function: its twin and its template's context from the request."""

    def register(fn: Data) -> Data:
        DATA[page] = fn
        return fn

    return register


def render(request: Request, service: Service, page: Page, twin: str, **context) -> Response:
    """A page shell with the loaded model's info, and a Link header to its JSON twin. `?embed=NAME`
    shows only the panel `NAME-panel`, without the header (gptscope.notebook puts it in an IFrame)."""
    embed = request.query_params.get("embed") or ""
    context["embed"] = embed if EMBED.fullmatch(embed) else None
    resp = templates.TemplateResponse(
        request,
        page.template,
        {"info": model_info(service), "active": page.name, "entry": page.entry, "twin": twin, **context},
    )
    resp.headers["Link"] = f'<{twin}>; rel="alternate"; type="application/json"'
    return resp


@data("forward")
def index(request: Request, service: ModelService) -> tuple[str, dict]:
    # a classifier's default is a test-half input framed by its special tokens, as it was trained to read
    classifier_example = (service.meta.classifier or {}).get("example") if service.classifier else None
    prompt = request.query_params.get("text") or classifier_example or DEFAULT_PROMPT
    return f"/api/v1/forward?{urlencode({'text': prompt})}", {"prompt": prompt}


@data("tokenizer")
def tokenizer_page(request: Request, service: ModelService) -> tuple[str, dict]:
    q = request.query_params
    text = q.get("text", DEFAULT_TOKENIZER_TEXT)
    encoding = q.get("encoding") if q.get("encoding") in encoding_names() else "gpt2"
    params = {"text": text, "encoding": encoding}
    if q.get("allow_special") == "true":
        params["allow_special"] = "true"
    context = {"text": text, "encoding": encoding, "encodings": encoding_names()}
    return f"/api/v1/tokenize?{urlencode(params)}", context


@data("train")
def train_page(request: Request, service: ModelService) -> tuple[str, dict]:
    # the limit the trainer clips the gradient's norm to (the page's runs use the trainer's default)
    return "/api/v1/checkpoints", {"grad_clip": TrainConfig.grad_clip}


@data("compare")
def compare_page(request: Request, service: ModelService) -> tuple[str, dict]:
    q = request.query_params
    params = {"a": q.get("a") or "builtin", "b": q.get("b") or "builtin", "text": q.get("text") or DEFAULT_PROMPT}
    for k in ("char", "layer", "head"):
        if (q.get(k) or "").isdigit():
            params[k] = q[k]
    return f"/api/v1/compare?{urlencode(params)}", params


def _pair_state(request: Request, service: ModelService) -> dict[str, str]:
    """The clean/corrupted pair and its metric from the URL (/patch, /circuits): the first ready-made
    pair, with its answer tokens, unless the URL names prompts of its own."""
    q = request.query_params
    first = patch_pairs.pairs(service)[:1]
    return {
        "clean": q.get("clean") or (first[0].clean if first else DEFAULT_PROMPT),
        "corrupted": q.get("corrupted") or (first[0].corrupted if first else DEFAULT_PROMPT),
        "metric": q.get("metric") if q.get("metric") in ("logit_diff", "logprob") else "logit_diff",
        "answer": q.get("answer") or (str(first[0].answer) if first and not q.get("clean") else ""),
        "wrong": q.get("wrong") or (str(first[0].wrong) if first and not q.get("clean") else ""),
    }


@data("patch")
def patch_page(request: Request, service: ModelService) -> tuple[str, dict]:
    q = request.query_params
    state = {
        **_pair_state(request, service),
        "direction": q.get("direction") if q.get("direction") in ("denoise", "noise") else "denoise",
        "heads": q.get("heads") or "",
        "cell": q.get("cell") or "",
    }
    return "/api/v1/patch/pairs", state


@data("circuits")
def circuits_page(request: Request, service: ModelService) -> tuple[str, dict]:
    # steps and target go to the form as written: a value out of range is the API's 422 to explain
    q = request.query_params
    fields = CircuitRequest.model_fields
    state = {
        **_pair_state(request, service),
        "steps": q.get("steps") or str(fields["steps"].default),
        "exact": q.get("exact") if q.get("exact") in ("all", "top") else "all",
        "rank_by": q.get("rank_by") if q.get("rank_by") in ("eap_ig", "atp", "exact") else fields["rank_by"].default,
        "target": q.get("target") or str(fields["target"].default),
    }
    return "/api/v1/patch/pairs", state


@data("attribution")
def attribution_page(request: Request, service: ModelService) -> tuple[str, dict]:
    # the form's fields from the URL (a value out of range is the API's 422 to explain): the prompt is
    # the first ready-made pair's clean one unless the URL names its own; the pins, supernodes and
    # interventions are read by the page's script from the same URL
    q = request.query_params
    first = patch_pairs.pairs(service)[:1]
    state = {
        "text": q.get("text") or (first[0].clean if first else DEFAULT_PROMPT),
        "token": q.get("token") or "",
        "wrong": q.get("wrong") or "",
        "node_threshold": q.get("node_threshold") or str(AttributionRequest.model_fields["node_threshold"].default),
        "transcoders": q.get("transcoders") or "",
    }
    return "/api/v1/transcoders", state


def _route(page: Page) -> None:
    fn = DATA.get(page.name, lambda request, service: (page.twin, {}))

    def endpoint(request: Request, service: Service) -> Response:
        twin, context = fn(request, service)
        return render(request, service, page, twin, **context)

    endpoint.__name__ = f"{page.name}_page"
    router.add_api_route(page.path, endpoint, methods=["GET"], response_class=HTMLResponse)


for _page in PAGES:
    _route(_page)


# Chrome's explicit compile hint (Chrome 136+; other browsers read a comment): compile every
# function of the file eagerly, on a background thread while it streams in, rather than each on the
# main thread when Plotly's start-up first calls it. A fresh page's Plotly task fell from about
# 2.2 s to 1.3 s on 2 busy cores.
COMPILE_HINT = b"//# allFunctionsCalledOnLoad\n"


@lru_cache(maxsize=1)
def _plotly_js() -> bytes:
    return COMPILE_HINT + (STATIC_DIR / "vendor" / "plotly-cartesian.min.js").read_bytes()


@lru_cache(maxsize=1)
def _plotly_js_gzipped() -> bytes:
    return gzip.compress(_plotly_js(), compresslevel=6, mtime=0)


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    """Plotly.js's cartesian bundle, vendored in static/vendor (its README says why that one): no
    CDN, works offline. Gzipped once (1.5 MB to 0.5 MB) rather than on each page load, and cached by
    the browser for a day (its compiled code with it, so the next page starts faster)."""
    headers = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"  # the compression middleware leaves an encoded answer alone
        return Response(_plotly_js_gzipped(), media_type="text/javascript", headers=headers)
    return Response(_plotly_js(), media_type="text/javascript", headers=headers)
