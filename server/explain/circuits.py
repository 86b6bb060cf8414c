"""Circuits from edges (POST /api/v1/circuits and its job form).

`plan` checks a request against the loaded model (the architecture, the tokens, the memory of its
runs and gradient pass, and its work, before anything runs), then records the two prompts (or finds
them in the cache); `compute` scores the edges (model/circuits.py: AtP and EAP-IG from gradients,
exact edge patching one graph run per edge), compares the estimates with the exact scores, and
finds the circuit. The prompts' runs and every score vector are kept per model in a budget of bytes,
so the page's next question about the same pair (another target share, another ranking, the exact
scores of more edges) computes only what is new.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gptscope.model import circuits as cc
from gptscope.model import patching as pt

from .. import memory
from ..digits import SECONDS, VALUE
from ..errors import InputError
from ..schemas.circuits import (
    METHODS,
    Circuit,
    CircuitNode,
    CircuitRequest,
    CircuitResponse,
    Comparison,
    CurvePoint,
    EdgeScores,
    LargestError,
)
from ..service import ModelService
from .common import arr, next_tokens
from .forward import ARRAY_JSON, TOKEN_VALUES, VALUE_BYTES
from .pair import Runs, answer_tokens, check_metric, check_tokens, metric_of, pair_ids
from .tokens import token_pieces

# The work a request may ask for, in multiply-adds of a plain forward pass's blocks: the plain POST up to
# MAX_SYNC_MACS (a few seconds on two cores), the job form up to MAX_JOB_MACS (the exact score of every
# edge of GPT-2 small's shape on 20 tokens, both estimates and the curve: about 1.6e13, some minutes on
# two cores). Against plain forward passes of the same rows (benchmarks/circuits.py, every_edge.py): an
# exact score's row costs EXACT_COST times the share of a plain pass's block-positions it computes
# (model/circuits.py exact_share: from its reader's block and the first position the prompts differ at
# on; measured 0.66 on the built-in model and 0.92-0.96 on GPT-2 small's shape), a run that mixes every
# edge (the faithfulness curve) GRAPH_COST times a plain pass (each reader's own norm and projection, the
# writers' mix), and a row of the gradient pass GRADIENT_COST times (forward and backward), these two
# measured on the built-in model.
MAX_SYNC_MACS = 150e9
MAX_JOB_MACS = 20e12
EXACT_COST = 1.1
GRAPH_COST = 6.0
GRADIENT_COST = 7.0
# Memory: the two prompts' runs (every writer's output and the stream at each block, model/circuits.py
# run_bytes: the built-in model 24 KB a token) are refused over RUN_BYTES each and cached up to
# RUN_BYTES per model; the gradient pass keeps about GRADIENT_FLOATS numbers per row, position and block
# for its backward pass (each reader's own input and normalised input, the block's activations),
# refused over GRADIENT_BYTES; score vectors (4 bytes an edge) are cached up to SCORE_BYTES. A request's
# peak (`need`: both runs, its largest step, the answer) is held in the process' memory budget
# (server/memory.py) while the plain endpoint computes it, and by its job while that runs.
RUN_BYTES = 256 * 2**20
GRADIENT_BYTES = 1024 * 2**20
SCORE_BYTES = 8 * 2**20
LARGEST_ERRORS = 8
RUNS = Runs(cc.record, RUN_BYTES)  # the prompts' recorded runs, per model (pair.py)


def _gradient_floats(cfg) -> int:
    """Numbers the gradient pass keeps per row and position, for every block (an estimate on the high side)."""
    readers = cfg.n_head + 2 * cfg.n_kv_head + 2
    return cfg.n_layer * (2 * readers * cfg.d_model + 12 * cfg.d_model + 3 * cfg.d_mlp + 4 * cfg.n_head * cfg.n_ctx)


@dataclass
class Plan:
    """A checked request: the graph, the two prompts' runs, the metric's tokens, the edges named for an
    exact score, and the graph runs it will take."""

    req: CircuitRequest
    graph: cc.Graph
    clean: cc.Run
    corrupt: cc.Run
    answer: int
    wrong: int | None
    named: list[int]
    total: int
    need: memory.Need | None = None  # its peak memory (server/memory.py), which its job holds

    def reduce(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return pt.logprob(self.answer) if self.wrong is None else pt.logit_diff(self.answer, self.wrong)

    def key(self, method: str) -> tuple:
        steps = self.req.steps if method == "eap_ig" else None
        return (self.clean.ids, self.corrupt.ids, self.answer, self.wrong, method, steps)

    def metrics(self) -> tuple[float, float]:
        m = self.reduce()(torch.stack([self.clean.logits, self.corrupt.logits]))
        return float(m[0]), float(m[1])


def _scores(service: ModelService):
    return service.store("circuits.scores", SCORE_BYTES, lambda t: t.untyped_storage().nbytes())


def _record(service: ModelService, ids: list[int]) -> cc.Run:
    return RUNS.get(service, ids)


def _check_request(service: ModelService, req: CircuitRequest, graph: cc.Graph) -> list[int]:
    """The request's own limits against this model; -> the edges named for an exact score."""
    check_tokens(service, req)
    if len(set(req.methods)) != len(req.methods):
        raise InputError("methods", f"methods must not repeat a method (got {req.methods})")
    if req.rank_by == "exact" and req.exact != "all":
        raise InputError("rank_by", "ranking by the exact scores needs every edge's: set exact to all")
    if req.rank_by != "exact" and req.rank_by not in req.methods:
        raise InputError("rank_by", f"ranking by {req.rank_by} needs it in methods (got {req.methods})")
    index = {name: i for i, name in enumerate(graph.names())}
    named = []
    for n, name in enumerate(req.exact_edges):
        if name not in index:
            some = ", ".join(list(index)[:: max(1, len(index) // 3)][:3])
            raise InputError(f"exact_edges.{n}", f"this model has no edge {name!r}; its edges are named like {some}")
        named.append(index[name])
    return named


def _exact_edges(plan_req: CircuitRequest, graph: cc.Graph, named: list[int]) -> int:
    """How many edges an exact score is asked for (at most)."""
    if plan_req.exact == "all":
        return graph.n_edges
    top = min(plan_req.exact_top, graph.n_edges) if plan_req.exact == "top" else 0
    return min(graph.n_edges, top + len(named))


def _check_work(service: ModelService, req: CircuitRequest, graph: cc.Graph, named: list[int], ids, limit: float):
    """Refuse a request over its memory or its work limit, before it runs (ids: the clean and corrupted
    prompts' tokens); -> the graph runs it takes."""
    cfg = service.model.cfg
    clean_ids, corrupted_ids = ids
    T = len(clean_ids)
    field = "clean" if req.clean is not None else "clean_ids"
    if cc.run_bytes(cfg, T) > RUN_BYTES:
        per_token = cc.run_bytes(cfg, 1) - cc.run_bytes(cfg, 0)
        raise InputError(
            field,
            f"the prompts have {T:,} tokens; edge scores keep every writer's output of both prompts, {per_token:,} "
            f"bytes a token on this model, up to {RUN_BYTES // 2**20} MiB a prompt: at most "
            f"{(RUN_BYTES - cc.run_bytes(cfg, 0)) // per_token:,} tokens",
        )
    rows = req.steps if "eap_ig" in req.methods else 1
    if rows * T * _gradient_floats(cfg) * 4 > GRADIENT_BYTES:
        most = max(0, GRADIENT_BYTES // (T * _gradient_floats(cfg) * 4))
        raise InputError(
            "steps",
            f"EAP-IG's {rows} steps on {T:,} tokens would keep more than {GRADIENT_BYTES // 2**20} MiB for the "
            f"backward pass on this model: at most {most} steps for these prompts",
        )
    exact_rows = _exact_edges(req, graph, named)
    curve = len(cc.curve_sizes(graph.n_edges)) + math.ceil(math.log2(max(2, graph.n_edges)))
    block = sum(p.numel() for p in service.model.blocks[0].parameters())
    per_run = cfg.n_layer * T * block
    grad_rows = ("atp" in req.methods) + (req.steps if "eap_ig" in req.methods else 0)
    # an exact row runs the blocks from its reader's on, from the first position the prompts differ at
    # (model/circuits.py exact_share): for the top edges at most as much as an edge into block 0, for
    # every edge their average
    s0 = cc.first_changed(cfg, clean_ids, corrupted_ids)
    layers = graph.reader_layer() if req.exact == "all" else torch.zeros(1, dtype=torch.long)
    share = float(cc.exact_share(cfg, T, s0, layers).mean())
    macs = per_run * (GRADIENT_COST * grad_rows + EXACT_COST * share * exact_rows + GRAPH_COST * curve)
    if macs > limit:
        where = f"start it as a job, POST /api/v1/circuits/jobs (up to {MAX_JOB_MACS:.0e})"
        raise InputError(
            "exact",
            f"this is about {exact_rows + curve:,} graph runs and {grad_rows} gradient rows of {T:,} tokens, "
            f"{macs:.2e} multiply-adds; this endpoint computes up to {limit:.0e}: ask for exact scores of fewer "
            "edges (exact=top, a smaller exact_top) or shorter prompts"
            + (f", or {where}" if limit < MAX_JOB_MACS else ""),
        )
    return exact_rows + curve


@dataclass
class Checked:
    """A request checked before either prompt runs: its ids, the graph, the edges named, its graph runs
    and its memory."""

    clean_ids: list[int]
    corrupted_ids: list[int]
    graph: cc.Graph
    named: list[int]
    total: int
    need: memory.Need


def need(service: ModelService, req: CircuitRequest, graph: cc.Graph, T: int) -> memory.Need:
    """The request's peak memory, an upper bound: both prompts' runs, then the largest of its steps
    (the gradient pass of its rows with the scores' float64 products, a batch of exact scores, a
    batched graph run of the curve: model/circuits.py), and the answer (every edge's name, ends and
    scores)."""
    cfg = service.model.cfg
    n_up, n_down = len(graph.upstream), len(graph.downstream)
    rows = req.steps if "eap_ig" in req.methods else 1
    # the gradient pass: twice _gradient_floats a row and position (measured: up to about 1.6 times, with
    # the heap's freed blocks and the pass before's), and the scores' float64 products of every reader's
    # gradient and writer's change
    gradient = 2 * rows * T * _gradient_floats(cfg) * 4 + 2 * (n_up + n_down) * T * cfg.d_model * 8
    exact = cc.exact_bytes(cfg, T) if req.exact != "none" or req.exact_edges else 0
    curve = cc.graph_run_bytes(cfg, T, graph.n_edges, len(cc.curve_sizes(graph.n_edges)))
    steps = {"steps": gradient, "exact": exact, "curve": curve}
    answer = graph.n_edges * ((len(req.methods) + 1) * (ARRAY_JSON + 8) + 3 * VALUE_BYTES)
    answer += 2 * T * TOKEN_VALUES * VALUE_BYTES
    total = 2 * cc.run_bytes(cfg, T) + max(steps.values()) + answer
    what = f"these edge scores on {T:,} tokens"
    if "eap_ig" in req.methods and req.steps > 1 and max(steps, key=lambda k: steps[k]) == "steps":
        return memory.Need(total, "steps", what, "fewer steps or shorter prompts")
    return memory.Need(total, "clean" if req.clean is not None else "clean_ids", what, "shorter prompts")


def check(service: ModelService, req: CircuitRequest, limit: float) -> Checked:
    """Every check that needs no run (named by its field), and the memory the request needs."""
    try:
        cc.check_config(service.model.cfg)
    except ValueError as e:
        raise InputError("clean" if req.clean is not None else "clean_ids", f"the served model: {e}") from None
    clean_ids, corrupted_ids = pair_ids(service, req)
    graph = cc.graph_of(service.model.cfg)
    named = _check_request(service, req, graph)
    total = _check_work(service, req, graph, named, (clean_ids, corrupted_ids), limit)
    return Checked(clean_ids, corrupted_ids, graph, named, total, need(service, req, graph, len(clean_ids)))


def plan(service: ModelService, req: CircuitRequest, limit: float | None = None) -> Plan:
    """Check the request (every limit named by its field), then record both prompts. The plan's `need`
    is its peak memory (the job form holds it, server/jobs.py)."""
    limit = MAX_SYNC_MACS if limit is None else limit
    return planned(service, req, check(service, req, limit))


def planned(service: ModelService, req: CircuitRequest, c: Checked) -> Plan:
    """The checked request's plan: both prompts recorded (or found in the cache), the metric's tokens."""
    clean, corrupt = _record(service, c.clean_ids), _record(service, c.corrupted_ids)
    answer, wrong = answer_tokens(clean.logits, corrupt.logits, req)
    p = Plan(req, c.graph, clean, corrupt, answer, wrong, c.named, c.total, c.need)
    check_metric(*p.metrics(), "no share of it can be recovered", "the prompts disagree on")
    return p


class _Progress:
    """Graph runs done, across the exact scores and the circuit's search."""

    def __init__(self, on_chunk: Callable[[int, int], None] | None, total: int) -> None:
        self.on_chunk, self.total, self.base, self.done = on_chunk, total, 0, 0

    def part(self, done: int, _total: int) -> None:
        self.done = self.base + done
        if self.on_chunk is not None:
            self.on_chunk(min(self.done, self.total), self.total)

    def finish_part(self) -> None:
        self.base = self.done


def _estimate(service: ModelService, p: Plan, method: str) -> tuple[torch.Tensor, float, int]:
    """(scores, seconds, rows of the gradient pass run) of atp or eap_ig, from the cache or computed."""
    store = _scores(service)
    got = store.get(p.key(method))
    if got is not None:
        return got, 0.0, 0
    t0 = time.perf_counter()
    with service.run() as m:
        got = cc.attribution(m, p.graph, p.clean, p.corrupt, p.reduce(), p.req.steps if method == "eap_ig" else 0)
    store.put(p.key(method), got)
    return got, time.perf_counter() - t0, p.req.steps if method == "eap_ig" else 1


def _exact(service: ModelService, p: Plan, edges: list[int], progress: _Progress, cancel) -> tuple[torch.Tensor, float]:
    """The exact scores of `edges` (every edge's vector, NaN where not known): those not in the cache
    are computed, and the cache keeps every one known so far."""
    store = _scores(service)
    known = store.get(p.key("exact"))
    known = torch.full((p.graph.n_edges,), float("nan"), dtype=torch.float64) if known is None else known.clone()
    todo = [e for e in edges if math.isnan(float(known[e]))]
    t0 = time.perf_counter()
    if todo:
        values = cc.exact(
            service.model, p.graph, p.clean, p.corrupt, todo, p.reduce(), on_chunk=progress.part, cancel=cancel,
            lock=service.run, columns=None if p.wrong is None else [p.answer, p.wrong],
        )  # fmt: skip
        known[torch.tensor(todo)] = values
        store.put(p.key("exact"), known)
    progress.finish_part()
    return known, time.perf_counter() - t0 if todo else 0.0


def _comparison(method: str, estimate: torch.Tensor, exact: torch.Tensor, names: list[str]) -> Comparison:
    both = torch.nonzero(~torch.isnan(exact)).flatten()
    est, ex = estimate[both], exact[both]

    def r(f) -> float | None:
        value = f(est, ex) if len(both) >= 3 else float("nan")
        return None if math.isnan(value) else round(value, VALUE)

    worst = torch.argsort(-(est - ex).abs())[:LARGEST_ERRORS].tolist()
    return Comparison(
        method=method,  # type: ignore[arg-type]
        edges=len(both),
        pearson=r(cc.pearson),
        spearman=r(cc.spearman),
        largest_errors=[
            LargestError(
                edge=int(both[i]),
                name=names[int(both[i])],
                estimate=round(float(est[i]), VALUE),
                exact=round(float(ex[i]), VALUE),
                error=round(float(est[i] - ex[i]), VALUE),
            )
            for i in worst
        ],
    )


def _circuit(service: ModelService, p: Plan, ranking: torch.Tensor, progress: _Progress, cancel) -> Circuit:
    """The faithfulness curve along the ranking (largest |score| first) and the smallest circuit that
    recovers the target share."""
    order = torch.argsort(-ranking.abs(), stable=True)
    sizes = cc.curve_sizes(p.graph.n_edges)
    kw = dict(on_chunk=progress.part, cancel=cancel, lock=service.run)
    values = cc.faithfulness(service.model, p.graph, p.clean, p.corrupt, order, p.reduce(), sizes, **kw)
    progress.finish_part()
    size, metric = cc.smallest_circuit(
        service.model, p.graph, p.clean, p.corrupt, order, p.reduce(), sizes, values, p.req.target, **kw
    )
    m_clean, m_corr = p.metrics()

    def share(m: float) -> float:
        return (m - m_corr) / (m_clean - m_corr)

    return Circuit(
        ranked_by=p.req.rank_by,
        target=p.req.target,
        curve=[
            CurvePoint(edges=k, metric=round(float(v), VALUE), recovered=round(share(float(v)), VALUE))
            for k, v in zip(sizes, values)
        ],
        edges=order[:size].tolist(),
        metric=round(metric, VALUE),
        recovered=round(share(metric), VALUE),
        reached=share(metric) >= p.req.target,
    )


def _exact_wanted(p: Plan, estimates: dict) -> list[int]:
    if p.req.exact == "all":
        return list(range(p.graph.n_edges))
    wanted = list(p.named)
    if p.req.exact == "top":
        by = estimates[p.req.rank_by if p.req.rank_by in estimates else next(iter(estimates))]
        wanted += torch.argsort(-by.abs(), stable=True)[: p.req.exact_top].tolist()
    return list(dict.fromkeys(wanted))


def compute(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> CircuitResponse:
    """Score the edges, compare, find the circuit; on_chunk(done, total) counts graph runs."""
    t0 = time.perf_counter()
    progress = _Progress(on_chunk, p.total)
    scores, rows = [], 0
    estimates: dict[str, torch.Tensor] = {}
    for method in p.req.methods:
        values, seconds, ran = _estimate(service, p, method)
        rows += ran
        estimates[method] = values
        steps = p.req.steps if method == "eap_ig" else None
        scores.append(
            EdgeScores(
                method=method,
                description=METHODS[method],
                steps=steps,
                edges=None,
                values=arr(values, VALUE),
                seconds=round(seconds, SECONDS),
            )
        )
    exact = None
    wanted = _exact_wanted(p, estimates) if p.req.exact != "none" or p.named else []
    if wanted:
        exact, seconds = _exact(service, p, wanted, progress, cancel)
        every = p.req.exact == "all"
        scores.append(
            EdgeScores(
                method="exact",
                description=METHODS["exact"],
                steps=None,
                edges=None if every else wanted,
                values=arr(exact if every else exact[torch.tensor(wanted)], VALUE),
                seconds=round(seconds, SECONDS),
            )
        )
    names = p.graph.names()
    comparisons = [] if exact is None else [_comparison(m, v, exact, names) for m, v in estimates.items()]
    ranking = exact if p.req.rank_by == "exact" else estimates[p.req.rank_by]
    assert ranking is not None
    circuit = _circuit(service, p, ranking, progress, cancel)
    return _response(service, p, scores, comparisons, circuit, rows + progress.done, time.perf_counter() - t0)


def circuits(service: ModelService, req: CircuitRequest) -> CircuitResponse:
    """The plain endpoint's scores: checked, then recorded and computed with its memory held (server/memory.py)."""
    c = check(service, req, MAX_SYNC_MACS)
    with memory.hold(c.need):
        return compute(service, planned(service, req, c))


def _node(n: cc.Node) -> CircuitNode:
    return CircuitNode(name=n.name, kind=n.kind, layer=n.layer, head=n.head)


def _response(service, p: Plan, scores, comparisons, circuit, runs: int, seconds: float) -> CircuitResponse:
    cfg = service.model.cfg
    m_clean, m_corr = p.metrics()
    up, down = p.graph.ends()
    return CircuitResponse(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head,
        clean_tokens=token_pieces(service.encoding, list(p.clean.ids)),
        corrupted_tokens=token_pieces(service.encoding, list(p.corrupt.ids)),
        differs=[i for i, (a, b) in enumerate(zip(p.clean.ids, p.corrupt.ids)) if a != b],
        metric=metric_of(service, p.answer, p.wrong, len(p.clean.ids)),
        clean_metric=round(m_clean, VALUE),
        corrupted_metric=round(m_corr, VALUE),
        clean_top=next_tokens(service, p.clean.logits, 10),
        corrupted_top=next_tokens(service, p.corrupt.logits, 10),
        writers=[_node(n) for n in p.graph.upstream],
        readers=[_node(n) for n in p.graph.downstream],
        edges=p.graph.names(),
        edge_writer=up.tolist(),
        edge_reader=down.tolist(),
        scores=scores,
        comparisons=comparisons,
        circuit=circuit,
        runs=runs,
        seconds=round(seconds, SECONDS),
    )
