"""Steering four ways on one concept (issue #66): a DiffMean vector, a probe's direction, an SAE feature
and a prompt prefix, each at several strengths, on the same prompts with the same draws, judged by the
unsteered model (model/steering.py does the arithmetic; the labelled examples are read as for probes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gptscope.model import probes as model_probes
from gptscope.model import steering as ms
from gptscope.model.errors import Cancelled
from gptscope.model.sae import LoadedSAE

from .. import memory
from ..digits import VALUE
from ..errors import InputError
from ..saes import SAES
from ..schemas.steering import (
    SteeringJudge,
    SteeringMethod,
    SteeringPoint,
    SteeringRequest,
    SteeringResponse,
)
from ..service import ModelService
from .common import bos_ids
from .probes import Labelled, from_examples, labelled_ids, shipped
from .tokens import check_text, encode

SETUP_GENERATIONS = 2  # reading the examples counts as this many generations' steps in the progress
JUDGE_EXAMPLES = 2  # the likelihood judge's examples of each label before a continuation
JUDGE_TEST = 20  # ... and the held-out examples of each label its accuracy is measured on
MAX_REQUEST_TOKENS = 20_000  # tokens a plain request may generate (prompts x new tokens x generations)
MAX_JOB_TOKENS = 400_000  # ... and a job
PROBE = model_probes.ProbeConfig()  # the judge's and the probe direction's settings
TITLES = {
    "diffmean": "DiffMean vector",
    "probe": "Probe direction",
    "sae": "SAE feature",
    "prompt": "Prompt prefix",
}
METHOD = (
    "Each prompt draws its tokens with the seed seed + i whatever the method, so two rows differ only by the "
    "steering. The concept score is the judge's probability of the concept for the continuation read alone "
    "(the judge: a logistic probe on the unsteered model's stream at the layer where it is most accurate on the "
    "held-out examples, the stream averaged over the tokens as in training). Fluency is the continuation's mean "
    "loss per token under the unsteered model given the prompt alone (for the prompt method, without its prefix)."
)


@dataclass
class Plan:
    """A checked request: the labelled rows, the concept, the layer, the SAE, the prompts and the prefixes."""

    req: SteeringRequest
    data: Labelled
    concept: int
    layer: int
    sae: LoadedSAE | None
    sae_reason: str | None
    prompts: list[list[int]]  # each with the model's BOS, if it expects one
    prefixes: list[list[int]]  # one per prefix size: the first k concept examples' tokens
    judge_prefixes: list[list[int]] | None  # likelihood judge: per label, its first JUDGE_EXAMPLES examples
    lead: list[int]
    total: int  # decode steps
    need: memory.Need


@dataclass
class Concept:
    """What a steering comparison reads from the labelled examples (kept per model for a shipped task)."""

    layers: list[model_probes.LayerProbe]  # a probe per layer, fitted on the training half
    scale: float  # the stream's mean norm at the layer
    sae_feature: tuple[int, float] | None
    n_train: int
    n_test: int


def _data(req: SteeringRequest) -> tuple[Labelled, str]:
    if (req.task is None) == (req.examples is None):
        field = "task" if req.task is None else "examples"
        raise InputError(field, "give either a shipped task or examples (one of the two)")
    if req.task is not None:
        return shipped(req.task), "task"
    assert req.examples is not None
    return from_examples(req.examples), "examples"


def _sae(service: ModelService, req: SteeringRequest, layer: int) -> tuple[LoadedSAE | None, str | None]:
    hook = ms.steer_hook(layer)
    if req.sae is not None:
        loaded = SAES.get(service, req.sae, field="sae")
        if loaded.sae.cfg.hook_name != hook:
            raise InputError("sae", f"{req.sae} reads {loaded.sae.cfg.hook_name}, not {hook} (the layer steered)")
        return loaded, None
    for name, _ in SAES.listing(service):
        loaded = SAES.get(service, name, field="sae")
        if loaded.sae.cfg.hook_name == hook:
            return loaded, None
    return None, f"the served model has no SAE at {hook}: train one on /features, or steer at its layer"


def _default_layer(service: ModelService) -> int:
    for name, _ in SAES.listing(service):
        hook = SAES.get(service, name, field="sae").sae.cfg.hook_name
        if hook.endswith(".hook_resid_post"):
            return int(hook.split(".")[1])
    return service.model.cfg.n_layer // 2


def _prompts(
    service: ModelService, req: SteeringRequest, data: Labelled, concept: int, lead: list[int]
) -> list[list[int]]:
    n_ctx = service.model.cfg.n_ctx
    out: list[list[int]] = []
    if req.prompts is not None:
        for i, text in enumerate(req.prompts):
            check_text(text, f"prompts.{i}")
            ids = lead + encode(service.encoding, text, field=f"prompts.{i}")
            if len(ids) <= len(lead):
                raise InputError(f"prompts.{i}", "has no tokens")
            if len(ids) + req.new_tokens > n_ctx:
                raise InputError(
                    f"prompts.{i}", f"{len(ids)} tokens and new_tokens {req.new_tokens} exceed n_ctx {n_ctx}"
                )
            out.append(ids)
        return out
    if req.prompt_tokens + len(lead) + req.new_tokens > n_ctx:
        raise InputError("new_tokens", f"prompt_tokens plus new_tokens must be at most n_ctx {n_ctx - len(lead)}")
    for text, label in data.test:
        if label == concept:
            continue
        ids = encode(service.encoding, text.split("\n")[0], field="examples")
        if len(ids) >= req.prompt_tokens:
            out.append(lead + ids[: req.prompt_tokens])
        if len(out) == req.n_prompts:
            break
    if not out:
        raise InputError(
            "prompt_tokens", f"no held-out example of another label has a first line of {req.prompt_tokens} tokens"
        )
    return out


def _prefixes(
    service: ModelService, req: SteeringRequest, data: Labelled, concept: int, longest: int
) -> list[list[int]]:
    """For each prefix size k, the first k training examples of the concept, each followed by a blank line."""
    examples = [text for text, label in data.train if label == concept]
    n_ctx = service.model.cfg.n_ctx
    need = max(req.prefix_examples)
    if need > len(examples):
        raise InputError(
            "prefix_examples", f"{need} examples asked for; the concept has {len(examples)} in the training half"
        )
    pieces = [encode(service.encoding, text + "\n\n", field="examples") for text in examples[:need]]
    out = []
    for k in req.prefix_examples:
        ids = [t for piece in pieces[:k] for t in piece]
        if len(ids) + longest + req.new_tokens > n_ctx:
            raise InputError(
                "prefix_examples",
                f"{k} examples take {len(ids)} tokens: with a prompt of {longest} and new_tokens {req.new_tokens} "
                f"that exceeds n_ctx {n_ctx}",
            )
        out.append(ids)
    return out


def plan(service: ModelService, req: SteeringRequest, limit: float | None = None) -> Plan:
    """Check the request (every limit named by its field) and price it in decode steps."""
    cfg = service.model.cfg
    data, field = _data(req)
    concept_name = req.concept if req.concept is not None else data.labels[min(1, len(data.labels) - 1)]
    if concept_name not in data.labels:
        raise InputError("concept", f"{concept_name!r} is not a label; the labels are {', '.join(data.labels)}")
    concept = data.labels.index(concept_name)
    layer = _default_layer(service) if req.layer is None else req.layer
    if layer >= cfg.n_layer:
        raise InputError("layer", f"{layer} is out of range; valid values are 0..{cfg.n_layer - 1}")
    sae, reason = _sae(service, req, layer)
    lead = bos_ids(service, None)
    prompts = _prompts(service, req, data, concept, lead)
    prefixes = _prefixes(service, req, data, concept, max(len(p) for p in prompts) - len(lead))
    vectors = 2 + (sae is not None)
    generations = 1 + vectors * len(req.strengths) + len(req.prefix_examples)
    tokens = generations * len(prompts) * req.new_tokens
    if limit is not None and tokens > limit:
        raise InputError(
            "strengths",
            f"{generations} generations of {len(prompts)} prompts x {req.new_tokens} tokens = {tokens:,} tokens; the "
            f"limit here is {int(limit):,} (fewer strengths, prompts or new_tokens, or POST /api/v1/steering/jobs)",
        )
    n = len(data.train) + len(data.test)
    longest = max(len(t) for t, _ in data.train + data.test)  # characters bound tokens from above
    d_sae = sae.sae.cfg.d_sae if sae is not None else 0
    need = memory.Need(
        ms.peak_bytes(cfg, n, min(longest, cfg.n_ctx), len(prompts), d_sae),
        field,
        f"steering with {n:,} examples",
        "fewer or shorter examples",
    )
    total = (generations + SETUP_GENERATIONS) * req.new_tokens
    judge = _judge_prefixes(service, req, data, lead) if req.judge == "likelihood" else None
    return Plan(req, data, concept, layer, sae, reason, prompts, prefixes, judge, lead, total, need)


def _judge_prefixes(service: ModelService, req: SteeringRequest, data: Labelled, lead: list[int]) -> list[list[int]]:
    """Per label, its first JUDGE_EXAMPLES training examples, each followed by a blank line; each must leave
    room for a continuation within n_ctx."""
    n_ctx, out = service.model.cfg.n_ctx, []
    for c, label in enumerate(data.labels):
        texts = [text for text, lab in data.train if lab == c][:JUDGE_EXAMPLES]
        ids = [t for text in texts for t in encode(service.encoding, text + "\n\n", field="examples")]
        if not texts or len(lead) + len(ids) + req.new_tokens > n_ctx:
            raise InputError(
                "judge", f"the likelihood judge's examples of {label!r} and new_tokens do not fit n_ctx {n_ctx}"
            )
        out.append(ids)
    return out


def _read_concept(service: ModelService, p: Plan) -> Concept:
    train, _ = labelled_ids(service, p.data.train)
    test, _ = labelled_ids(service, p.data.test)
    rows = [r for r, _ in train] + [r for r, _ in test]
    y = torch.tensor([label for _, label in train] + [label for _, label in test])
    sae = p.sae.sae if p.sae is not None else None
    with service.run() as m:
        reading = ms.read_examples(m, rows, len(train), p.layer, sae, PROBE.stage, PROBE.pool)
    feature = None
    if reading.sae_means is not None:
        feature = ms.sae_concept_feature(reading.sae_means, y[: len(train)], p.concept)
    with torch.inference_mode(False):
        layers = model_probes.probe_all(reading.features.clone(), y.clone(), len(train), len(p.data.labels), PROBE)
    return Concept(layers, reading.scale, feature, len(train), len(test))


def _concept(service: ModelService, p: Plan) -> Concept:
    if p.req.task is None:
        return _read_concept(service, p)
    key = (p.req.task, p.concept, p.layer, p.sae.name if p.sae else None)
    memo = service.store("steering.concept", 8)  # kept with the model, as per_model keeps
    found = memo.get(key)
    if found is None:
        found = _read_concept(service, p)
        memo.put(key, found)
    return found


def _point(strength: float, scores: list[float], losses: list[float], texts: list[str]) -> SteeringPoint:
    return SteeringPoint(
        strength=strength,
        concept_score=round(sum(scores) / len(scores), VALUE),
        fluency=round(sum(losses) / len(losses), VALUE),
        concept_scores=[round(x, VALUE) for x in scores],
        losses=[round(x, VALUE) for x in losses],
        generations=texts,
    )


class _Run:
    """The generations of one plan: each one measured by the unsteered model at once."""

    def __init__(self, service: ModelService, p: Plan, c: Concept, on_chunk, cancel) -> None:
        self.service, self.p, self.c, self.cancel = service, p, c, cancel
        self.judge = max(c.layers, key=lambda lp: lp.accuracy)
        self.judge_accuracy = self.judge.accuracy if p.judge_prefixes is None else self._likelihood_accuracy()
        self.sampling = ms.Sampling(p.req.new_tokens, p.req.temperature, p.req.top_k, p.req.seed)
        self.done = SETUP_GENERATIONS * p.req.new_tokens
        self.on_chunk = on_chunk

    def step(self) -> None:
        self.done += 1
        if self.on_chunk is not None:
            self.on_chunk(self.done, self.p.total)

    def _likelihood_accuracy(self) -> float:
        """The likelihood judge on up to JUDGE_TEST held-out examples of each label (each cut to fit n_ctx)."""
        p, n_ctx = self.p, self.service.model.cfg.n_ctx
        assert p.judge_prefixes is not None
        room = n_ctx - len(p.lead) - max(len(x) for x in p.judge_prefixes)
        right = total = 0
        with self.service.run() as m:
            for c in range(len(p.data.labels)):
                texts = [t for t, lab in p.data.test if lab == c][:JUDGE_TEST]
                rows = [r for r in (encode(self.service.encoding, t, field="examples")[:room] for t in texts) if r]
                if rows:
                    shares = ms.likelihood_shares(m, p.lead, p.judge_prefixes, rows)
                    right += int((shares.argmax(1) == c).sum())
                    total += len(rows)
        return right / total if total else 0.0

    def scores(self, m, conts: list[list[int]]) -> list[float]:
        """The judge's probability of the concept for each continuation, read alone."""
        p = self.p
        if p.judge_prefixes is not None:
            return ms.likelihood_shares(m, p.lead, p.judge_prefixes, conts)[:, p.concept].tolist()
        j = self.judge
        rows = [p.lead + c for c in conts]
        return ms.concept_probability(m, rows, j.weight, j.bias, j.layer, PROBE.stage, PROBE.pool, p.concept)

    def point(
        self, strength: float, add: tuple[str, torch.Tensor] | None = None, prefix: list[int] | None = None
    ) -> SteeringPoint:
        p, lead = self.p, self.p.lead
        prompts = p.prompts if prefix is None else [lead + prefix + q[len(lead) :] for q in p.prompts]
        with self.service.run() as m:
            conts = ms.generate(m, prompts, self.sampling, add, self.cancel, self.step)
            scores = self.scores(m, conts)
            losses = ms.continuation_loss(m, p.prompts, conts)
        return _point(strength, scores, losses, [self.service.encoding.decode(c) for c in conts])


def _vector_methods(run: _Run) -> list[SteeringMethod]:
    p, c = run.p, run.c
    probe_dir, diffmean = ms.concept_direction(c.layers[p.layer], p.concept)
    vectors: dict[str, torch.Tensor] = {"diffmean": diffmean, "probe": probe_dir}
    if p.sae is not None and c.sae_feature is not None:
        vectors["sae"] = p.sae.sae.W_dec[c.sae_feature[0]].detach().float().cpu()
    hook = ms.steer_hook(p.layer)
    units = {k: ms.unit(v.float()) for k, v in vectors.items()}
    out = []
    for name in ms.VECTOR_METHODS:
        if name not in units:
            out.append(
                SteeringMethod(
                    method=name,
                    title=TITLES[name],
                    description=_described(p, c, name),
                    available=False,
                    reason=p.sae_reason,
                    points=[],
                )
            )
            continue
        points = [run.point(s, (hook, s * c.scale * units[name])) for s in p.req.strengths]
        feature = c.sae_feature if name == "sae" else None
        out.append(
            SteeringMethod(
                method=name,
                title=TITLES[name],
                description=_described(p, c, name),
                available=True,
                cosine_with_diffmean=round(float(units[name] @ units["diffmean"]), VALUE),
                sae_feature=feature[0] if feature else None,
                sae_feature_difference=round(feature[1], VALUE) if feature else None,
                points=points,
            )
        )
    return out


def _described(p: Plan, c: Concept, name: str) -> str:
    label, hook = p.data.labels[p.concept], ms.steer_hook(p.layer)
    if name == "diffmean":
        return f"the mean stream at {hook} of the {label} training examples minus the others', as a unit vector"
    if name == "probe":
        return f"the probe at {hook}: its weights for {label} minus the others', as a unit vector"
    if name == "sae":
        if p.sae is None or c.sae_feature is None:
            return "an SAE feature's decoder row"
        return (
            f"the decoder row of feature {c.sae_feature[0]} of {p.sae.name}: of its features, the one whose mean "
            f"activation is highest on the {label} examples over the others'"
        )
    return f"the prompt preceded by k of the {label} training examples (each followed by a blank line)"


def compute(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> SteeringResponse:
    """Read the concept from the examples, then generate: unsteered, each vector at each strength, each
    prefix; the progress counts decode steps."""
    start = time.perf_counter()
    c = _concept(service, p)
    run = _Run(service, p, c, on_chunk, cancel or (lambda: False))
    if run.cancel():
        raise Cancelled
    if on_chunk is not None:
        on_chunk(run.done, p.total)
    unsteered = run.point(0.0)
    methods = _vector_methods(run)
    prefix_points = [run.point(float(k), prefix=prefix) for k, prefix in zip(p.req.prefix_examples, p.prefixes)]
    methods.append(
        SteeringMethod(
            method="prompt",
            title=TITLES["prompt"],
            description=_described(p, c, "prompt"),
            available=True,
            prefix_tokens=[len(x) for x in p.prefixes],
            points=prefix_points,
        )
    )
    judge = run.judge
    return SteeringResponse(
        task=p.data.name,
        description=p.data.description,
        labels=p.data.labels,
        concept=p.data.labels[p.concept],
        layer=p.layer,
        hook_name=ms.steer_hook(p.layer),
        stream_norm=round(c.scale, VALUE),
        sae=p.sae.name if p.sae else None,
        judge=_judge(p, judge, run.judge_accuracy),
        prompts=[service.encoding.decode(q[len(p.lead) :]) for q in p.prompts],
        unsteered=unsteered,
        methods=methods,
        n_train=c.n_train,
        n_test=c.n_test,
        method=METHOD,
        seconds=round(time.perf_counter() - start, 3),
    )


def steer(service: ModelService, req: SteeringRequest) -> SteeringResponse:
    """The plain endpoint: plan with the request's limit, compute holding the plan's memory."""
    p = plan(service, req, limit=MAX_REQUEST_TOKENS)
    with memory.hold(p.need):
        return compute(service, p)


def _judge(p: Plan, probe: model_probes.LayerProbe, accuracy: float) -> SteeringJudge:
    if p.judge_prefixes is not None:
        return SteeringJudge(
            kind="likelihood",
            layer=None,
            hook_name=None,
            accuracy=round(accuracy, VALUE),
            stage=None,
            pool=None,
            prefix_tokens=[len(x) for x in p.judge_prefixes],
            description=f"the unsteered model's likelihood of the continuation after {JUDGE_EXAMPLES} training "
            "examples of each label: the concept's share of the labels' likelihoods",
        )
    return SteeringJudge(
        kind="probe",
        layer=probe.layer,
        hook_name=f"blocks.{probe.layer}.hook_{PROBE.stage}",
        accuracy=round(accuracy, VALUE),
        stage=PROBE.stage,
        pool=PROBE.pool,
        description="the probe of POST /api/v1/probes with the same examples, at its most accurate layer",
    )
