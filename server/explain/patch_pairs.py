"""Ready-made clean/corrupted pairs for activation patching, offered when the loaded model's
tokenizer is the one they were written for and cuts both prompts into the same number of tokens
(and each answer into one). A model with none of its own (an imported Llama, say) is offered the
pairs written for other tokenizers that its own cuts so, said to be borrowed.

The built-in model's pair was found by a search over speaker-style templates and the plays' names
that are one token in its vocabulary (tests/test_patch.py checks that the model solves it: the clean
logit difference is above 2 nats). The indirect-object sentence is Wang et al.'s (2022), for an
imported GPT-2.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schemas.patch import PatchPair
from ..service import ModelService
from .common import token_text


@dataclass(frozen=True)
class Pair:
    name: str
    tokenizer: str  # "bpe": the built-in model's own BPE (and models trained with it); "gpt2": GPT-2's
    description: str
    clean: str
    corrupted: str
    answer: str
    wrong: str


PAIRS = (
    Pair(
        "dead-caesar",
        "bpe",
        "a name copied from earlier in the scene: after 'Alas, poor' the model names whoever the lords spoke of "
        "(Caesar in the clean prompt, Edward in the corrupted one)",
        "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor",
        "First Lord:\nWhat news of Edward?\n\nSecond Lord:\nMy lord, Edward is dead.\n\nFirst Lord:\nAlas, poor",
        " Caesar",
        " Edward",
    ),
    Pair(
        "long-live-king",
        "bpe",
        "a name repeated from the line before: 'Long live King Edward!' is answered 'Long live King' ... Edward "
        "(Henry in the corrupted prompt)",
        "GLOUCESTER:\nLong live King Edward!\n\nALL:\nLong live King",
        "GLOUCESTER:\nLong live King Henry!\n\nALL:\nLong live King",
        " Edward",
        " Henry",
    ),
    Pair(
        "indirect-object",
        "gpt2",
        "the indirect-object sentence (Wang et al., 2022): the model should name the person who did not give "
        "the drink (Mary; John in the corrupted prompt, where Mary gives it)",
        "When Mary and John went to the store, John gave a drink to",
        "When Mary and John went to the store, Mary gave a drink to",
        " Mary",
        " John",
    ),
)


def _tokenizer(service: ModelService) -> str:
    spec = service.meta.tokenizer or {}
    return "gpt2" if spec.get("kind") == "tiktoken" and spec.get("name") == "gpt2" else str(spec.get("kind"))


def pairs(service: ModelService) -> list[PatchPair]:
    """The pairs written for the loaded model's tokenizer whose prompts have equal token counts and
    whose answers are one token each; with none, those written for another tokenizer that fit it."""
    kind = _tokenizer(service)
    own = [q for p in PAIRS if p.tokenizer == kind and (q := _fit(service, p, borrowed=False))]
    return own or [q for p in PAIRS if p.tokenizer != kind and (q := _fit(service, p, borrowed=True))]


def _fit(service: ModelService, p: Pair, borrowed: bool) -> PatchPair | None:
    enc = service.encoding
    clean, corrupted = enc.encode_ordinary(p.clean), enc.encode_ordinary(p.corrupted)
    answer, wrong = enc.encode_ordinary(p.answer), enc.encode_ordinary(p.wrong)
    if len(clean) != len(corrupted) or len(clean) > service.model.cfg.n_ctx or len(answer) != 1 or len(wrong) != 1:
        return None
    written = "the built-in model's BPE" if p.tokenizer == "bpe" else "GPT-2's tokenizer"
    return PatchPair(
        name=p.name,
        description=p.description + (f" (written for {written}; this model's cuts it alike)" if borrowed else ""),
        clean=p.clean,
        corrupted=p.corrupted,
        answer=answer[0],
        wrong=wrong[0],
        answer_text=token_text(service, answer[0]),
        wrong_text=token_text(service, wrong[0]),
        tokens=len(clean),
    )
