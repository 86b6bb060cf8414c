"""The model at a glance: its architecture drawn from the config (GET /api/v1/architecture) and the
forward trace's `overview` part, what each block wrote at the selected position, which earlier tokens
its heads read, and a walk from the text to the next token in plain words with this prompt's numbers
(its captions, written for a newcomer, follow the model's switches)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

from gptscope.model.gpt import GPTConfig, count_params, has_value_embed, layer_rope_base, layer_window
from gptscope.model.sampling import filter_logits

from ..digits import COARSE, FINE
from ..saes import SAES
from ..schemas.overview import (
    ArchBlock,
    Architecture,
    ArchNode,
    Branch,
    HeadRead,
    LayerLive,
    OverviewBlock,
    WalkStep,
)
from ..service import ModelService
from .common import rounded, token_text
from .stages import Trace, block, final_norm, final_stream
from .tokens import token_pieces

STRONGEST = 3  # the heads `strongest` lists at most
# an imported model's family as its importer recorded it (checkpoint.json's source.model_type)
HF_FAMILIES = {
    "gpt2": "GPT-2",
    "llama": "Llama",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "mistral": "Mistral",
    "gpt_neox": "GPT-NeoX",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3",
    "phi3": "Phi-3",
    "olmo2": "OLMo 2",
}
ACTIVATION = {"gelu": "GELU", "swiglu": "SwiGLU", "geglu": "GeGLU", "relu2": "ReLU²"}
ACTIVATION_NOTE = {
    "gelu": "widens each position's vector, applies GELU and narrows it back",
    "swiglu": "two widening projections, one through SiLU gating the other, then narrowed back",
    "geglu": "two widening projections, one through GELU gating the other, then narrowed back",
    "relu2": "widens each position's vector, applies ReLU squared and narrows it back",
}


def num(x: float) -> str:
    """A config number in words: 10000.0 as '10,000', 0.5 as '0.5'."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def root_of(cfg: GPTConfig) -> str:
    """', the square root of d' where the embedding's scale is that (Gemma's, rounded to its weights' precision)."""
    root = cfg.d_model**0.5
    return f", the square root of {cfg.d_model}" if abs(cfg.embed_scale - root) < 0.01 * root else ""


def norm_label(cfg: GPTConfig) -> str:
    return "RMSNorm" if cfg.norm_type == "rmsnorm" else "LayerNorm"


# ---- the family ---------------------------------------------------------------------------------


def family(cfg: GPTConfig, source: dict | None = None) -> str:
    """What the block is, in words: the importer's record where there is one, else read off the switches."""
    source = source or {}
    if source.get("kind") == "nanochat":
        return "nanochat"
    named = HF_FAMILIES.get(str(source.get("model_type")))
    if named:
        return named + (" with a mixture of experts" if cfg.n_expert else "")
    base = _family_of_switches(cfg)
    if source.get("kind") == "nanogpt" and base.startswith("GPT-2"):
        base = base.replace("GPT-2", "GPT-2 (nanoGPT)", 1)
    return base


def _family_of_switches(cfg: GPTConfig) -> str:
    named = (
        (cfg.nanochat_stream, "nanochat"),
        (cfg.norm == "post", "GPT-1 (post-norm)"),
        (bool(cfg.attn_softcap), "Gemma 2"),
        (bool(cfg.rope_local_base), "Gemma 3"),
        (cfg.norm == "out", "OLMo 2"),
        (cfg.parallel, "GPT-NeoX"),
        (cfg.mlp == "geglu" or cfg.embed_scale != 1.0, "Gemma"),
        (cfg.pos == "rope" and cfg.norm_type == "rmsnorm" and cfg.mlp == "swiglu", "Llama"),
    )
    base = next((name for on, name in named if on), "")
    changes = [] if base else _changes_from_gpt2(cfg)
    if cfg.n_expert:
        changes.append("a mixture of experts")
    return (base or "GPT-2") + (" with " + ", ".join(changes) if changes else "")


def _changes_from_gpt2(cfg: GPTConfig) -> list[str]:
    on = (
        (cfg.pos == "rope", "RoPE"),
        (cfg.pos == "none", "no positions"),
        (cfg.norm_type == "rmsnorm", "RMSNorm"),
        (cfg.mlp == "swiglu", "SwiGLU"),
        (cfg.mlp == "relu2", "ReLU²"),
        (cfg.norm == "both", "a sandwich norm"),
        (cfg.n_kv_head != cfg.n_head, "grouped-query attention"),
        (bool(cfg.window), "sliding windows"),
        (not cfg.causal, "no causal mask"),
    )
    return [words for flag, words in on if flag]


# ---- the architecture ---------------------------------------------------------------------------


def _norm(cfg: GPTConfig, node_id: str, stage: str, note: str) -> ArchNode:
    if not cfg.norm_gain:
        note += " (no gain: it only divides)"
    return ArchNode(id=node_id, kind="norm", label=norm_label(cfg), shape=str(cfg.d_model), stage=stage, note=note)


def _branch(cfg: GPTConfig, layer: int, op: ArchNode) -> Branch:
    """A sublayer with its norms where cfg.norm puts them, each under the module name its hooks use
    (model/gpt.py's Block: ln1/ln2 sit before the sublayer, on its output or after the add)."""
    n = "1" if op.kind == "attention" else "2"
    what = "attention" if op.kind == "attention" else "the MLP"
    own = f"block.{layer}.ln{n}"
    if cfg.norm == "pre":
        reads = "the block's input" if cfg.parallel else "the stream"
        return Branch(
            norm_in=_norm(cfg, own, "block", f"normalises {reads} before {what} reads it"),
            op=op,
            norm_out=None,
            norm_after=None,
        )
    if cfg.norm == "both":
        return Branch(
            norm_in=_norm(cfg, own, "block", f"normalises the stream before {what} reads it"),
            op=op,
            norm_out=_norm(cfg, f"{own}_post", "block", f"normalises {what}'s output before it is added"),
            norm_after=None,
        )
    if cfg.norm == "out":
        note = f"normalises {what}'s output before it is added ({what} reads the raw stream)"
        return Branch(norm_in=None, op=op, norm_out=_norm(cfg, own, "block", note), norm_after=None)
    note = f"normalises the stream after {what}'s output is added"
    return Branch(norm_in=None, op=op, norm_out=None, norm_after=_norm(cfg, own, "block", note))


def attention_node(cfg: GPTConfig, layer: int) -> ArchNode:
    nh, nkv, hs, w = cfg.n_head, cfg.n_kv_head, cfg.d_head, layer_window(cfg, layer)
    shape = f"{nh} heads × {hs}" + (f", {nkv} key/value head{'s' if nkv > 1 else ''}" if nkv != nh else "")
    if w:
        sees = f"each query sees its last {w} keys"
    else:
        sees = "each query sees every earlier key" if cfg.causal else "each query sees every key (no mask)"
    notes = [sees]
    if nkv != nh:
        notes.append(f"{nh // nkv} query heads share each key/value head")
    if cfg.qk_norm:
        notes.append("q and k normalised " + ("over every head at once" if cfg.qk_norm_all else "head by head"))
    if cfg.pos == "rope":
        notes.append(f"RoPE base {num(layer_rope_base(cfg, layer))}")
    if cfg.attn_softcap:
        notes.append(f"scores capped at ±{num(cfg.attn_softcap)}")
    if has_value_embed(cfg, layer):
        notes.append("its values take in a value embedding of the token")
    return ArchNode(
        id=f"block.{layer}.attn",
        kind="attention",
        label="attention",
        shape=shape,
        stage="attention",
        note="; ".join(notes),
    )


def mlp_node(cfg: GPTConfig, layer: int) -> ArchNode:
    d, dm, act = cfg.d_model, cfg.d_mlp, ACTIVATION[cfg.mlp]
    if cfg.n_expert:
        E, k = cfg.n_expert, cfg.top_k_experts
        return ArchNode(
            id=f"block.{layer}.mlp",
            kind="experts",
            label=f"{E} experts, top {k}",
            shape=f"{E} × ({d} → {dm} → {d})",
            stage="mlp",
            note=f"a router sends each token to {k} of {E} {act} MLPs and mixes their outputs by its probabilities",
        )
    return ArchNode(
        id=f"block.{layer}.mlp",
        kind="mlp",
        label=f"MLP ({act})",
        shape=f"{d} → {dm} → {d}",
        stage="mlp",
        note=ACTIVATION_NOTE[cfg.mlp],
    )


def arch_block(cfg: GPTConfig, layer: int) -> ArchBlock:
    mix = None
    if cfg.x0_mix:
        mix = ArchNode(
            id=f"block.{layer}.mix",
            kind="mix",
            label="x0 mix",
            shape="λ_r x + λ_0 x0",
            stage="stream-extras",
            note="the block reads its stream times a learned λ_r plus the embedding stream x0 times λ_0",
        )
    return ArchBlock(
        layer=layer,
        id=f"block.{layer}",
        parallel=cfg.parallel,
        mix=mix,
        attention=_branch(cfg, layer, attention_node(cfg, layer)),
        mlp=_branch(cfg, layer, mlp_node(cfg, layer)),
        n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head,
        d_head=cfg.d_head,
        window=layer_window(cfg, layer),
        rope_base=layer_rope_base(cfg, layer) if cfg.pos == "rope" else None,
        value_embed=has_value_embed(cfg, layer),
        d_mlp=cfg.d_mlp,
        mlp_kind=cfg.mlp,
        n_expert=cfg.n_expert,
        top_k_experts=cfg.top_k_experts if cfg.n_expert else 0,
    )


def _pos_node(cfg: GPTConfig) -> ArchNode | None:
    if cfg.pos == "learned":
        return ArchNode(
            id="pos",
            kind="pos",
            label="positions",
            shape=f"{cfg.n_ctx} × {cfg.d_model}",
            stage="tokens",
            note="row p of W_P is added to the token's row at position p",
        )
    if cfg.pos == "none":
        return None
    r, hs = cfg.rotary, cfg.d_head
    note = "no vector is added: inside attention q and k are turned by an angle that grows with the position"
    note += (
        f" (base {num(cfg.rope_base)}"
        + (f", {num(cfg.rope_local_base)} in the windowed layers" if cfg.rope_local_base else "")
        + ")"
    )
    if r != hs:
        note += f"; only the first {r} of each head's {hs} channels turn"
    shape = f"{r}/{hs} channels" if r != hs else f"{hs} channels"
    return ArchNode(id="pos", kind="pos", label="RoPE", shape=shape, stage="block", note=note)


def head_nodes(cfg: GPTConfig) -> list[ArchNode]:
    V, d = cfg.vocab_size, cfg.d_model
    embed_note = f"the token's id picks its row of W_E, {d} numbers"
    if cfg.embed_scale != 1.0:
        embed_note += f", times {cfg.embed_scale:.4g}{root_of(cfg)} as it enters the stream"
    nodes = [
        ArchNode(
            id="tokens",
            kind="tokens",
            label="tokens",
            shape=f"T ≤ {cfg.n_ctx}",
            stage="tokens",
            note=f"the text cut into T tokens of a {V:,}-token vocabulary, each an id",
        ),
        ArchNode(id="embed", kind="embed", label="embedding", shape=f"{V} × {d}", stage="tokens", note=embed_note),
    ]
    pos = _pos_node(cfg)
    if pos is not None:
        nodes.append(pos)
    if cfg.embed_norm:
        nodes.append(
            _norm(cfg, "embed_norm", "stream-extras", "normalises the token's embedding before anything reads it")
        )
    if cfg.smear:
        nodes.append(
            ArchNode(
                id="smear",
                kind="smear",
                label="smear",
                shape=f"gate on {cfg.smear} channels",
                stage="stream-extras",
                note="each position takes in a gated share of the previous position's embedding",
            )
        )
    return nodes


def tail_nodes(cfg: GPTConfig) -> list[ArchNode]:
    V, d, nodes = cfg.vocab_size, cfg.d_model, []
    if cfg.backout:
        nodes.append(
            ArchNode(
                id="backout",
                kind="backout",
                label="backout",
                shape=str(d),
                stage="stream-extras",
                note=f"subtracts a learned share of the stream after block {cfg.n_layer // 2} from the last stream",
            )
        )
    if cfg.norm != "post":  # a post-norm model's blocks end normalised: it has no final norm
        nodes.append(_norm(cfg, "final_norm", "residual", "normalises the last stream before the unembedding"))
    tied = "W_E transposed (tied: the embedding matrix again)" if cfg.tie_weights else "its own matrix W_U"
    nodes.append(
        ArchNode(
            id="unembed",
            kind="unembed",
            label="unembedding",
            shape=f"{d} × {V}",
            stage="next",
            note=f"one logit per vocabulary token: the final vector times {tied}",
        )
    )
    if cfg.softcap:
        c = num(cfg.softcap)
        nodes.append(
            ArchNode(
                id="softcap",
                kind="softcap",
                label="logit softcap",
                shape=f"{c}·tanh(z / {c})",
                stage="next",
                note=f"squeezes every logit into (−{c}, {c})",
            )
        )
    nodes += [
        ArchNode(
            id="probs",
            kind="probs",
            label="softmax",
            shape=str(V),
            stage="next",
            note="turns the logits into probabilities that add up to 1",
        ),
        ArchNode(
            id="sample",
            kind="sample",
            label="sampling",
            shape="1 token",
            stage="generate",
            note="temperature, top-k and top-p shape the distribution, then one token is drawn",
        ),
    ]
    return nodes


def tool_nodes(cfg: GPTConfig, n_saes: int) -> list[ArchNode]:
    L, nh = cfg.n_layer, cfg.n_head
    tools = [
        (
            "embedding-space",
            "embedding space",
            f"{cfg.vocab_size} × {cfg.d_model}",
            "where the tokens' rows of W_E lie: a projection and each token's nearest neighbours",
        ),
        (
            "intervene",
            "interventions",
            "heads, MLPs, tokens",
            "switch heads or MLPs off, or edit tokens, and compare with the unaltered run",
        ),
        (
            "decomposition",
            "self-check",
            f"{L * nh} heads + {L} MLPs",
            "the top logit split into what each head, MLP and the embedding wrote, which add up to it",
        ),
        ("inputs", "which inputs", "T tokens", "which input tokens the prediction came from"),
    ]
    if cfg.switches:  # an imported family's block: each of its switches in words
        tools.insert(
            0,
            (
                "switches",
                "this family's block",
                f"{len(cfg.switches)} switch{'es' if len(cfg.switches) > 1 else ''}",
                "what this family's block does differently, each switch in words with this prompt's numbers",
            ),
        )
    if n_saes:
        tools.append(
            (
                "sae-features",
                "SAE features",
                f"{n_saes} SAE{'s' if n_saes > 1 else ''}",
                "the features a sparse autoencoder finds active at the position",
            )
        )
    return [
        ArchNode(id=f"tool.{s}", kind="tool", label=lbl, shape=shape, stage=s, note=note)
        for s, lbl, shape, note in tools
    ]


def architecture_of(cfg: GPTConfig, source: dict | None = None, n_saes: int = 0) -> Architecture:
    """The architecture of a config (`source`: the checkpoint's record of where it came from)."""
    return Architecture(
        family=family(cfg, source),
        d_model=cfg.d_model,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head,
        d_head=cfg.d_head,
        d_mlp=cfg.d_mlp,
        vocab_size=cfg.vocab_size,
        n_ctx=cfg.n_ctx,
        params=count_params(cfg)["total"],
        head=head_nodes(cfg),
        blocks=[arch_block(cfg, i) for i in range(cfg.n_layer)],
        tail=tail_nodes(cfg),
        tools=tool_nodes(cfg, n_saes),
    )


def architecture(service: ModelService) -> Architecture:
    """GET /api/v1/architecture: the served model's."""
    return architecture_of(service.model.cfg, service.meta.source, len(SAES.listing(service)))


# ---- the live part ------------------------------------------------------------------------------


def hooks(cfg: GPTConfig) -> list[str]:
    """What the overview part reads: each block's writes, heads' z and patterns (never hook_result: T x nh
    x d per layer), the streams, and what the walk quotes."""
    per = ["hook_attn_out", "hook_mlp_out", "hook_resid_post", "attn.hook_z", "attn.hook_pattern"]
    per += ["mlp.hook_router_choice"] if cfg.n_expert else []
    names = [f"blocks.{i}.{n}" for i in range(cfg.n_layer) for n in per]
    return [*names, "blocks.0.hook_resid_pre", "blocks.0.ln1.hook_scale", *WALK_HOOKS, final_stream(cfg)]


def layer_live(t: Trace, layer: int) -> LayerLive:
    cfg, p = t.cfg, t.sel.position
    nh, hs = cfg.n_head, cfg.d_head
    z = t.act("attn.hook_z", layer)[p]  # (nh, hs)
    w_o = block(t.model, layer).attn.c_proj.weight.view(-1, nh, hs)  # (d, nh, hs): each head's columns of W_O
    writes = torch.einsum("hs,dhs->hd", z, w_o).norm(dim=-1)  # (nh,) no bias: that is attention's, not a head's
    best = t.act("attn.hook_pattern", layer)[:, p].max(dim=-1)  # (nh,) each head's strongest key at p
    order = torch.argsort(writes, descending=True, stable=True)[:STRONGEST]
    w, wt = rounded(writes, COARSE), rounded(best.values, COARSE)
    return LayerLive(
        layer=layer,
        attn_write=round(float(t.act("hook_attn_out", layer)[p].norm()), COARSE),
        mlp_write=round(float(t.act("hook_mlp_out", layer)[p].norm()), COARSE),
        stream=round(float(t.act("hook_resid_post", layer)[p].norm()), COARSE),
        heads=[HeadRead(head=h, write=w[h], key=int(best.indices[h]), weight=wt[h]) for h in range(nh)],
        strongest=[int(h) for h in order],
        experts=[int(e) for e in t.act("mlp.hook_router_choice", layer)[p]] if cfg.n_expert else None,
    )


def overview(t: Trace) -> OverviewBlock:
    """The forward trace's `overview` part at the selected position."""
    p = t.sel.position
    layers = [layer_live(t, li) for li in range(t.cfg.n_layer)]
    out = OverviewBlock(
        position=p,
        token=token_pieces(t.service.encoding, t.ids)[p],
        embed=round(float(t.streams[0][p].norm()), COARSE),
        layers=layers,
        final=round(float(t.act(final_stream(t.cfg))[p].norm()), COARSE),
        walk=[],
    )
    out.walk = walk(t, out)
    return out


# ---- the walk -----------------------------------------------------------------------------------

WALK_HOOKS = ("hook_embed", "hook_pos_embed", "hook_x0", "smear.hook_gate", "hook_backout")
ACTIVATION_WORDS = {
    "gelu": "GELU (large positive values pass, large negative ones are silenced, with a smooth bend between)",
    "swiglu": "SwiGLU (one widening projection, put through SiLU, gates a second one number by number)",
    "geglu": "GeGLU (one widening projection, put through GELU, gates a second one number by number)",
    "relu2": "ReLU squared (negative numbers become 0, positive ones are squared)",
}
SAMPLE_TEMPERATURE, SAMPLE_TOP_P = 0.8, 0.9  # the settings the sampling caption works out as examples


def shown(text: str) -> str:
    """A token's text in a caption: quoted, with newlines and tabs written as \\n and \\t."""
    return "'" + json.dumps(text, ensure_ascii=False)[1:-1] + "'"


def percent(p: float) -> str:
    """A probability as a caption writes it: 43.5%, or two significant digits where one decimal would read 0.0%."""
    s = f"{100 * p:.1f}"
    return f"{100 * p:.2g}%" if p > 0 and float(s) == 0 else f"{s}%"


def in_words(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass
class Facts:
    """What the walk's captions quote: the trace, its overview numbers and the selected position's logits."""

    t: Trace
    live: OverviewBlock
    logits: torch.Tensor  # (V,) at the selected position, as the model gives them (after any softcap)
    uncapped: torch.Tensor | None  # (V,) before the softcap (softcapped models only)

    @property
    def cfg(self) -> GPTConfig:
        return self.t.cfg

    @property
    def p(self) -> int:
        return self.t.sel.position

    def tok(self, position: int | None = None) -> str:
        return shown(token_text(self.t.service, self.t.ids[self.p if position is None else position]))

    def word(self, tid: int) -> str:
        return shown(token_text(self.t.service, tid))

    def at(self, name: str, layer: int | None = None) -> torch.Tensor:
        return self.t.act(name, layer)[self.p]

    def norm_at(self, name: str, layer: int | None = None) -> float:
        return round(float(self.at(name, layer).norm()), COARSE)

    @cached_property
    def top(self) -> list[tuple[int, float]]:
        """The two likeliest next tokens (id, probability at temperature 1)."""
        probs = torch.softmax(self.logits.float(), -1)
        best = torch.topk(probs, min(2, probs.numel()))
        return [(int(i), round(float(q), FINE)) for q, i in zip(best.values, best.indices)]


def _step(node: str, stage: str, title: str, caption: str) -> WalkStep:
    return WalkStep(node=node, stage=stage, title=title, caption=caption)


def _tokens(f: Facts) -> WalkStep:
    T, V = len(f.t.ids), f.cfg.vocab_size
    return _step(
        "tokens",
        "tokens",
        "Text into tokens",
        f"The tokenizer cut the text into {T} token{'s' if T != 1 else ''}, each an id from a vocabulary of {V:,}. "
        f"We follow position {f.p}, {f.tok()} (id {f.t.ids[f.p]}): from here on the model works with that id, "
        "never with the letters.",
    )


def _embed(f: Facts) -> WalkStep:
    cfg, tid, row = f.cfg, f.t.ids[f.p], f.norm_at("hook_embed")
    caption = (
        f"Id {tid} picks row {tid} of the embedding matrix W_E, which holds a learned row of {cfg.d_model} "
        f"numbers for each of the {cfg.vocab_size:,} tokens. This row, of length {row:.2f} (its norm), is where "
        f"{f.tok()} starts."
    )
    if cfg.embed_scale != 1.0:
        caption += (
            f" This model multiplies it by {cfg.embed_scale:.4g}{root_of(cfg)}, so it enters the stream at length "
            f"{row * cfg.embed_scale:.2f}."
        )
    return _step("embed", "tokens", "Looking up its vector", caption)


def _positions(f: Facts) -> WalkStep | None:
    cfg = f.cfg
    if cfg.pos == "learned":
        return _step(
            "pos",
            "tokens",
            "Adding its position",
            f"Attention on its own does not know where a token stands, so a second learned table, W_P, holds a row for each of the "
            f"{cfg.n_ctx} positions. Row {f.p} (length {f.norm_at('hook_pos_embed'):.2f}) is added to the token's "
            "row, and the sum is what the first block receives.",
        )
    if cfg.pos == "none":
        return None
    caption = (
        "No position vector is added here. Inside each attention layer, queries and keys are instead rotated by "
        f"angles that grow with their position (RoPE, base {num(cfg.rope_base)}), so where two tokens stand enters "
        "their score only through how far apart they are."
    )
    if cfg.rotary != cfg.d_head:
        hs, r = cfg.d_head, cfg.rotary
        caption += f" Only the first {r} of each head's {hs} channels rotate; the other {hs - r} carry content alone."
    if cfg.rope_local_base:
        caption += f" The windowed layers rotate with base {num(cfg.rope_local_base)}."
    return _step("pos", "block", "Positions by rotation", caption)


def _embedding_stream(f: Facts) -> WalkStep | None:
    cfg = f.cfg
    if not (cfg.smear or cfg.embed_norm):
        return None
    parts = []
    if cfg.embed_norm:
        gain = "" if cfg.norm_gain else ", one with no gain"
        parts.append(f"nanochat first normalises the row (an {norm_label(cfg)}{gain}).")
    if cfg.smear and f.p:
        gate = float(f.at("smear.hook_gate")[0])
        parts.append(
            f"Then the smear adds a gated share of the previous position's vector: here the gate is {gate:.3f}."
        )
    elif cfg.smear:
        parts.append("Then the smear would add a share of the previous position's vector, but position 0 has none.")
    if cfg.x0_mix:
        parts.append("The result, x0, is also kept aside: every block mixes some of it back into its input.")
    title = "Normalised and smeared" if cfg.smear else "Normalised"
    return _step("smear" if cfg.smear else "embed_norm", "stream-extras", title, " ".join(parts))


def _residual(f: Facts) -> WalkStep:
    cfg = f.cfg
    caption = (
        f"Each position now carries {cfg.d_model} numbers, the residual stream. At position {f.p} it enters "
        f"block 0 with length {f.live.embed:.2f}."
    )
    if cfg.norm == "post":
        caption += (
            f" Each of the {cfg.n_layer} blocks adds what it computes to this vector and then normalises the sum."
        )
    else:
        caption += (
            f" Each of the {cfg.n_layer} blocks reads this vector and adds what it computes to it, so every later "
            "block sees everything written before."
        )
    return _step("block.0", "residual", "The residual stream", caption)


def _norm_how(cfg: GPTConfig) -> str:
    if cfg.norm_type == "rmsnorm":
        then = ", then multiplies each number by a learned gain." if cfg.norm_gain else "; this one has no gain."
        return "An RMSNorm only divides the vector by its root mean square" + then
    shift = " and adds a learned shift" if cfg.bias else ""
    return (
        "A LayerNorm subtracts the vector's mean and divides by its spread (the standard deviation), then "
        f"multiplies each number by a learned gain{shift}."
    )


def _first_norm(f: Facts) -> WalkStep:
    cfg = f.cfg
    where = {
        "pre": "Block 0 first normalises the stream, and attention reads the result.",
        "both": "Block 0 normalises the stream before attention reads it, and normalises attention's output "
        "again before adding it (a sandwich).",
        "out": "Block 0 has no norm before attention: attention reads the raw stream, and a norm scales "
        "attention's output before it is added.",
        "post": "In this post-norm model the norm comes after the add: it normalises the stream plus "
        "attention's output.",
    }[cfg.norm]
    if cfg.parallel:
        where = "Block 0 normalises its input once for attention and, with a norm of its own, once for the MLP."
    scale = float(f.at("ln1.hook_scale", 0)[0])
    caption = f"{where} {_norm_how(cfg)} At position {f.p} it divides by {scale:.3f}."
    return _step("block.0.ln1", "block", f"{norm_label(cfg)} in block 0", caption)


def _attention(f: Facts) -> WalkStep:
    cfg, first = f.cfg, f.live.layers[0]
    nh, nkv, w = cfg.n_head, cfg.n_kv_head, layer_window(cfg, 0)
    if w:
        keys = f"the keys of the last {w} positions (its window)"
    else:
        keys = "the key of every earlier position and its own" if cfg.causal else "the key of every position"
    caption = (
        f"Block 0 has {nh} heads, each working with {cfg.d_head} numbers. A head compares the query at this "
        f"position with {keys}, turns the scores into weights that add up to 1 and takes the weighted sum of "
        "their values."
    )
    if nkv != nh:
        caption += f" The {nh} query heads share {nkv} key/value head{'s' if nkv > 1 else ''}, {nh // nkv} to each."
    if cfg.attn_softcap:
        caption += f" The scores are first capped at ±{num(cfg.attn_softcap)}."
    h = first.heads[first.strongest[0]]
    caption += (
        f" Head 0.{h.head}, the one that wrote most here, puts weight {h.weight:.2f} on {f.tok(h.key)} "
        f"at position {h.key}."
    )
    return _step("block.0.attn", "attention", "Attention in block 0", caption)


def _attention_write(f: Facts) -> WalkStep:
    cfg, first = f.cfg, f.live.layers[0]
    caption = f"W_O maps the heads' outputs back to {cfg.d_model} numbers: a vector of length {first.attn_write:.2f}"
    if cfg.norm in ("both", "out"):
        caption += " after the norm on attention's output."
    else:
        h = first.heads[first.strongest[0]]
        bias = " plus W_O's bias" if cfg.bias or cfg.attn_out_bias else ""
        caption += (
            f", the sum of what the {cfg.n_head} heads wrote{bias} (head 0.{h.head}'s part alone has length "
            f"{h.write:.2f})."
        )
    caption += (
        " The sum of stream and output is then normalised." if cfg.norm == "post" else " It is added to the stream."
    )
    if cfg.parallel:
        caption += (
            " In this parallel block the MLP reads the same input as attention, not the stream after it, and "
            "both outputs are added together."
        )
    return _step("block.0.attn", "block", "What attention adds", caption)


def _mlp(f: Facts) -> WalkStep:
    cfg, first = f.cfg, f.live.layers[0]
    d, dm = cfg.d_model, cfg.d_mlp
    if cfg.n_expert and first.experts is not None:
        chosen = in_words([str(e) for e in first.experts])
        k = len(first.experts)
        caption = (
            f"In place of one MLP this block has {cfg.n_expert} experts, each {d} → {dm} → {d} with "
            f"{ACTIVATION[cfg.mlp]}. A router chose expert{'s' if k > 1 else ''} {chosen} for this token; their "
            f"outputs, weighted by the router, add a vector of length {first.mlp_write:.2f}"
        )
        title = "The experts in block 0"
    else:
        caption = (
            f"Next the MLP works on each position on its own: it widens the {d} numbers to {dm}, applies "
            f"{ACTIVATION_WORDS[cfg.mlp]} and narrows them back to {d}. Here it adds a vector of length "
            f"{first.mlp_write:.2f}"
        )
        title = "The MLP in block 0"
    caption += f", and block 0's output has length {first.stream:.2f}."
    return _step("block.0.mlp", "mlp", title, caption)


def _other_blocks(f: Facts) -> WalkStep:
    cfg, layers = f.cfg, f.live.layers
    last = layers[-1].stream
    if cfg.n_layer == 1:
        return _step(
            "block.0",
            "residual",
            "The other blocks",
            f"This model has a single block, so the stream leaves it with length {last:.2f}.",
        )
    la = max(layers, key=lambda x: x.attn_write)
    lm = max(layers, key=lambda x: x.mlp_write)
    every = "Both" if cfg.n_layer == 2 else f"All {cfg.n_layer}"
    caption = (
        f"{every} blocks repeat these steps, each adding to the stream. At this position the biggest attention "
        f"write came from block {la.layer} (length {la.attn_write:.2f}) and the biggest MLP write from block "
        f"{lm.layer} (length {lm.mlp_write:.2f}). After block {cfg.n_layer - 1} the stream has length {last:.2f}."
    )
    if cfg.x0_mix:
        caption += " Before each block some of x0 is mixed back into its input."
    node = la.layer if la.attn_write >= lm.mlp_write else lm.layer
    return _step(f"block.{node}", "residual", "The other blocks", caption)


def _final_norm(f: Facts) -> WalkStep | None:
    cfg = f.cfg
    if cfg.norm == "post":
        return None
    caption = ""
    if cfg.backout:
        caption = (
            f"nanochat first subtracts a learned share of the stream after block {cfg.n_layer // 2} (the backout: "
            f"a vector of length {f.norm_at('hook_backout'):.2f} here). "
        )
    x = f.at(final_stream(cfg))  # (the final norm's own hooks hold only the last row when only its logits are made)
    x = x if cfg.norm_type == "rmsnorm" else x - x.mean()
    scale = float((x.pow(2).mean() + final_norm(f.t.model).eps).sqrt())
    caption += (
        f"A last {norm_label(cfg)} readies the stream for the output: it reads a vector of length "
        f"{f.live.final:.2f} and divides it by {scale:.3f}."
    )
    return _step("final_norm", "residual", "The final norm", caption)


def _unembed(f: Facts) -> WalkStep:
    cfg = f.cfg
    tid, _ = f.top[0]
    how = (
        "multiplying by W_E once more (the embedding matrix, transposed: the weights are tied)"
        if cfg.tie_weights
        else "multiplying by W_U, a matrix of its own (not tied to W_E),"
    )
    caption = (
        "This post-norm model has no final norm: every block already ends with one. " if cfg.norm == "post" else ""
    )
    caption += (
        f"Then {how} turns the {cfg.d_model} numbers into {cfg.vocab_size:,} logits, one score per token of the "
        f"vocabulary. The highest here is {float(f.logits[tid]):.2f}, for {f.word(tid)}."
    )
    if cfg.softcap and f.uncapped is not None:
        c = num(cfg.softcap)
        caption += (
            f" Before that, {c}·tanh(z / {c}) squeezes every logit into (−{c}, {c}): the top one was "
            f"{float(f.uncapped[tid]):.2f} before the cap."
        )
    return _step("unembed", "next", "A score for every token", caption)


def _probs(f: Facts) -> WalkStep:
    (a, pa), *rest = f.top
    caption = (
        "Softmax takes e to the power of each logit and divides by their total, so the scores become "
        f"probabilities that add up to 1. The model gives {f.word(a)} {percent(pa)}"
    )
    if rest:
        b, pb = rest[0]
        caption += f" and the runner-up, {f.word(b)}, {percent(pb)}"
    return _step("probs", "next", "Probabilities", caption + ".")


def _sampling(f: Facts) -> WalkStep:
    tid, _ = f.top[0]
    top = f.word(tid)
    warm = filter_logits(f.logits, SAMPLE_TEMPERATURE)
    nucleus = int(filter_logits(f.logits, 1.0, None, SAMPLE_TOP_P).kept.sum())
    caption = (
        f"To write text, one token is chosen from this distribution. Greedy decoding always takes the likeliest, "
        f"{top}. Sampling draws at random instead: dividing the logits by a temperature below 1 sharpens the odds "
        f"(at {SAMPLE_TEMPERATURE:g}, {top} would get {percent(float(warm.probs_temperature[tid]))}), top-k keeps only the "
        f"k likeliest tokens, and top-p keeps the smallest set whose probabilities reach p (at {SAMPLE_TOP_P:g}, "
        f"{nucleus:,} token{'s' if nucleus != 1 else ''}). The chosen token is appended and the model runs again."
    )
    return _step("sample", "generate", "Picking the next token", caption)


STEPS: tuple[Callable[[Facts], WalkStep | None], ...] = (
    _tokens,
    _embed,
    _positions,
    _embedding_stream,
    _residual,
    _first_norm,
    _attention,
    _attention_write,
    _mlp,
    _other_blocks,
    _final_norm,
    _unembed,
    _probs,
    _sampling,
)


def walk(t: Trace, live: OverviewBlock) -> list[WalkStep]:
    """The walk from the text to the next token, each step with this prompt's numbers (10 to 14 steps: the
    model's switches decide which are there)."""
    m, p = t.model, t.sel.position
    final = t.act(final_stream(t.cfg))[p : p + 1][None]  # (1, 1, d)
    uncapped = m.lm_head(m.ln_final(final))[0, 0] if t.cfg.softcap else None
    facts = Facts(t, live, t.at_position, uncapped)
    return [s for s in (step(facts) for step in STEPS) if s is not None]
