"""Linear probes (issue #66): a shipped task or the user's labelled texts, a probe per layer on the served
model's stream and on a random model's, with the majority baseline (model/probes.py does the arithmetic)."""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass

from gptscope.model import probes as model_probes
from gptscope.model import tasks as model_tasks

from .. import memory
from ..digits import VALUE
from ..errors import InputError
from ..schemas.probes import (
    MAX_PROBE_LABELS,
    LabelledText,
    ProbeDirections,
    ProbeLayer,
    ProbeRequest,
    ProbeResponse,
)
from ..service import ModelService, per_model
from .common import bos_ids
from .tokens import check_text, encode

SHIPPED_TRAIN = 600  # a shipped task's training half, at most (a seeded choice): the answer within seconds
SHIPPED_TEST = 200  # ... and its test half
SHIPPED_SEED = 0
METHOD = (
    "features standardised with the training half's mean and spread; multinomial logistic regression "
    f"(L2 {model_probes.ProbeConfig().l2} on the standardised weights), {model_probes.LBFGS_STEPS} full-batch "
    "L-BFGS iterations from zero weights, per layer"
)


@dataclass
class Labelled:
    name: str
    description: str
    labels: list[str]
    train: list[tuple[str, int]]
    test: list[tuple[str, int]]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def shipped(name: str) -> Labelled:
    """A shipped task (model/tasks.py), each half cut to a seeded choice of at most SHIPPED_TRAIN / SHIPPED_TEST."""
    task = model_tasks.builtin(name)
    rng = random.Random(SHIPPED_SEED)
    train = rng.sample(task.train, min(SHIPPED_TRAIN, len(task.train)))
    test = rng.sample(task.test, min(SHIPPED_TEST, len(task.test)))
    return Labelled(
        name,
        task.description + f" At most {SHIPPED_TRAIN} training and {SHIPPED_TEST} test passages are used.",
        task.labels,
        [(e.text, e.label) for e in train],
        [(e.text, e.label) for e in test],
    )


def from_examples(examples: list[LabelledText]) -> Labelled:
    """The user's examples: a repeated text kept once (its first label), labels in sorted order; the
    texts ranked by a hash of their text, every fifth from the first in the test half."""
    seen: dict[str, str] = {}
    for i, ex in enumerate(examples):
        check_text(ex.text, f"examples.{i}.text")
        check_text(ex.label, f"examples.{i}.label")
        seen.setdefault(ex.text, ex.label)
    labels = sorted(set(seen.values()))
    if len(labels) < 2:
        raise InputError("examples", f"every example has the label {labels[0]!r}: a probe needs at least 2 labels")
    if len(labels) > MAX_PROBE_LABELS:
        raise InputError("examples", f"{len(labels)} different labels; the limit is {MAX_PROBE_LABELS}")
    ranked = sorted(seen, key=_hash)
    rows = [(text, labels.index(seen[text])) for text in ranked]
    return Labelled(
        "examples",
        f"Your {len(rows)} examples ({len(labels)} labels); one in five, chosen by a hash of its text, is "
        "in the test half.",
        labels,
        [r for i, r in enumerate(rows) if i % 5],
        [r for i, r in enumerate(rows) if i % 5 == 0],
    )


def labelled_ids(service: ModelService, texts: list[tuple[str, int]]) -> tuple[list[tuple[list[int], int]], int]:
    """Each text's token ids (after the model's BOS, if it expects one), cut to n_ctx; how many were cut."""
    n_ctx = service.model.cfg.n_ctx
    lead = bos_ids(service, None)
    out, cut = [], 0
    for text, label in texts:
        ids = lead + encode(service.encoding, text, allow_special=False, field="examples")
        if not ids:
            raise InputError("examples", f"the text {text[:40]!r} has no tokens")
        cut += len(ids) > n_ctx
        out.append((ids[:n_ctx], label))
    return out, cut


def need(service: ModelService, n: int, longest: int, field: str) -> memory.Need:
    cfg = service.model.cfg
    return memory.Need(
        model_probes.peak_bytes(cfg, n, longest), field, f"probes on {n:,} examples", "fewer or shorter examples"
    )


def probes(service: ModelService, req: ProbeRequest) -> ProbeResponse:
    if (req.task is None) == (req.examples is None):
        field = "task" if req.task is None else "examples"
        raise InputError(field, "give either a shipped task or examples (one of the two)")
    if req.task is not None:
        return _shipped_answer(service, req.task, req.stage, req.pool, req.seed, req.include_directions)
    assert req.examples is not None
    return _answer(
        service, from_examples(req.examples), req.stage, req.pool, req.seed, req.include_directions, "examples"
    )


@per_model(maxsize=8)
def _shipped_answer(
    service: ModelService, name: str, stage: str, pool: str, seed: int, include_directions: bool
) -> ProbeResponse:
    return _answer(service, shipped(name), stage, pool, seed, include_directions, "task")


def _answer(
    service: ModelService, data: Labelled, stage: str, pool: str, seed: int, include_directions: bool, field: str
) -> ProbeResponse:
    start = time.perf_counter()
    train, cut_train = labelled_ids(service, data.train)
    test, cut_test = labelled_ids(service, data.test)
    longest = max(len(r) for r, _ in train + test)
    cfg = model_probes.ProbeConfig(stage=stage, pool=pool, seed=seed)
    with memory.hold(need(service, len(train) + len(test), longest, field)), service.run() as m:
        result = model_probes.run_probes(m, train, test, len(data.labels), cfg)
    return _response(service, data, result, cfg, include_directions, cut_train + cut_test, time.perf_counter() - start)


def _counts(labels: list[str], rows: list[tuple[str, int]]) -> dict[str, int]:
    out = dict.fromkeys(labels, 0)
    for _, label in rows:
        out[labels[label]] += 1
    return out


def _directions(p: model_probes.LayerProbe) -> ProbeDirections:
    def rows(t) -> list[list[float]]:
        t = t if t.dim() == 2 else t[None]
        return [[round(float(v), VALUE) for v in row] for row in t.tolist()]

    return ProbeDirections(probe=rows(p.direction), diffmean=rows(p.diffmean))


def _response(
    service: ModelService,
    data: Labelled,
    result: model_probes.ProbeResult,
    cfg: model_probes.ProbeConfig,
    include_directions: bool,
    cut: int,
    seconds: float,
) -> ProbeResponse:
    layers = [
        ProbeLayer(
            layer=p.layer,
            hook_name=f"blocks.{p.layer}.hook_{cfg.stage}",
            accuracy=round(p.accuracy, VALUE),
            train_accuracy=round(p.train_accuracy, VALUE),
            control_accuracy=round(c.accuracy, VALUE),
            directions=_directions(p) if include_directions else None,
        )
        for p, c in zip(result.layers, result.control)
    ]
    return ProbeResponse(
        task=data.name,
        description=data.description,
        stage=cfg.stage,  # type: ignore[arg-type]
        pool=cfg.pool,  # type: ignore[arg-type]
        seed=cfg.seed,
        labels=data.labels,
        n_train=len(data.train),
        n_test=len(data.test),
        train_counts=_counts(data.labels, data.train),
        test_counts=_counts(data.labels, data.test),
        majority_label=data.labels[result.majority_label],
        majority_baseline=round(result.majority, VALUE),
        best_layer=max(layers, key=lambda p: p.accuracy).layer,
        layers=layers,
        examples_cut=cut,
        method=METHOD,
        seconds=round(seconds, 3),
    )
