"""The model at a glance: the loaded model's architecture drawn from its config (GET /api/v1/architecture)
and, for a prompt, the overview part of the forward trace (what each block wrote at the selected
position, which earlier tokens its heads read, and the walk's captions with this prompt's numbers).

Node ids are one vocabulary for the API and the forward page's diagram: "tokens", "embed", "pos",
"embed_norm", "smear", "block.{i}", "block.{i}.mix", "block.{i}.ln1", "block.{i}.attn",
"block.{i}.ln1_post", "block.{i}.ln2", "block.{i}.mlp", "block.{i}.ln2_post", "block.{i}.head.{h}",
"backout", "final_norm", "unembed", "softcap", "probs", "sample", and "tool.<stage>" for the page's
analyses that are no step of the pass (interventions, the self-check, input attribution, SAE features,
the embedding space)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import TokenPiece

NodeKind = Literal[
    "tokens",
    "embed",
    "pos",
    "norm",
    "smear",
    "mix",
    "attention",
    "mlp",
    "experts",
    "backout",
    "unembed",
    "softcap",
    "probs",
    "sample",
    "tool",
]


class ArchNode(BaseModel):
    id: str = Field(description="the node's id (this module's docstring lists them), e.g. block.2.attn")
    kind: NodeKind
    label: str = Field(description="its name in a few words, e.g. 'LayerNorm', 'attention', 'MLP (GELU)'")
    shape: str = Field(description="its shape from the config, e.g. 'T × 128', '4 heads × 32', '128 → 512 → 128'")
    stage: str = Field(description="the forward page's stage that shows it in detail (server/pages.py: STAGES)")
    note: str = Field(description="what it does, in one sentence")


class Branch(BaseModel):
    """One sublayer of a block (attention or the MLP) and the norms around it."""

    norm_in: ArchNode | None = Field(description="the norm the sublayer reads through (pre-norm; the sandwich's first)")
    op: ArchNode = Field(description="the attention, the MLP or the mixture of experts")
    norm_out: ArchNode | None = Field(
        description="a norm on its output before the add (Gemma 2's sandwich, OLMo 2's only norm)"
    )
    norm_after: ArchNode | None = Field(description="a norm on the stream after the add (GPT-1's post-norm)")


class ArchBlock(BaseModel):
    layer: int
    id: str = Field(description="block.{layer}")
    parallel: bool = Field(description="attention and the MLP both read the block's input, one add (GPT-NeoX)")
    mix: ArchNode | None = Field(description="nanochat: the block reads lambda_r x + lambda_0 x0")
    attention: Branch
    mlp: Branch
    n_head: int
    n_kv_head: int = Field(description="key/value heads: n_head / n_kv_head query heads share each one")
    d_head: int
    window: int = Field(description="each query sees its last `window` keys; 0: every earlier key")
    rope_base: float | None = Field(description="RoPE's base in this block (null without RoPE)")
    value_embed: bool = Field(description="nanochat: this block's values take in a value embedding")
    d_mlp: int
    mlp_kind: Literal["gelu", "swiglu", "geglu", "relu2"]
    n_expert: int = Field(description="experts (0: one dense MLP)")
    top_k_experts: int


class Architecture(BaseModel):
    family: str = Field(description="what the block is, in words: 'GPT-2', 'Llama', 'GPT-NeoX', 'Gemma 2', ...")
    d_model: int
    n_layer: int
    n_head: int
    n_kv_head: int
    d_head: int
    d_mlp: int
    vocab_size: int
    n_ctx: int
    params: int = Field(description="every trainable number (a tied matrix once)")
    head: list[ArchNode] = Field(description="before the blocks, in order: tokens, embed, pos (learned or RoPE), ...")
    blocks: list[ArchBlock]
    tail: list[ArchNode] = Field(description="after the blocks, in order: final_norm, unembed, ..., probs, sample")
    tools: list[ArchNode] = Field(description="the page's analyses that are no step of the pass")


class HeadRead(BaseModel):
    head: int
    write: float = Field(
        description="the norm of what this head wrote into the stream at the position: its z times its slice of W_O, "
        "no bias (a model with a norm on attention's output, Gemma 2's or OLMo 2's: before that norm)"
    )
    key: int = Field(description="the earlier position it weighs most")
    weight: float = Field(description="that attention weight")


class LayerLive(BaseModel):
    layer: int
    attn_write: float = Field(
        description="the norm of what attention added to the stream at the position (after the norm on its output "
        "where the model has one)"
    )
    mlp_write: float = Field(description="the norm of what the MLP (or the experts) added at the position")
    stream: float = Field(description="the norm of the stream leaving the block at the position")
    heads: list[HeadRead] = Field(description="every head, in order")
    strongest: list[int] = Field(description="the heads that wrote most, strongest first (at most 3)")
    experts: list[int] | None = Field(description="a mixture of experts: the experts chosen at the position")


class WalkStep(BaseModel):
    node: str = Field(description="the diagram's node it highlights")
    stage: str = Field(description="the stage it opens")
    title: str
    caption: str = Field(description="a few sentences with this prompt's numbers")


class OverviewBlock(BaseModel):
    position: int
    token: TokenPiece = Field(description="the token at the selected position")
    embed: float = Field(
        description="the norm of the stream entering block 0 at the position (nanochat's and Gemma's: the "
        "embedding stream x0)"
    )
    layers: list[LayerLive]
    final: float = Field(description="the norm of the stream the final norm reads at the position")
    walk: list[WalkStep] = Field(description="the walk from the text to the sampled token, 10 to 14 steps")
