"""The registry of the forward trace's parts: each part declared once, here.

An entry names the part, says what it returns and means, which hooks it reads for a model and a
selection, which builder (stages.py) makes it, whether the loaded model has it, and which selection
changes make it stale. Everything else reads this tuple: `POST /api/v1/forward` runs the builders of
the parts asked for, the request's `include` enumeration and the answer's fields are made from it
(schemas/forward.py), and the forward page asks `GET /api/v1/forward/parts` for its list and its
dependencies. Adding a part is a builder in stages.py, one entry below and the JS panel that draws
it (static/js/forward/panel_*.js, in main.js's PANELS; docs/architecture.md: Adding a forward part).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gptscope.model.gpt import GPTConfig, hook_name

from .. import saes
from ..schemas.sae import SaeFeaturesBlock
from ..schemas.stages import (
    AttentionBlock,
    ClassifierBlock,
    Decomposition,
    EmbeddingsBlock,
    HeadDetail,
    LayerNormDetail,
    LogitLensBlock,
    MLPBlock,
    MoEBlock,
    NextToken,
    PromptLoss,
    ResidualBlock,
    RopeBlock,
)
from ..service import ModelService
from . import stages
from .stages import Selection

Hooks = Callable[[GPTConfig, Selection], Iterable[str]]
SELECTION_FIELDS = ("layer", "head", "position", "target")  # what the page can change without a new prompt


@dataclass(frozen=True)
class Part:
    name: str
    block: Any  # its type in the answer (the field of ForwardResponse of the same name)
    description: str
    hooks: Hooks  # the hook names its builder reads
    build: Callable[[stages.Trace], Any]
    applies: Callable[[ModelService], bool] = lambda service: True
    stale_on: tuple[str, ...] = ()  # SELECTION_FIELDS whose change makes it stale
    every_position: bool = False  # reads every position's logits, not only the selected one's


def each_layer(cfg: GPTConfig, *names: str) -> list[str]:
    return [hook_name(n, li) for li in range(cfg.n_layer) for n in names]


def at_layer(layer: int, *names: str) -> list[str]:
    return [hook_name(n, layer) for n in names]


def _streams(cfg: GPTConfig, sel: Selection) -> list[str]:
    return [hook_name("hook_resid_pre", 0), *each_layer(cfg, "hook_resid_post")]


def _components(cfg: GPTConfig, sel: Selection) -> list[str]:
    """What the residual stream is the sum of, and the final norm's scale: for splitting a logit."""
    return [
        "hook_embed",
        "hook_pos_embed",
        "ln_final.hook_scale",
        *each_layer(cfg, "attn.hook_result", "hook_attn_out", "hook_mlp_out"),
    ]


def _is_dense(s: ModelService) -> bool:
    return not s.model.cfg.n_expert


HEAD_HOOKS = ("hook_q", "hook_k", "hook_v", "hook_q_rot", "hook_k_rot", "hook_attn_scores", "hook_pattern")

PARTS: tuple[Part, ...] = (
    Part(
        "embeddings",
        EmbeddingsBlock,
        "each token's embedding row, its position's (learned positions only) and their sum, with norms",
        hooks=lambda cfg, sel: ["hook_embed", "hook_pos_embed"],
        build=stages.embeddings,
    ),
    Part(
        "attention",
        AttentionBlock,
        "attention weights [layer][head][query][key] of the requested layers and heads",
        hooks=lambda cfg, sel: [hook_name("attn.hook_pattern", li) for li in sel.layers],
        build=stages.attention,
    ),
    Part(
        "layernorm",
        LayerNormDetail,
        "the selected layer's first norm at the selected position, step by step",
        hooks=lambda cfg, sel: at_layer(
            sel.layer, "hook_resid_pre", "hook_resid_mid", "hook_attn_out", "ln1.hook_normalized"
        ),
        build=stages.layernorm,
        stale_on=("layer", "position"),
    ),
    Part(
        "head_detail",
        HeadDetail,
        "the selected head's queries, keys, values, scores, weights and output",
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
        MLPBlock,
        "the MLP's activation curve, every layer's pre-activation histogram and the selected layer's top "
        "neurons at the selected position (null for a mixture-of-experts model: see moe)",
        hooks=lambda cfg, sel: [*each_layer(cfg, "mlp.hook_pre"), hook_name("mlp.hook_post", sel.layer)],
        build=stages.mlp,
        applies=_is_dense,
        stale_on=("layer", "position"),
    ),
    Part(
        "residual",
        ResidualBlock,
        "the residual stream's norm at every position after the embedding and after each block",
        hooks=_streams,
        build=stages.residual,
    ),
    Part(
        "logit_lens",
        LogitLensBlock,
        "what each stage would predict: the final norm and the unembedding applied after every block",
        hooks=_streams,
        build=stages.logit_lens,
    ),
    Part(
        "next_token",
        list[NextToken],
        "top-k next tokens after the selected position",
        hooks=lambda cfg, sel: [],
        build=stages.next_token,
        stale_on=("position",),
    ),
    Part(
        "prompt_loss",
        PromptLoss,
        "the loss of each next token of the prompt, its mean and perplexity",
        hooks=lambda cfg, sel: [],
        build=stages.prompt_loss,
        every_position=True,
    ),
    Part(
        "decomposition",
        Decomposition,
        "the target's logit at the selected position split into what each head, MLP and the embedding wrote",
        hooks=_components,
        build=stages.decomposition,
        stale_on=("position", "target"),
        every_position=True,
    ),
    Part(
        "rope",
        RopeBlock,
        "RoPE models only: the selected head's rotation frequencies and angles, q and k before and after",
        hooks=lambda cfg, sel: at_layer(sel.layer, "attn.hook_q", "attn.hook_k", "attn.hook_q_rot", "attn.hook_k_rot"),
        build=stages.rope,
        applies=lambda s: s.model.cfg.pos == "rope",
        stale_on=("layer", "head", "position"),
    ),
    Part(
        "moe",
        MoEBlock,
        "mixture-of-experts models only: each layer's router probabilities, chosen experts and load",
        hooks=lambda cfg, sel: each_layer(cfg, "mlp.hook_router_probs", "mlp.hook_router_choice"),
        build=stages.moe,
        applies=lambda s: bool(s.model.cfg.n_expert),
    ),
    Part(
        "sae_features",
        SaeFeaturesBlock,
        "models with an SAE (GET /api/v1/saes) only: the SAE's features active at the selected position, "
        "and how many fire at every position",
        hooks=lambda cfg, sel: each_layer(cfg, "hook_resid_post"),
        build=stages.sae_features,
        applies=lambda s: bool(saes.listing(s)),
        stale_on=("position",),
    ),
    Part(
        "classifier",
        ClassifierBlock,
        "fine-tuned classifiers only (GET /api/v1/health: info.classifier; null for a language model): "
        "the label W_y reads at the last position",
        hooks=lambda cfg, sel: [*_components(cfg, sel), *each_layer(cfg, "attn.hook_pattern")],
        build=stages.classifier,
        applies=lambda s: s.classifier is not None,
        every_position=True,
    ),
)
NAMES: tuple[str, ...] = tuple(p.name for p in PARTS)
BY_NAME: dict[str, Part] = {p.name: p for p in PARTS}


def wanted(service: ModelService, names: Iterable[str]) -> list[Part]:
    """The parts asked for that the loaded model has, in the registry's order (the others stay null)."""
    asked = set(names)
    return [p for p in PARTS if p.name in asked and p.applies(service)]


def hooks_for(parts: Iterable[Part], cfg: GPTConfig, sel: Selection) -> set[str]:
    """Every hook the parts' builders read, and the final stream (the selected position's logits)."""
    names = {hook_name("hook_resid_post", cfg.n_layer - 1)}
    for p in parts:
        names.update(p.hooks(cfg, sel))
    return names
