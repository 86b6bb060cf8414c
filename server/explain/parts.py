"""How the forward trace's parts are made: each part registered once, here, against its answer.

What a part returns and means (its field, block type and description) is the answer's contract and
is declared in schemas/forward.py's PART_ANSWERS. An entry here names that part and says how it is
made: which hooks it reads for a model and a selection, which builder (stages.py) makes it, whether
the loaded model has it, and which selection changes make it stale. `POST /api/v1/forward` runs the
builders of the parts asked for, and the forward page asks `GET /api/v1/forward/parts` for the list
and its dependencies. Adding a part is its answer (schemas/forward.py), a builder in stages.py, one
entry below and the JS panel that draws it (static/js/forward/panel_*.js, in main.js's PANELS;
docs/architecture.md: Adding a forward part). Importing this module fails if an answer has no entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gptscope.model.gpt import GPTConfig, hook_name

from ..lenses import LENSES
from ..saes import SAES
from ..schemas.forward import PART_ANSWERS, PartAnswer
from ..service import ModelService
from . import overview, stages, switches
from .stages import Selection

Hooks = Callable[[GPTConfig, Selection], Iterable[str]]
SELECTION_FIELDS = ("layer", "head", "position", "target")  # what the page can change without a new prompt


@dataclass(frozen=True)
class Part:
    name: str  # a PartAnswer's name (schemas/forward.py): what it returns and means
    hooks: Hooks  # the hook names its builder reads
    build: Callable[[stages.Trace], Any]
    applies: Callable[[ModelService], bool] = lambda service: True
    stale_on: tuple[str, ...] = ()  # SELECTION_FIELDS whose change makes it stale
    every_position: bool = False  # reads every position's logits, not only the selected one's

    @property
    def description(self) -> str:
        return ANSWERS[self.name].description


def each_layer(cfg: GPTConfig, *names: str) -> list[str]:
    return [hook_name(n, li) for li in range(cfg.n_layer) for n in names]


def at_layer(layer: int, *names: str) -> list[str]:
    return [hook_name(n, layer) for n in names]


def _streams(cfg: GPTConfig, sel: Selection) -> list[str]:
    return [hook_name("hook_resid_pre", 0), *each_layer(cfg, "hook_resid_post"), "hook_x0", "hook_resid_final"]


def _components(cfg: GPTConfig, sel: Selection) -> list[str]:
    """What the residual stream is the sum of, and the final norm's scale: for splitting a logit
    (nanochat: x0 and the normalised embedding, to split off the smear; Gemma: x0, the scaled embedding;
    and the logits before the cap)."""
    return [
        "hook_embed",
        "hook_pos_embed",
        "hook_x0",
        "ln_embed.hook_normalized",
        "hook_logits_uncapped",
        "ln_final.hook_scale",
        *each_layer(cfg, "attn.hook_result", "hook_attn_out", "hook_mlp_out"),
    ]


def _extras(cfg: GPTConfig, sel: Selection) -> list[str]:
    """nanochat's stream: the embedding before and after the smear, each block's stream in and out,
    the value embeddings and their gates, the backout, the logits before the cap."""
    return [
        "hook_embed",
        "ln_embed.hook_normalized",
        "smear.hook_gate",
        "hook_x0",
        *each_layer(cfg, "hook_resid_pre", "hook_resid_post", "attn.hook_ve", "attn.hook_ve_gate", "attn.hook_v"),
        "hook_backout",
        "hook_resid_final",
        "hook_logits_uncapped",
    ]


def _is_dense(s: ModelService) -> bool:
    return not s.model.cfg.n_expert


HEAD_HOOKS = (
    "hook_q",
    "hook_k",
    "hook_v",
    "hook_q_rot",
    "hook_k_rot",
    "hook_attn_scores_uncapped",
    "hook_attn_scores",
    "hook_pattern",
)


def _nanochat_stream(s: ModelService) -> bool:
    """nanochat's stream pieces besides the softcap (a softcap alone, Gemma 2's, is the switches' part)."""
    return s.model.cfg.nanochat_stream


PARTS: tuple[Part, ...] = (
    Part(
        "overview",
        hooks=lambda cfg, sel: overview.hooks(cfg),
        build=overview.overview,
        stale_on=("position",),
    ),
    Part(
        "embeddings",
        hooks=lambda cfg, sel: ["hook_embed", "hook_pos_embed"],
        build=stages.embeddings,
    ),
    Part(
        "attention",
        hooks=lambda cfg, sel: [hook_name("attn.hook_pattern", li) for li in sel.layers],
        build=stages.attention,
    ),
    Part(
        "layernorm",
        hooks=lambda cfg, sel: at_layer(
            sel.layer, "hook_resid_pre", "hook_resid_mid", "hook_attn_out", "ln1.hook_normalized", "attn.hook_z"
        ),
        build=stages.layernorm,
        stale_on=("layer", "position"),
    ),
    Part(
        "head_detail",
        hooks=lambda cfg, sel: at_layer(
            sel.layer,
            *(f"attn.{h}" for h in (*HEAD_HOOKS, "hook_z", "hook_result")),
            "hook_resid_pre",
            "hook_attn_out",
            "hook_resid_mid",
        ),
        build=stages.head_detail,
        stale_on=("layer", "head", "position"),
    ),
    Part(
        "mlp",
        hooks=lambda cfg, sel: [*each_layer(cfg, "mlp.hook_pre"), hook_name("mlp.hook_post", sel.layer)],
        build=stages.mlp,
        applies=_is_dense,
        stale_on=("layer", "position"),
    ),
    Part(
        "residual",
        hooks=_streams,
        build=stages.residual,
    ),
    Part(
        "logit_lens",
        hooks=_streams,
        build=stages.logit_lens,
    ),
    Part(
        "tuned_lens",
        hooks=_streams,
        build=stages.tuned_lens,
        applies=lambda s: bool(LENSES.listing(s)),
    ),
    Part(
        "next_token",
        hooks=lambda cfg, sel: [],
        build=stages.next_token,
        stale_on=("position",),
    ),
    Part(
        "prompt_loss",
        hooks=lambda cfg, sel: [],
        build=stages.prompt_loss,
        every_position=True,
    ),
    Part(
        "decomposition",
        hooks=_components,
        build=stages.decomposition,
        stale_on=("position", "target"),
        every_position=True,
    ),
    Part(
        "rope",
        hooks=lambda cfg, sel: at_layer(sel.layer, "attn.hook_q", "attn.hook_k", "attn.hook_q_rot", "attn.hook_k_rot"),
        build=stages.rope,
        applies=lambda s: s.model.cfg.pos == "rope",
        stale_on=("layer", "head", "position"),
    ),
    Part(
        "moe",
        hooks=lambda cfg, sel: each_layer(cfg, "mlp.hook_router_probs", "mlp.hook_router_choice"),
        build=stages.moe,
        applies=lambda s: bool(s.model.cfg.n_expert),
    ),
    Part(
        "stream_extras",
        hooks=_extras,
        build=stages.stream_extras,
        applies=_nanochat_stream,
        stale_on=("position",),
        every_position=True,  # the softcap: the largest logit over the prompt
    ),
    Part(
        "block_switches",
        hooks=lambda cfg, sel: switches.hooks(cfg),
        build=switches.block_switches,
        applies=lambda s: bool(s.model.cfg.switches),
        stale_on=("layer", "head", "position"),
        every_position=True,  # the logits' softcap: the largest logit over the prompt
    ),
    Part(
        "sae_features",
        hooks=lambda cfg, sel: each_layer(cfg, "hook_resid_post"),
        build=stages.sae_features,
        applies=lambda s: bool(SAES.listing(s)),
        stale_on=("position",),
    ),
    Part(
        "classifier",
        hooks=lambda cfg, sel: [*_components(cfg, sel), *each_layer(cfg, "attn.hook_pattern")],
        build=stages.classifier,
        applies=lambda s: s.classifier is not None,
        every_position=True,
    ),
)
NAMES: tuple[str, ...] = tuple(p.name for p in PARTS)
BY_NAME: dict[str, Part] = {p.name: p for p in PARTS}
ANSWERS: dict[str, PartAnswer] = {a.name: a for a in PART_ANSWERS}
if tuple(ANSWERS) != NAMES:  # each declared answer is made one way, in the answer's order
    raise RuntimeError(f"forward parts {NAMES} do not match their answers {tuple(ANSWERS)} (schemas/forward.py)")


def wanted(service: ModelService, names: Iterable[str]) -> list[Part]:
    """The parts asked for that the loaded model has, in the registry's order (the others stay null)."""
    asked = set(names)
    return [p for p in PARTS if p.name in asked and p.applies(service)]


def hooks_for(parts: Iterable[Part], cfg: GPTConfig, sel: Selection) -> set[str]:
    """Every hook the parts' builders read, and the final stream (the selected position's logits)."""
    names = {hook_name("hook_resid_post", cfg.n_layer - 1), stages.final_stream(cfg)}
    for p in parts:
        names.update(p.hooks(cfg, sel))
    return names
