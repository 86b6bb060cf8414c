"""The app's HTML pages and the forward page's stages, each declared once, here.

A page is a path, a template, a nav label and a JS folder (static/js/<name>/main.js, whose init()
base.html calls); its panels are the sections `<panel>-panel` of its template (and of the templates
it includes). routers/pages.py makes the routes from PAGES (a page with a data function of its own
there gets its URL state from it), base.html the nav, GET /api/v1/export its `page` and `panel`
choices, and the tests their lists.

A forward stage is one section of the forward page (templates/forward_<name>.html, the section
`<name>-panel`), in the order of STAGES: the numbered ones are numbered 1, 2, ... from that order,
and the stage bar lists them. Which stage draws which part of the trace (server/explain/parts.py's
PARTS) is said by its JS panels (static/js/forward/panel_*.js: `panel = { stage, parts, init, render }`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .config import TEMPLATES_DIR


@dataclass(frozen=True)
class Stage:
    name: str  # its section `<name>-panel`, in templates/forward_<name>.html
    nav: str  # its label in the stage bar
    title: str  # the stage bar's tooltip
    numbered: bool = True  # in the stage bar, numbered (the classifier's section is neither)

    @property
    def template(self) -> str:
        return f"forward_{self.name}.html"


STAGES: tuple[Stage, ...] = (
    Stage("classifier", "classifier", "the classifier's label", numbered=False),  # fine-tuned classifiers only
    Stage("tokens", "embeddings", "tokens → embeddings"),
    Stage("embedding-space", "space", "embedding space"),
    Stage("block", "block", "one block, step by step"),
    # imported families' block switches only (GPTConfig.switches): parallel, partial rotary, GeGLU, norms, softcaps, ...
    Stage("switches", "switches", "this family's block", numbered=False),
    Stage("attention", "attention", "attention overview"),
    Stage("mlp", "MLP", "MLP"),
    # nanochat's models only: the smear, the lambdas, the value embeddings, the backout, the softcap
    Stage("stream-extras", "nanochat", "nanochat's stream", numbered=False),
    Stage("residual", "residual", "residual stream, logit lens and tuned lens"),
    Stage("next", "sampling", "logits → probabilities"),
    Stage("generate", "generate", "generation, step by step"),
    Stage("intervene", "intervene", "interventions"),
    Stage("decomposition", "self-check", "self-check"),
    Stage("inputs", "inputs", "which input tokens the prediction came from"),
    Stage("sae-features", "features", "SAE features at the position"),
)
# the forward page's first screen, above the stages (its section `overview-panel`): the whole model,
# each node opening its stage; a JS panel draws in it as in a stage (`panel = { stage: "overview", ... }`)
OVERVIEW = "overview"
OVERVIEW_TEMPLATE = f"forward_{OVERVIEW}.html"
NUMBERED: tuple[Stage, ...] = tuple(s for s in STAGES if s.numbered)
STAGE_NO: dict[str, int] = {s.name: i for i, s in enumerate(NUMBERED, 1)}  # a stage's number on the page


@dataclass(frozen=True)
class Page:
    name: str  # its JS folder static/js/<name>/, the `active` nav entry, GET /api/v1/export's ?page=
    path: str
    template: str
    nav: str  # its label in the header's nav
    twin: str  # its JSON twin (the default one: a page with a data function may add the URL's state)
    includes: tuple[str, ...] = ()  # the templates it includes, which hold some of its panels

    @property
    def entry(self) -> str:
        return f"/static/js/{self.name}/main.js"


# in the nav's order
PAGES: tuple[Page, ...] = (
    Page(
        "forward",
        "/",
        "index.html",
        "Forward pass",
        "/api/v1/forward",
        (OVERVIEW_TEMPLATE, *(s.template for s in STAGES)),
    ),
    Page("tokenizer", "/tokenizer", "tokenizer.html", "Tokenizer", "/api/v1/tokenize"),
    Page("learn", "/learn", "learn.html", "Learning", "/api/v1/curves"),
    Page("train", "/train", "train.html", "Training", "/api/v1/checkpoints"),
    Page("timeline", "/timeline", "timeline.html", "Timeline", "/api/v1/timeline/runs"),
    Page("compare", "/compare", "compare.html", "Compare", "/api/v1/compare"),
    Page("patch", "/patch", "patch.html", "Patching", "/api/v1/patch/pairs"),
    Page("circuits", "/circuits", "circuits.html", "Circuits", "/api/v1/patch/pairs"),
    Page("attribution", "/attribution", "attribution.html", "Attribution", "/api/v1/transcoders"),
    Page("genealogy", "/genealogy", "genealogy.html", "The family tree", "/api/v1/genealogy"),
    Page("features", "/features", "features.html", "Features", "/api/v1/saes"),
)
PAGE_NAMES: tuple[str, ...] = tuple(p.name for p in PAGES)
BY_NAME: dict[str, Page] = {p.name: p for p in PAGES}

# a panel is a section `<section ... id="NAME-panel"`
PANEL = re.compile(r'<section[^>]*\bid="([a-z0-9-]+)-panel"')


@lru_cache
def panels(page: str) -> tuple[str, ...]:
    """The panels a page's templates have, in their order (a model may lack some: the page then says so)."""
    p = BY_NAME[page]
    text = "".join((TEMPLATES_DIR / t).read_text(encoding="utf-8") for t in (p.template, *p.includes))
    return tuple(PANEL.findall(text))
