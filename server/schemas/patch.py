"""Activation patching between two prompts (POST /api/v1/patch, its job form, the ready-made pairs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .arrays import Matrix
from .common import BOS_FIELD, MAX_PROMPT_CHARS, JobStatus, StrictRequest, TokenId, TokenPiece
from .intervene import HeadRef
from .stages import NextToken

PatchKind = Literal["resid_pre", "attn_out", "mlp_out", "head", "head_position"]
MAX_HEAD_SET = 32
MEANINGS: dict[str, str] = {
    "resid_pre": "row = layer l, column = position p: the residual stream entering block l at position p is "
    "replaced by the other prompt's; the last row (layer = n_layer) is the stream after the last block, which "
    "only matters at the last position",
    "attn_out": "row = layer l, column = position p: what block l's attention adds to the stream at position p "
    "is replaced by the other prompt's",
    "mlp_out": "row = layer l, column = position p: what block l's MLP (or mixture of experts) adds at position p "
    "is replaced by the other prompt's",
    "head": "row = layer l, column = head h: head h of layer l's output (its weighted sum of values, before W_O) "
    "is replaced by the other prompt's at every position",
    "head_position": "row = one (layer, head) of `heads`, column = position p: that head's output at position p "
    "only is replaced by the other prompt's",
}


class PatchCell(StrictRequest):
    kind: PatchKind = Field(description="which sweep the cell belongs to")
    layer: int = Field(ge=0, description="below n_layer (resid_pre: up to n_layer, the stream after the last block)")
    position: int | None = Field(
        None, ge=0, description="below the prompts' token count; needed by every kind but `head`"
    )
    head: int | None = Field(None, ge=0, description="below n_head; needed by `head` and `head_position`")


class PairRequest(StrictRequest):
    """A clean/corrupted pair and the metric measured on it: what patching (POST /api/v1/patch) and edge
    circuits (POST /api/v1/circuits) share."""

    clean: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PROMPT_CHARS,
        description="the prompt the model gets right; give it or clean_ids; within n_ctx tokens",
    )
    bos: bool | None = BOS_FIELD
    corrupted: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PROMPT_CHARS,
        description="the same prompt with a few tokens changed; as many tokens as clean, and not the same tokens",
    )
    clean_ids: list[TokenId] | None = Field(
        None, min_length=1, max_length=4096, description="token ids instead of clean; each below vocab_size"
    )
    corrupted_ids: list[TokenId] | None = Field(
        None, min_length=1, max_length=4096, description="token ids instead of corrupted; each below vocab_size"
    )
    metric: Literal["logit_diff", "logprob"] = Field(
        "logit_diff",
        description="measured on the last position's logits: logit_diff = logit[answer] - logit[wrong]; "
        "logprob = log p(answer), nats",
    )
    answer: TokenId | None = Field(
        None, description="the answer token's id (below vocab_size); default: the clean run's most likely next token"
    )
    wrong: TokenId | None = Field(
        None,
        description="logit_diff's other token (below vocab_size, not answer); "
        "default: the corrupted run's most likely next token (its second if that is answer)",
    )


class PatchRequest(PairRequest):
    direction: Literal["denoise", "noise"] = Field(
        "denoise",
        description="denoise: run the corrupted prompt with one clean activation put in; "
        "noise: run the clean prompt with one corrupted activation put in",
    )
    kinds: list[PatchKind] = Field(
        default_factory=lambda: ["resid_pre", "attn_out", "mlp_out", "head"],
        max_length=5,
        description="the sweeps to compute; [] computes none (with `cell`: that one patched run only); "
        "head_position needs `heads`",
    )
    heads: list[HeadRef] = Field(
        default_factory=list,
        max_length=MAX_HEAD_SET,
        description="the head set of the head_position sweep: layers below n_layer, heads below n_head",
    )
    cell: PatchCell | None = Field(
        None,
        description="one cell whose patched run's next-token distribution is "
        "returned in `detail`, beside the clean and corrupted runs'",
    )
    top_k: int = Field(10, ge=1, le=50, description="how many next tokens each distribution lists")


class TokenRef(BaseModel):
    id: int
    text: str = Field(description="the token's text (bytes decoded as UTF-8)")


class PatchMetric(BaseModel):
    kind: Literal["logit_diff", "logprob"]
    answer: TokenRef
    wrong: TokenRef | None = Field(description="logit_diff's other token; null for logprob")
    position: int = Field(description="the position whose logits are measured: the last one")
    description: str = Field(description="the metric in words")


class PatchSweep(BaseModel):
    kind: PatchKind
    meaning: str = Field(description="what a row, a column and a cell of this sweep mean, in words")
    columns: Literal["position", "head"] = Field(description="what a column indexes")
    row_layers: list[int] = Field(description="the layer of each row")
    row_heads: list[int] | None = Field(description="head_position: the head of each row; null otherwise")
    patched: Matrix = Field(description="[row][column]: the metric of that cell's patched run")
    effect: Matrix = Field(
        description="[row][column]: (patched - corrupted) / (clean - corrupted): 0 = the corrupted run's metric, "
        "1 = the clean run's; denoising, a cell near 1 carries what the clean prompt adds; noising, a cell "
        "near 0 is one the answer cannot do without"
    )


class Compared3(BaseModel):
    id: int
    text: str
    clean: float = Field(description="probability in the clean run")
    corrupted: float = Field(description="probability in the corrupted run")
    patched: float = Field(description="probability in the patched run")


class PatchDetail(BaseModel):
    cell: PatchCell
    patched_metric: float = Field(description="the metric of this cell's patched run")
    effect: float = Field(description="(patched - corrupted) / (clean - corrupted)")
    top: list[NextToken] = Field(description="the patched run's most likely next tokens")
    compared: list[Compared3] = Field(
        description="the union of the three runs' top tokens, each with all three probabilities, by the clean run's"
    )


class PatchResponse(BaseModel):
    n_layer: int
    n_head: int
    clean_tokens: list[TokenPiece]
    corrupted_tokens: list[TokenPiece]
    differs: list[int] = Field(description="the positions where the two prompts' tokens differ")
    direction: Literal["denoise", "noise"]
    base: Literal["clean", "corrupted"] = Field(
        description="the prompt every patched run runs (the other one gives the activation put in)"
    )
    metric: PatchMetric
    clean_metric: float = Field(description="the metric on the clean run")
    corrupted_metric: float = Field(description="the metric on the corrupted run")
    clean_top: list[NextToken] = Field(description="the clean run's most likely next tokens")
    corrupted_top: list[NextToken] = Field(description="the corrupted run's most likely next tokens")
    sweeps: list[PatchSweep] = Field(description="one per requested kind, in the request's order")
    detail: PatchDetail | None = Field(description="the requested `cell`'s patched run; null without one")
    runs: int = Field(description="patched forward passes this request computed (0 when all came from the cache)")
    seconds: float = Field(description="wall-clock time of this answer's computation")


class PatchJob(BaseModel):
    id: str
    status: JobStatus
    done: int = Field(description="patched runs finished so far")
    total: int = Field(description="patched runs the sweep needs (0 when all come from the cache)")
    elapsed: float = Field(description="seconds since the job started")
    result: PatchResponse | None = Field(description="the answer, once status is done")
    error: str | None = Field(description="what went wrong, when status is failed")


class PatchPair(BaseModel):
    name: str
    description: str = Field(description="what the pair tests and what the model should say")
    clean: str
    corrupted: str
    answer: int = Field(description="the answer token's id in the loaded model's vocabulary")
    wrong: int = Field(description="the corrupted prompt's answer token id")
    answer_text: str
    wrong_text: str
    tokens: int = Field(description="each prompt's token count in the loaded model")
