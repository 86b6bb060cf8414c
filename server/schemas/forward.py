"""The forward trace of a prompt, stage by stage. Each stage is optional: a tool asks only for
what it shows (`include`), and a selected layer / head / position narrows the detailed parts.

The stages' names, their fields in the answer and their meanings come from the registry of parts
(server/explain/parts.py); their blocks are the models in stages.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..explain.parts import NAMES, PARTS
from .common import MAX_PROMPT_CHARS, StrictRequest, TokenId, TokenPiece
from .stages import LogitLensBlock  # noqa: F401  (the answer of POST /api/v1/logit-lens)

ForwardPart = Literal[NAMES]  # type: ignore[valid-type]
ALL_PARTS: tuple[str, ...] = NAMES


class ForwardRequest(StrictRequest):
    # a prompt or token ids: the schema says one of them must be there
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["text"], "properties": {"text": {"minLength": 1}}},
                {"required": ["ids"], "properties": {"ids": {"type": "array"}}},
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
    truncate: bool = Field(False, description="keep the last n_ctx tokens of a longer prompt instead of refusing it")


class TraceHeader(BaseModel):
    """What every trace says, whichever parts were asked for."""

    model: str
    tokens: list[TokenPiece]
    truncated: int = Field(0, description="tokens dropped from the front when truncate was asked for")
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


_PART_FIELDS: dict[str, Any] = {p.name: (p.block | None, Field(None, description=p.description)) for p in PARTS}

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
