"""The clean/corrupted pair that activation patching and edge circuits both start from.

A request names two prompts (text or ids) of the same length that differ somewhere; each prompt's
run is recorded once and kept per model in a budget of bytes (`Runs`: each analysis records what it
needs, patching every site's activations, circuits every edge's ends); the metric's tokens come from the
request or from the two runs; and a pair whose metric does not tell the runs apart is refused, since
no effect could be measured on it. `patch.py` and `circuits.py` each call these in their `plan`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import torch

from gptscope.model.gpt import GPT

from ..errors import InputError
from ..schemas.patch import PairRequest, PatchMetric, TokenRef
from ..service import LRU, ModelService
from .common import given_ids, prompt_ids, token_text

EPS = 1e-4  # a clean and a corrupted metric closer than this leave the effect undefined


class Recording(Protocol):
    logits: torch.Tensor  # the last position's logits, (V,)

    @property
    def nbytes(self) -> int: ...


R = TypeVar("R", bound=Recording)


def _ids(service: ModelService, text: str | None, ids: list[int] | None, name: str, bos: bool | None) -> list[int]:
    if (text is None) == (ids is None):
        raise InputError(name, f"give either {name} (text) or {name}_ids, not both or neither")
    if text is not None:
        return prompt_ids(service, text, truncate=False, field=name, bos=bos)[0]
    assert ids is not None
    return given_ids(service, ids, f"{name}_ids")


def pair_ids(service: ModelService, req: PairRequest) -> tuple[list[int], list[int]]:
    """The two prompts' ids: the same number of tokens, position by position, not all the same."""
    clean = _ids(service, req.clean, req.clean_ids, "clean", req.bos)
    corrupted = _ids(service, req.corrupted, req.corrupted_ids, "corrupted", req.bos)
    name = "corrupted" if req.corrupted is not None else "corrupted_ids"
    if len(clean) != len(corrupted):
        raise InputError(
            name,
            f"clean has {len(clean)} tokens and corrupted {len(corrupted)}: patching needs the same number, "
            "position by position",
        )
    if clean == corrupted:
        raise InputError(name, "corrupted has the same tokens as clean: change at least one token")
    return clean, corrupted


def check_tokens(service: ModelService, req: PairRequest) -> None:
    """The metric's answer and wrong tokens, if given: in the vocabulary, and not the same."""
    for name in ("answer", "wrong"):
        tid = getattr(req, name)
        if tid is not None and tid >= service.model.cfg.vocab_size:
            raise InputError(name, f"token id {tid} is outside the vocabulary 0..{service.model.cfg.vocab_size - 1}")
    if req.metric == "logit_diff" and req.answer is not None and req.answer == req.wrong:
        raise InputError("wrong", "wrong must differ from answer: their logit difference would be 0")


class Runs(Generic[R]):
    """One analysis' recorded runs of recent prompts, per model, kept in a budget of bytes (least
    recently used dropped first): patching's (every site's activations) and circuits' (every edge's
    ends) are two of these, so a page's next question about the same pair runs neither prompt again."""

    def __init__(self, record: Callable[[GPT, list[int]], R], budget: int) -> None:
        self.record, self.budget = record, budget
        self._lock = threading.Lock()
        self._by_model: weakref.WeakKeyDictionary[GPT, LRU[tuple, R]] = weakref.WeakKeyDictionary()

    def store(self, model: GPT) -> LRU[tuple, R]:
        with self._lock:
            got = self._by_model.get(model)
            if got is None:
                got = self._by_model[model] = LRU(self.budget, lambda r: r.nbytes)
            return got

    def has(self, model: GPT, *prompts: list[int]) -> bool:
        """Whether every one of these prompts' runs is kept (none would run)."""
        store = self.store(model)
        return all(tuple(ids) in store for ids in prompts)

    def get(self, service: ModelService, ids: list[int]) -> R:
        """A prompt's recorded run: the one kept, or recorded now (under the model's lock) and kept."""
        store = self.store(service.model)
        got = store.get(tuple(ids))
        if got is None:
            with service.run() as m:
                got = self.record(m, ids)
            store.put(tuple(ids), got)
        return got


def answer_tokens(
    clean_logits: torch.Tensor, corrupted_logits: torch.Tensor, req: PairRequest
) -> tuple[int, int | None]:
    """The metric's answer and wrong tokens: the request's, else the clean run's top token and the
    corrupted run's (its second if that is the answer); wrong is None for logprob."""
    answer = req.answer if req.answer is not None else int(clean_logits.argmax())
    if req.metric == "logprob":
        return answer, None
    if req.wrong is not None:
        if req.wrong == answer:
            raise InputError("wrong", f"wrong is the answer token ({answer}); choose another token")
        return answer, req.wrong
    top2 = torch.topk(corrupted_logits, 2).indices.tolist()
    return answer, top2[1] if top2[0] == answer else top2[0]


def check_metric(m_clean: float, m_corr: float, undefined: str, choose: str) -> None:
    """Refuse a pair whose metric is (almost) the same on both runs: `undefined` says what that leaves
    undefined, `choose` what to ask for instead."""
    if abs(m_clean - m_corr) < EPS:
        raise InputError(
            "answer",
            f"the metric is {m_clean:.5f} on the clean run and {m_corr:.5f} on the corrupted one: with no "
            f"difference {undefined}; choose answer (and wrong) tokens {choose}",
        )


def metric_of(service: ModelService, answer_id: int, wrong_id: int | None, T: int) -> PatchMetric:
    """The metric in words: logit_diff of answer and wrong at the last position, or logprob of answer."""
    answer = TokenRef(id=answer_id, text=token_text(service, answer_id))
    if wrong_id is None:
        return PatchMetric(
            kind="logprob", answer=answer, wrong=None, position=T - 1,
            description=f"log p({answer.text!r}) at the last position, nats",
        )  # fmt: skip
    wrong = TokenRef(id=wrong_id, text=token_text(service, wrong_id))
    return PatchMetric(
        kind="logit_diff", answer=answer, wrong=wrong, position=T - 1,
        description=f"logit({answer.text!r}) - logit({wrong.text!r}) at the last position, nats",
    )  # fmt: skip
