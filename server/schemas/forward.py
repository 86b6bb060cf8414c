"""The forward trace of a prompt, stage by stage. Each stage is optional: a tool asks only for
what it shows (`include`), and a selected layer / head / position narrows the detailed parts.

The parts' answers are declared once, in PART_ANSWERS below: each part's name, its block (a model in
stages.py) and its meaning make the request's `include` enumeration and the answer's fields. How each
part is made (its builder, the hooks it reads, when it applies) is registered against these names in
server/explain/parts.py, which checks that every answer has exactly one way to be made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from .common import (
    BOS_FIELD,
    GENERATION_PROMPT_FIELD,
    MAX_PROMPT_CHARS,
    ChatMessage,
    StrictRequest,
    TokenId,
    TokenPiece,
    messages_field,
)
from .lens import TunedLensBlock
from .overview import OverviewBlock
from .sae import SaeFeaturesBlock
from .stages import (
    AttentionBlock,
    BlockSwitchesBlock,
    ClassifierBlock,
    Decomposition,
    EmbeddingsBlock,
    HeadDetail,
    LayerNormDetail,
    LogitLensBlock,  # also the answer of POST /api/v1/logit-lens
    MLPBlock,
    MoEBlock,
    NextToken,
    PromptLoss,
    ResidualBlock,
    RopeBlock,
    StreamExtrasBlock,
)


@dataclass(frozen=True)
class PartAnswer:
    """One part of the forward trace as the answer shows it: its field, its type and its meaning."""

    name: str
    block: Any  # its type in the answer (the field of ForwardResponse of the same name)
    description: str


PART_ANSWERS: tuple[PartAnswer, ...] = (
    PartAnswer(
        "overview",
        OverviewBlock,
        "the model at a glance at the selected position: what each block's attention, heads and MLP wrote, "
        "which earlier token each head weighs most, and a walk from the text to the next token in plain words "
        "with this prompt's numbers (the diagram's nodes: GET /api/v1/architecture)",
    ),
    PartAnswer(
        "embeddings",
        EmbeddingsBlock,
        "each token's embedding row, its position's (learned positions only) and their sum, with norms",
    ),
    PartAnswer(
        "attention",
        AttentionBlock,
        "attention weights [layer][head][query][key] of the requested layers and heads",
    ),
    PartAnswer(
        "layernorm",
        LayerNormDetail,
        "the selected layer's first norm at the selected position, step by step",
    ),
    PartAnswer(
        "head_detail",
        HeadDetail,
        "the selected head's queries, keys, values, scores, weights and output",
    ),
    PartAnswer(
        "mlp",
        MLPBlock,
        "the MLP's activation curve, every layer's pre-activation histogram and the selected layer's top "
        "neurons at the selected position (null for a mixture-of-experts model: see moe)",
    ),
    PartAnswer(
        "residual",
        ResidualBlock,
        "the residual stream's norm at every position after the embedding and after each block",
    ),
    PartAnswer(
        "logit_lens",
        LogitLensBlock,
        "what each stage would predict: the final norm and the unembedding applied after every block",
    ),
    PartAnswer(
        "tuned_lens",
        TunedLensBlock,
        "models with a tuned lens (GET /api/v1/lenses) only: the logit lens read through the lens's learned "
        "translators (one affine map per stage), with both lenses' figures on held-out text",
    ),
    PartAnswer(
        "next_token",
        list[NextToken],
        "top-k next tokens after the selected position",
    ),
    PartAnswer(
        "prompt_loss",
        PromptLoss,
        "the loss of each next token of the prompt, its mean and perplexity",
    ),
    PartAnswer(
        "decomposition",
        Decomposition,
        "the target's logit at the selected position split into what each head, MLP and the embedding wrote",
    ),
    PartAnswer(
        "rope",
        RopeBlock,
        "RoPE models only: the selected head's rotation frequencies and angles, q and k before and after",
    ),
    PartAnswer(
        "moe",
        MoEBlock,
        "mixture-of-experts models only: each layer's router probabilities, chosen experts and load",
    ),
    PartAnswer(
        "stream_extras",
        StreamExtrasBlock,
        "nanochat's models only: the smear, the lambdas that mix x0 back in, the value embeddings, the "
        "backout and the softcap, with their numbers (the selected position's where one is picked)",
    ),
    PartAnswer(
        "block_switches",
        BlockSwitchesBlock,
        "imported families' block switches only (GPTConfig.switches: GPT-NeoX's parallel block and partial "
        "rotary, Gemma's GeGLU, sandwich norm, scaled embedding, softcaps and local/global layers, OLMo 2's "
        "output norms and q/k norm): each in words with its numbers, and this prompt's numbers for it",
    ),
    PartAnswer(
        "sae_features",
        SaeFeaturesBlock,
        "models with an SAE (GET /api/v1/saes) only: the SAE's features active at the selected position, "
        "and how many fire at every position",
    ),
    PartAnswer(
        "classifier",
        ClassifierBlock,
        "fine-tuned classifiers only (GET /api/v1/health: info.classifier; null for a language model): "
        "the label W_y reads at the last position",
    ),
)
ALL_PARTS: tuple[str, ...] = tuple(a.name for a in PART_ANSWERS)
ForwardPart = Literal[ALL_PARTS]  # type: ignore[valid-type]


class ForwardRequest(StrictRequest):
    # a prompt or token ids: the schema says one of them must be there
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["text"], "properties": {"text": {"minLength": 1}}},
                {"required": ["ids"], "properties": {"ids": {"type": "array"}}},
                {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
            ]
        }
    )

    text: str = Field(
        "",
        max_length=MAX_PROMPT_CHARS,
        description="the prompt (give it or `ids`); its tokens must fit the loaded model's context window "
        "(n_ctx, in /api/v1/health) unless `truncate` is true",
        examples=["ROMEO:\nBut soft, what light"],
    )
    ids: list[TokenId] | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="token ids to run instead of a text (for example /heads' test input); "
        "`text` is then ignored. Each id must be below the loaded model's vocab_size, "
        "and there may be at most n_ctx of them (see /api/v1/health)",
    )
    messages: list[ChatMessage] | None = messages_field()
    add_generation_prompt: bool = GENERATION_PROMPT_FIELD
    bos: bool | None = BOS_FIELD
    include: list[ForwardPart] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["attention", "next_token"],
        description="which stages of the trace to return (GET /api/v1/forward/parts lists them, and which "
        "the loaded model has; a part it lacks is null in the answer)",
    )
    layers: list[int] | None = Field(None, description="attention: only these layers (default all)")
    heads: list[int] | None = Field(None, description="attention: only these heads (default all)")
    layer: int = Field(0, ge=0, description="the layer shown in detail (layernorm, head_detail, mlp neurons)")
    head: int = Field(0, ge=0, description="the head shown in detail (head_detail)")
    position: int | None = Field(None, ge=0, description="the selected token position (default: the last)")
    target: int | None = Field(
        None, ge=0, description="decomposition: the token id whose logit is split up (default: the top prediction)"
    )
    top_k: int = Field(10, ge=1, le=100, description="how many next-token candidates to return")
    sae: str | None = Field(
        None, max_length=64, description="sae_features: the SAE, by name from GET /api/v1/saes (default: the first)"
    )
    lens: str | None = Field(
        None, max_length=64, description="tuned_lens: the lens, by name from GET /api/v1/lenses (default: the first)"
    )
    truncate: bool = Field(False, description="keep the last n_ctx tokens of a longer prompt instead of refusing it")


class TraceHeader(BaseModel):
    """What every trace says, whichever parts were asked for."""

    model: str
    tokens: list[TokenPiece]
    truncated: int = Field(0, description="tokens dropped from the front when truncate was asked for")
    chat_text: str | None = Field(
        None, description="messages: the chat template's text the tokens are the encoding of (null for a text prompt)"
    )
    n_layer: int
    n_head: int
    d_model: int
    causal: bool = Field(
        True,
        description="whether each position attends only to itself and earlier ones; "
        "False for a model trained without the mask, whose patterns fill the whole square",
    )
    window: int = Field(
        0,
        description="sliding-window attention: query q sees keys q-window+1..q only (0: all earlier "
        "keys); the weights outside the window are 0",
    )
    position: int = Field(description="the selected position")


_PART_FIELDS: dict[str, Any] = {a.name: (a.block | None, Field(None, description=a.description)) for a in PART_ANSWERS}

if TYPE_CHECKING:  # a static checker sees the parts' fields as Any: they are made from the registry below

    class ForwardResponse(TraceHeader):
        def __getattr__(self, name: str) -> Any: ...

else:
    ForwardResponse = create_model(
        "ForwardResponse",
        __base__=TraceHeader,
        __doc__="A forward trace: the header, then one field per part (null unless asked for and applicable).",
        __module__=__name__,
        **_PART_FIELDS,
    )


class PartInfo(BaseModel):
    name: str
    description: str
    applies: bool = Field(description="whether the loaded model has this part (else it is null in every trace)")
    stale_on: list[Literal["layer", "head", "position", "target"]] = Field(
        description="the selection fields of a request whose change alters this part (the others leave it as it was)"
    )


class PartsResponse(BaseModel):
    parts: list[PartInfo] = Field(description="every part of the trace, in the order the page shows them")
