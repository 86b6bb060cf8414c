"""How the forward trace's parts are made: each part registered once, here, against its answer.

What a part returns and means (its field, block type and description) is the answer's contract and
is declared in schemas/forward.py's PART_ANSWERS. An entry here names that part and says how it is
made: which hooks it reads for a model and a selection, which builder (stages.py) makes it, whether
the loaded model has it, and which selection changes make it stale. `POST /api/v1/forward` runs the
builders of the parts asked for, and the forward page asks `GET /api/v1/forward/parts` for the list
and its dependencies. Adding a part is its answer (schemas/forward.py), a builder in stages.py, one
entry below and the JS panel that draws it (static/js/forward/panel_*.js, in main.js's PANELS;
docs/architecture.md: Adding a forward part). Importing this module fails if an answer has no entry.

Each entry also says what its builder adds to the request's memory at its peak (`size`, a `Size`:
the numbers of its answer's arrays, the Python values it builds, its own working tensors), beyond
the hooks it reads; forward.py's `need` adds those up with the pass itself and the captured hooks,
so a trace is refused or waits for memory before it runs (server/memory.py).
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
FLOAT = 4  # bytes of a float32 activation
SAE_WIDTH = 32  # features per stream number of an SAE whose width is not known (SAELens' GPT-2 SAEs: 32)
SELECTION_FIELDS = ("layer", "head", "position", "target")  # what the page can change without a new prompt


@dataclass(frozen=True)
class Size:
    """What a part's builder adds to a trace's memory at its peak, beyond the hooks it reads: the
    numbers in its answer's arrays (`arrays`: sent from a tensor, server/schemas/arrays.py), the Python
    values it builds one by one (`values`: floats and ints in lists, each field of its small models),
    and its own working tensors (`work`, bytes)."""

    arrays: int = 0
    values: int = 0
    work: int = 0


Sizer = Callable[[ModelService, Selection, int], Size]  # (service, selection, T tokens) -> Size


def _small(service: ModelService, sel: Selection, T: int) -> Size:
    return Size(values=1000)


@dataclass(frozen=True)
class Part:
    name: str  # a PartAnswer's name (schemas/forward.py): what it returns and means
    hooks: Hooks  # the hook names its builder reads
    build: Callable[[stages.Trace], Any]
    applies: Callable[[ModelService], bool] = lambda service: True
    stale_on: tuple[str, ...] = ()  # SELECTION_FIELDS whose change makes it stale
    every_position: bool = False  # reads every position's logits, not only the selected one's
    size: Sizer = _small  # what its builder adds to the memory (Size), beyond its hooks

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


def keys_of(cfg: GPTConfig, T: int) -> int:
    """The (query, key) cells of one head's T x T map that an answer carries: a causal model's
    lower triangle, or the whole square."""
    return T * (T + 1) // 2 if cfg.causal else T * T


def _overview(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(values=cfg.n_layer * (cfg.n_head + 8) * 8 + 2000)


def _embeddings(s: ModelService, sel: Selection, T: int) -> Size:
    d = s.model.cfg.d_model
    return Size(arrays=3 * T * d + 2 * T, work=2 * T * d * FLOAT)


def _attention(s: ModelService, sel: Selection, T: int) -> Size:
    """The selected maps stacked (L x H x T x T) and their kept cells, [layer][head][query][key]."""
    maps = len(sel.layers) * len(sel.heads)
    return Size(arrays=maps * keys_of(s.model.cfg, T), work=maps * T * T * FLOAT)


def _head_detail(s: ModelService, sel: Selection, T: int) -> Size:
    """One head's scores, pattern (and scores before the cap) as arrays, its masked scores cell by cell
    as Python values, its q, k, v, z and result rows."""
    cfg = s.model.cfg
    maps = 3 if cfg.attn_softcap else 2
    return Size(arrays=maps * T * T + T * (4 * cfg.d_head + cfg.d_model), values=T * T + T, work=T * T * (FLOAT + 1))


def _mlp(s: ModelService, sel: Selection, T: int) -> Size:
    return Size(arrays=400, values=s.model.cfg.n_layer * 60, work=2 * T * s.model.cfg.d_mlp * FLOAT)


def _residual(s: ModelService, sel: Selection, T: int) -> Size:
    return Size(arrays=(s.model.cfg.n_layer + 2) * T, work=(s.model.cfg.n_layer + 2) * T * FLOAT)


def _lens(s: ModelService, sel: Selection, T: int) -> Size:
    """Every stage's log-probabilities (T x V each) kept at once, with one stage's logits and
    probabilities (and a float32 copy) beside them; LENS_K candidates (a small model each) and one
    number per stage and position."""
    cfg = s.model.cfg
    stages_ = cfg.n_layer + 2  # the streams (nanochat's backout: one more)
    return Size(values=stages_ * T * (6 * stages.LENS_K + 1), work=(stages_ + 4) * T * cfg.vocab_size * FLOAT)


def _next_token(s: ModelService, sel: Selection, T: int) -> Size:
    return Size(values=8 * sel.top_k, work=2 * s.model.cfg.vocab_size * FLOAT)


def _prompt_loss(s: ModelService, sel: Selection, T: int) -> Size:
    """The logits' log-probabilities (T x V, a float32 copy first), and a small model per position."""
    return Size(values=8 * T, work=2 * T * s.model.cfg.vocab_size * FLOAT)


def _decomposition(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(values=8 * cfg.n_layer * (cfg.n_head + 3) + 100, work=2 * T * cfg.d_model * FLOAT)


def _rope(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(arrays=T * (cfg.rotary // 2 + 4 * cfg.d_head), values=3 * T, work=4 * T * cfg.d_head * FLOAT)


def _moe(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(arrays=cfg.n_layer * T * cfg.n_expert, values=cfg.n_layer * T * cfg.top_k_experts)


def _stream_extras(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(arrays=(3 * cfg.n_layer + 8) * T + 400, values=cfg.n_layer * 10 + 100, work=4 * T * cfg.d_model * FLOAT)


def _switches(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(
        arrays=(2 * cfg.n_layer + 4) * T + 1000, values=cfg.n_layer * 20 + 200, work=T * T + 4 * T * cfg.d_model * FLOAT
    )


def _sae_features(s: ModelService, sel: Selection, T: int) -> Size:
    """The SAE's codes and pre-activations of every position (T x d_sae) and its reconstruction."""
    d = s.model.cfg.d_model
    try:
        width = SAES.get(s, sel.sae).sae.cfg.d_sae
    except Exception:  # (the part's builder names what is wrong with the SAE)
        width = SAE_WIDTH * d
    return Size(values=T + 200, work=(3 * width + 2 * d) * T * FLOAT)


def _classifier(s: ModelService, sel: Selection, T: int) -> Size:
    cfg = s.model.cfg
    return Size(values=2 * cfg.n_layer * cfg.n_head * T + 8 * cfg.n_layer * cfg.n_head + 100)


PARTS: tuple[Part, ...] = (
    Part(
        "overview",
        hooks=lambda cfg, sel: overview.hooks(cfg),
        build=overview.overview,
        size=_overview,
        stale_on=("position",),
    ),
    Part(
        "embeddings",
        hooks=lambda cfg, sel: ["hook_embed", "hook_pos_embed"],
        build=stages.embeddings,
        size=_embeddings,
    ),
    Part(
        "attention",
        hooks=lambda cfg, sel: [hook_name("attn.hook_pattern", li) for li in sel.layers],
        build=stages.attention,
        size=_attention,
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
        size=_head_detail,
        stale_on=("layer", "head", "position"),
    ),
    Part(
        "mlp",
        hooks=lambda cfg, sel: [*each_layer(cfg, "mlp.hook_pre"), hook_name("mlp.hook_post", sel.layer)],
        build=stages.mlp,
        size=_mlp,
        applies=_is_dense,
        stale_on=("layer", "position"),
    ),
    Part(
        "residual",
        hooks=_streams,
        build=stages.residual,
        size=_residual,
    ),
    Part(
        "logit_lens",
        hooks=_streams,
        build=stages.logit_lens,
        size=_lens,
    ),
    Part(
        "tuned_lens",
        hooks=_streams,
        build=stages.tuned_lens,
        size=_lens,
        applies=lambda s: bool(LENSES.listing(s)),
    ),
    Part(
        "next_token",
        hooks=lambda cfg, sel: [],
        build=stages.next_token,
        size=_next_token,
        stale_on=("position",),
    ),
    Part(
        "prompt_loss",
        hooks=lambda cfg, sel: [],
        build=stages.prompt_loss,
        size=_prompt_loss,
        every_position=True,
    ),
    Part(
        "decomposition",
        hooks=_components,
        build=stages.decomposition,
        size=_decomposition,
        stale_on=("position", "target"),
        every_position=True,
    ),
    Part(
        "rope",
        hooks=lambda cfg, sel: at_layer(sel.layer, "attn.hook_q", "attn.hook_k", "attn.hook_q_rot", "attn.hook_k_rot"),
        build=stages.rope,
        size=_rope,
        applies=lambda s: s.model.cfg.pos == "rope",
        stale_on=("layer", "head", "position"),
    ),
    Part(
        "moe",
        hooks=lambda cfg, sel: each_layer(cfg, "mlp.hook_router_probs", "mlp.hook_router_choice"),
        build=stages.moe,
        size=_moe,
        applies=lambda s: bool(s.model.cfg.n_expert),
    ),
    Part(
        "stream_extras",
        hooks=_extras,
        build=stages.stream_extras,
        size=_stream_extras,
        applies=_nanochat_stream,
        stale_on=("position",),
        every_position=True,  # the softcap: the largest logit over the prompt
    ),
    Part(
        "block_switches",
        hooks=lambda cfg, sel: switches.hooks(cfg),
        build=switches.block_switches,
        size=_switches,
        applies=lambda s: bool(s.model.cfg.switches),
        stale_on=("layer", "head", "position"),
        every_position=True,  # the logits' softcap: the largest logit over the prompt
    ),
    Part(
        "sae_features",
        hooks=lambda cfg, sel: each_layer(cfg, "hook_resid_post"),
        build=stages.sae_features,
        size=_sae_features,
        applies=lambda s: bool(SAES.listing(s)),
        stale_on=("position",),
    ),
    Part(
        "classifier",
        hooks=lambda cfg, sel: [*_components(cfg, sel), *each_layer(cfg, "attn.hook_pattern")],
        build=stages.classifier,
        size=_classifier,
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
