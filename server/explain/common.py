"""What every explain module needs: a prompt's ids for the loaded model, index checks, token text,
rounding for JSON with named precisions, query-field errors, and the batch a model was trained with."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from gptscope.model.chat import ChatTemplateError
from gptscope.model.tokenizers import HFEncoding, default_bos_ids

from ..digits import COARSE, EXACT, FINE, VALUE
from ..errors import InputError
from ..schemas.arrays import Arr
from ..schemas.stages import NextToken
from ..service import ModelService
from .tokens import check_text, encode, token_bytes


def rounded(t: torch.Tensor, digits: int = VALUE) -> list:
    """A tensor as (nested) lists of floats rounded for compact JSON (NaN/inf never appear).

    Rounded in float64: a float32 0.6031 widens to 0.6031000018119812 in JSON, while the float64
    nearest to 0.6031 prints as 0.6031 (the same digits in a third of the bytes)."""
    t = torch.nan_to_num(t.detach().double(), nan=0.0, posinf=0.0, neginf=0.0)
    return (torch.round(t, decimals=digits) + 0.0).tolist()  # + 0.0: no -0.0 (as Arr)


def arr(t: torch.Tensor, digits: int = VALUE) -> Arr:
    """A tensor for an array field of an answer: `rounded`'s numbers, made into lists only if the
    answer goes out as JSON (the binary form sends them from the tensor: server/wire.py)."""
    return Arr(t, digits)


def attention_rows(pattern: torch.Tensor, causal: bool) -> Arr:
    """(..., T, T) weights -> [...][query][key]; a causal model's row q stops at key q (the masked
    keys' weights are exactly 0 and are left out)."""
    return Arr(pattern, COARSE, tril=causal)


def token_text(service: ModelService, tid: int) -> str:
    return token_bytes(service.encoding, int(tid)).decode("utf-8", errors="replace")


def bos_ids(service: ModelService, bos: bool | None) -> list[int]:
    """The beginning-of-text tokens a prompt starts with: by default (bos None) those the model expects
    (model/tokenizers.py's default_bos_ids: an imported Hugging Face model's, as its tokenizer config
    says; nanochat's <|bos|>; none for the others); bos true: its tokenizer's BOS token even where not
    expected (a 422 if it has none); false: none."""
    if bos is False:
        return []
    enc = service.encoding
    lead = default_bos_ids(enc)
    if bos is None or lead:
        return lead
    if not isinstance(enc, HFEncoding):
        raise InputError("bos", "this model's tokenizer has no beginning-of-text token")
    named = enc.token_id(enc.config.get("bos_token"))
    if named is None:
        raise InputError(
            "bos", "this model's tokenizer has no beginning-of-text token (tokenizer_config.json: bos_token)"
        )
    return [named]


def prompt_ids(
    service: ModelService, text: str, truncate: bool, field: str = "text", bos: bool | None = None
) -> tuple[list[int], int]:
    """Token ids of a prompt for the loaded model, after its beginning-of-text token where it expects
    one (`bos_ids`); refuses (or, if asked, truncates: the BOS stays first) a prompt that does not fit
    the context window. Returns the ids and how many were dropped from the front."""
    check_text(text, field)
    # a classifier's prompt is written with its special tokens (<|start|> ... <|extract|>)
    ids = encode(service.encoding, text, allow_special=service.classifier is not None, field=field)
    if not ids:
        raise InputError(field, "the prompt has no tokens")
    return fit(service, bos_ids(service, bos), ids, truncate, field)


def fit(service: ModelService, lead: list[int], ids: list[int], truncate: bool, field: str) -> tuple[list[int], int]:
    """lead + ids within the context window: refused, or (truncate) the last ids kept after lead."""
    n_ctx = service.model.cfg.n_ctx
    if len(lead) + len(ids) > n_ctx:
        if not truncate:
            raise InputError(
                field,
                f"the prompt is {len(lead) + len(ids)} tokens; the model's context window is n_ctx={n_ctx} tokens "
                f"(send truncate=true to keep the last {n_ctx})",
            )
        keep = n_ctx - len(lead)
        return lead + ids[len(ids) - keep :], len(ids) - keep
    return lead + ids, 0


def request_prompt(
    service: ModelService,
    text: str,
    messages: list | None,
    add_generation_prompt: bool,
    bos: bool | None,
    truncate: bool,
) -> tuple[list[int], int, str | None]:
    """A request's prompt, as a text or as a chat (`messages`, each a ChatMessage): its ids, how many
    were dropped from the front, and a chat's text as its template wrote it (None for a text)."""
    if messages is not None:
        return chat_ids(service, [m.model_dump() for m in messages], add_generation_prompt, truncate, bos)
    if not text:
        raise InputError("text", "give a prompt (text) or a chat (messages)")
    ids, dropped = prompt_ids(service, text, truncate, bos=bos)
    return ids, dropped, None


def chat_ids(
    service: ModelService, messages: list[dict], add_generation_prompt: bool, truncate: bool, bos: bool | None = None
) -> tuple[list[int], int, str]:
    """A chat's token ids: the model's chat template rendered in its sandbox (model/chat.py), encoded
    with its special tokens read as tokens (a template writes its own BOS; bos true adds one where it
    does not). Returns the ids, how many were dropped from the front, and the template's text."""
    enc = service.encoding
    if not isinstance(enc, HFEncoding) or not enc.chat_template:
        raise InputError("messages", "this model has no chat template (tokenizer_config.json field chat_template)")
    try:
        text = enc.render_chat(messages, add_generation_prompt)
    except ChatTemplateError as e:
        raise InputError(
            "messages", f"the model's chat template (tokenizer_config.json field chat_template): {e}"
        ) from None
    ids = encode(enc, text, allow_special=True, field="messages")
    if not ids:
        raise InputError("messages", "the chat template's text has no tokens")
    lead = bos_ids(service, True) if bos else []
    if lead and ids[: len(lead)] == lead:
        lead = []
    out, dropped = fit(service, lead, ids, truncate, "messages")
    return out, dropped, text


def given_ids(service: ModelService, ids: list[int], field: str = "ids") -> list[int]:
    V, n_ctx = service.model.cfg.vocab_size, service.model.cfg.n_ctx
    bad = next((i for i in ids if not 0 <= i < V), None)
    if bad is not None:
        raise InputError(field, f"token id {bad} is outside the vocabulary 0..{V - 1}")
    if len(ids) > n_ctx:
        raise InputError(field, f"{len(ids)} ids exceed the model's context window n_ctx={n_ctx}")
    return list(ids)


def check_index(value: int, n: int, field: str) -> int:
    if not 0 <= value < n:
        raise InputError(field, f"{value} is out of range; valid values are 0..{n - 1}")
    return value


def check_indices(requested: list[int] | None, n: int, field: str) -> list[int]:
    """The requested indices, checked and sorted; all of 0..n-1 when none were asked for."""
    if requested is None:
        return list(range(n))
    for i in requested:
        check_index(i, n, field)
    return sorted(set(requested))


def next_tokens(service: ModelService, logits: torch.Tensor, k: int) -> list[NextToken]:
    """Top-k candidates from one position's logits (V,)."""
    probs = torch.softmax(logits.float(), -1)
    top = torch.topk(probs, min(k, probs.numel()))
    return [
        NextToken(
            id=int(i),
            text=token_text(service, int(i)),
            prob=round(float(p), FINE),
            logit=round(float(logits[int(i)]), COARSE),
        )
        for p, i in zip(top.values, top.indices)
    ]


def query_error(field: str, message: str) -> InputError:
    """An InputError about a query parameter (loc ["query", field] where errors.py supports it)."""
    return InputError(field, message, where="query")


def finite(values: Sequence[float], field: str) -> list[float]:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise query_error(field, "these settings give a value too large to represent; choose smaller ones")
    return out


def json_float(x: float, digits: int = EXACT) -> float:
    """Round for JSON (and turn -0.0 into 0.0)."""
    return round(float(x), digits) + 0.0


def model_batch(service: ModelService) -> tuple[int, int] | None:
    """(batch, context) the loaded model was trained with, from its checkpoint.json (None if not recorded)."""
    tc = service.meta.train_config
    if not isinstance(tc, dict) or not isinstance(tc.get("batch_size"), int):
        return None
    return tc["batch_size"], int(tc.get("seq_len") or service.model.cfg.n_ctx)
