"""Activation patching between a clean and a corrupted prompt (POST /api/v1/patch and its job form).

`plan` checks a request against the loaded model (its work and its memory before anything runs),
then runs (or finds in the cache) the two prompts and takes the sweeps already cached; `compute`
runs the patched passes that are not (model/patching.py batches them) and builds the answer from
the plan alone. The two prompts' recorded runs and each finished sweep are cached per model, in a
budget of bytes, so the page's next question about the same pair (another cell's distribution,
one more sweep) only runs what is new.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gptscope.model import patching as pt
from gptscope.model.gpt import GPT

from .. import memory
from ..digits import FINE, SECONDS, VALUE
from ..errors import InputError
from ..schemas.patch import (
    MEANINGS,
    Compared3,
    PatchCell,
    PatchDetail,
    PatchRequest,
    PatchResponse,
    PatchSweep,
)
from ..service import LRU, ModelService
from .common import arr, check_index, next_tokens, token_text
from .forward import ARRAY_JSON, TOKEN_VALUES, VALUE_BYTES
from .pair import Runs, answer_tokens, check_metric, check_tokens, metric_of, pair_ids
from .tokens import token_pieces

# The work a request may ask for, in multiply-adds of the blocks it runs (positions computed x blocks
# x parameters per block): the plain POST answers up to MAX_SYNC_MACS (a few seconds on two cores:
# the built-in model's every sweep of a 90-token pair); a job (POST /api/v1/patch/jobs) up to
# MAX_JOB_MACS, showing its progress (GPT-2 small's full 20-token sweep is about 0.4e12).
MAX_SYNC_MACS = 150e9
MAX_JOB_MACS = 6e12
# Memory, per model. A prompt's recorded run holds every activation a site reads, about
# (7 x n_layer + 1) x T x d numbers (model/patching.py record_bytes; GPT-2 small: 261 KB a token, 8.6 MB
# for a 32-token prompt). A prompt whose record would take more than RECORD_BYTES is refused before
# it runs (GPT-2 small: up to 1,027 tokens, its whole context; the built-in model: 33 KB a token, up to
# 8,128), so a request holds at most two of them; the cache keeps up to RECORD_BYTES of recorded runs and
# SWEEP_BYTES of finished sweeps (a sweep is rows x columns float32 numbers: GPT-2 small's resid_pre
# over 1,024 positions is 53 KB), the least recently used dropped first. A request's peak (`need`: both
# records, the largest batch of patched runs, the answer) is held in the process' memory budget
# (server/memory.py) while the plain endpoint records and runs it, and by its job while that runs.
RECORD_BYTES = 256 * 2**20
SWEEP_BYTES = 4 * 2**20


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


class _Cache:
    """Per model: the recorded runs of recent prompts (pair.Runs) and recent sweeps' patched metrics,
    each kept in a budget of bytes (least recently used dropped first)."""

    def __init__(self) -> None:
        self.runs = Runs(pt.record, RECORD_BYTES)
        self._lock = threading.Lock()
        self._by_model: weakref.WeakKeyDictionary[GPT, LRU[tuple, torch.Tensor]] = weakref.WeakKeyDictionary()

    def sweeps(self, model: GPT) -> LRU[tuple, torch.Tensor]:
        with self._lock:
            got = self._by_model.get(model)
            if got is None:
                got = self._by_model[model] = LRU(SWEEP_BYTES, _tensor_bytes)
            return got

    def has_records(self, model: GPT, *prompts: list[int]) -> bool:
        """Whether every one of these prompts' runs is cached (none is run)."""
        return self.runs.has(model, *prompts)

    def record(self, service: ModelService, ids: list[int]) -> pt.Recorded:
        return self.runs.get(service, ids)

    def sweep(self, model: GPT, key: tuple) -> torch.Tensor | None:
        return self.sweeps(model).get(key)

    def keep_sweep(self, model: GPT, key: tuple, values: torch.Tensor) -> None:
        self.sweeps(model).put(key, values)


CACHE = _Cache()


@dataclass
class Plan:
    """A checked request: the two prompts' runs, the metric's tokens, the sweeps' patched metrics
    found in the cache, and the sweeps still to run. The answer is built from the plan alone, so a
    sweep the cache drops meanwhile (another request's) is still here."""

    req: PatchRequest
    clean: pt.Recorded
    corrupted: pt.Recorded
    answer: int
    wrong: int | None
    rows: dict[str, list[list[pt.Site]]] = field(default_factory=dict)  # kind -> its cells, row by row
    values: dict[str, torch.Tensor] = field(default_factory=dict)  # kind -> its patched metrics (rows x columns)
    todo: list[str] = field(default_factory=list)  # the kinds not in the cache, which compute() adds to values
    total: int = 0  # patched runs to compute
    need: memory.Need | None = None  # its peak memory (server/memory.py), which its job holds

    @property
    def base(self) -> pt.Recorded:
        return self.corrupted if self.req.direction == "denoise" else self.clean

    @property
    def source(self) -> pt.Recorded:
        return self.clean if self.req.direction == "denoise" else self.corrupted

    def reduce(self) -> Callable[[torch.Tensor], torch.Tensor]:
        if self.wrong is None:
            return pt.logprob(self.answer)
        return pt.logit_diff(self.answer, self.wrong)

    def sweep_key(self, kind: str) -> tuple:
        heads = tuple((h.layer, h.head) for h in self.req.heads) if kind == "head_position" else ()
        return (self.clean.ids, self.corrupted.ids, self.req.direction, self.answer, self.wrong, kind, heads)


def _check_cell(cell: PatchCell, L: int, H: int, T: int) -> None:
    check_index(cell.layer, L + 1 if cell.kind == "resid_pre" else L, "cell.layer")
    if cell.kind == "head":
        if cell.position is not None:
            raise InputError("cell.position", "a `head` cell patches every position: leave position out")
    elif cell.position is None:
        raise InputError("cell.position", f"a {cell.kind} cell needs a position, 0..{T - 1}")
    else:
        check_index(cell.position, T, "cell.position")
    if cell.kind in ("head", "head_position"):
        if cell.head is None:
            raise InputError("cell.head", f"a {cell.kind} cell needs a head, 0..{H - 1}")
        check_index(cell.head, H, "cell.head")
    elif cell.head is not None:
        raise InputError("cell.head", f"a {cell.kind} cell has no head: leave head out")


def _check_request(service: ModelService, req: PatchRequest, T: int) -> None:
    cfg = service.model.cfg
    for n, h in enumerate(req.heads):
        check_index(h.layer, cfg.n_layer, f"heads.{n}.layer")
        check_index(h.head, cfg.n_head, f"heads.{n}.head")
    if "head_position" in req.kinds and not req.heads:
        raise InputError("heads", "the head_position sweep needs a head set: give heads [{layer, head}, ...]")
    if len(set(req.kinds)) != len(req.kinds):
        raise InputError("kinds", f"kinds must not repeat a kind (got {req.kinds})")
    check_tokens(service, req)
    if req.cell is not None:
        _check_cell(req.cell, cfg.n_layer, cfg.n_head, T)


def _block_params(model: GPT) -> int:
    return sum(p.numel() for p in model.blocks[0].parameters())


def _check_memory(service: ModelService, req: PatchRequest, T: int) -> None:
    """Refuse prompts whose recorded run would not fit RECORD_BYTES, naming the longest that does."""
    model = service.model
    if pt.record_bytes(model, T) <= RECORD_BYTES:
        return
    per_token = pt.record_bytes(model, 1) - pt.record_bytes(model, 0)
    most = (RECORD_BYTES - pt.record_bytes(model, 0)) // per_token
    raise InputError(
        "clean" if req.clean is not None else "clean_ids",
        f"the prompts have {T:,} tokens; patching keeps every activation of both prompts, {per_token:,} bytes a "
        f"token on this model, and a prompt may take up to {RECORD_BYTES // 2**20} MiB: at most {most:,} tokens",
    )


def _check_cost(
    service: ModelService, rows: dict[str, list[list[pt.Site]]], kinds: list[str], T: int, limit: float
) -> None:
    """Refuse sweeps (these kinds of `rows`) that are more than `limit` multiply-adds of T-token prompts."""
    runs = [[s] for k in kinds for row in rows[k] for s in row]
    macs = pt.cost(service.model, T, runs) * _block_params(service.model)
    if macs > limit:
        where = f"start it as a job, POST /api/v1/patch/jobs (up to {MAX_JOB_MACS:.0e})"
        raise InputError(
            "kinds",
            f"these sweeps are {len(runs):,} patched runs, about {macs:.2e} multiply-adds; this endpoint computes "
            f"up to {limit:.0e}: ask for fewer kinds or shorter prompts"
            + (f", or {where}" if limit < MAX_JOB_MACS else ""),
        )


@dataclass
class Checked:
    """A request checked before either prompt runs: its ids, the sweeps' cells, and its memory."""

    clean_ids: list[int]
    corrupted_ids: list[int]
    rows: dict[str, list[list[pt.Site]]]
    need: memory.Need


def need(service: ModelService, req: PatchRequest, T: int, rows: dict[str, list[list[pt.Site]]]) -> memory.Need:
    """The sweep's peak memory, an upper bound: both prompts' recorded runs, the patched runs' largest
    batch (model/patching.py batch_bytes, every requested sweep counted as if none were cached), and
    the answer's rows x columns numbers (patched and effect) with both prompts' tokens."""
    model = service.model
    runs = [[s] for k in rows for row in rows[k] for s in row]
    answer = 2 * len(runs) * ARRAY_JSON + 2 * T * TOKEN_VALUES * VALUE_BYTES
    return memory.Need(
        2 * pt.record_bytes(model, T) + pt.batch_bytes(model, T, runs) + answer,
        "clean" if req.clean is not None else "clean_ids",
        f"this sweep of {len(runs):,} patched runs on {T:,} tokens",
        "shorter prompts or fewer kinds",
    )


def check(service: ModelService, req: PatchRequest, limit: float) -> Checked:
    """Every check that needs no run (named by its field): the model, the prompts, the cells, the
    records' memory, the work unless both runs are cached (see `plan`), and the memory it all needs."""
    try:
        pt.check_config(service.model.cfg)
    except ValueError as e:
        raise InputError("clean" if req.clean is not None else "clean_ids", f"the served model: {e}") from None
    clean_ids, corrupted_ids = pair_ids(service, req)
    cfg, T = service.model.cfg, len(clean_ids)
    _check_request(service, req, T)
    _check_memory(service, req, T)
    heads = [(h.layer, h.head) for h in req.heads]
    rows: dict[str, list[list[pt.Site]]] = {k: pt.sweep(k, cfg.n_layer, cfg.n_head, T, heads) for k in req.kinds}
    if not CACHE.has_records(service.model, clean_ids, corrupted_ids):
        _check_cost(service, rows, list(rows), T, limit)
    return Checked(clean_ids, corrupted_ids, rows, need(service, req, T, rows))


def plan(service: ModelService, req: PatchRequest, limit: float | None = None) -> Plan:
    """Check the request (every limit named by its field), record both prompts, and find what to run;
    `limit`: the most multiply-adds it may ask for (MAX_SYNC_MACS unless given). The plan's `need` is
    its peak memory (the job form holds it, server/jobs.py).

    The work and the memory are checked before a prompt runs: a sweep's cells and their cost do not
    depend on the runs, only whether a sweep is cached does (its key holds the answer token, which
    may come from the clean run). So unless both runs are cached already, every requested sweep
    counts; with both cached, the sweeps cached too are free."""
    limit = MAX_SYNC_MACS if limit is None else limit
    return planned(service, req, check(service, req, limit), limit)


def planned(service: ModelService, req: PatchRequest, c: Checked, limit: float) -> Plan:
    """The checked request's plan: both prompts recorded (or found in the cache), the cached sweeps taken."""
    T = len(c.clean_ids)
    clean, corrupted = CACHE.record(service, c.clean_ids), CACHE.record(service, c.corrupted_ids)
    answer, wrong = answer_tokens(clean.logits, corrupted.logits, req)
    p = Plan(req, clean, corrupted, answer, wrong, c.rows, need=c.need)
    m_clean, m_corr = (float(v) for v in p.reduce()(torch.stack([clean.logits, corrupted.logits])))
    check_metric(m_clean, m_corr, "the effect is undefined", "the two prompts disagree on")
    for k in req.kinds:
        cached = CACHE.sweep(service.model, p.sweep_key(k))
        if cached is not None:
            p.values[k] = cached
    p.todo = [k for k in req.kinds if k not in p.values]
    _check_cost(service, c.rows, p.todo, T, limit)
    p.total = sum(len(row) for k in p.todo for row in p.rows[k])
    return p


def compute(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> PatchResponse:
    """Run the plan's uncached sweeps (batched, the model's lock held per batch) and build the answer."""
    t0 = time.perf_counter()
    runs = [[s] for k in p.todo for row in p.rows[k] for s in row]
    if runs:
        values = pt.patched(service.model, p.base, p.source, runs, p.reduce(), on_chunk, cancel, lock=service.run)
        at = 0
        for k in p.todo:
            n_rows, n_cols = len(p.rows[k]), len(p.rows[k][0]) if p.rows[k] else 0
            p.values[k] = values[at : at + n_rows * n_cols].view(n_rows, n_cols).clone()  # its own storage
            CACHE.keep_sweep(service.model, p.sweep_key(k), p.values[k])
            at += n_rows * n_cols
    return _response(service, p, len(runs), time.perf_counter() - t0)


def patch(service: ModelService, req: PatchRequest) -> PatchResponse:
    """The plain endpoint's sweep: checked, then recorded and run with its memory held (server/memory.py)."""
    c = check(service, req, MAX_SYNC_MACS)
    with memory.hold(c.need):
        return compute(service, planned(service, req, c, MAX_SYNC_MACS))


def _site(cell: PatchCell) -> pt.Site:
    kind = "z" if cell.kind in ("head", "head_position") else cell.kind
    return pt.Site(kind, cell.layer, cell.position, cell.head)  # type: ignore[arg-type]


def _detail(service: ModelService, p: Plan, clean_m: float, corr_m: float) -> PatchDetail | None:
    cell = p.req.cell
    if cell is None:
        return None
    logits = pt.patched(service.model, p.base, p.source, [[_site(cell)]], lambda x: x, lock=service.run)[0]
    value = float(p.reduce()(logits[None])[0])
    probs = [torch.softmax(x.float(), -1) for x in (p.clean.logits, p.corrupted.logits, logits)]
    k = p.req.top_k
    union = list(dict.fromkeys(i for pr in probs for i in torch.topk(pr, k).indices.tolist()))
    union.sort(key=lambda i: -float(probs[0][i]))
    return PatchDetail(
        cell=cell,
        patched_metric=round(value, VALUE),
        effect=round((value - corr_m) / (clean_m - corr_m), VALUE),
        top=next_tokens(service, logits, k),
        compared=[
            Compared3(
                id=i,
                text=token_text(service, i),
                clean=round(float(probs[0][i]), FINE),
                corrupted=round(float(probs[1][i]), FINE),
                patched=round(float(probs[2][i]), FINE),
            )
            for i in union
        ],
    )


def _response(service: ModelService, p: Plan, n_runs: int, seconds: float) -> PatchResponse:
    cfg = service.model.cfg
    clean_m, corr_m = (float(v) for v in p.reduce()(torch.stack([p.clean.logits, p.corrupted.logits])))
    sweeps = []
    for k in p.req.kinds:
        values = p.values[k]
        sweeps.append(
            PatchSweep(
                kind=k,  # type: ignore[arg-type]
                meaning=MEANINGS[k],
                columns="head" if k == "head" else "position",
                row_layers=[row[0].layer for row in p.rows[k]],
                row_heads=[row[0].head or 0 for row in p.rows[k]] if k == "head_position" else None,
                patched=arr(values, VALUE),
                effect=arr((values - corr_m) / (clean_m - corr_m), VALUE),
            )
        )
    return PatchResponse(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        clean_tokens=token_pieces(service.encoding, list(p.clean.ids)),
        corrupted_tokens=token_pieces(service.encoding, list(p.corrupted.ids)),
        differs=[i for i, (a, b) in enumerate(zip(p.clean.ids, p.corrupted.ids)) if a != b],
        direction=p.req.direction,
        base="corrupted" if p.req.direction == "denoise" else "clean",
        metric=metric_of(service, p.answer, p.wrong, len(p.clean.ids)),
        clean_metric=round(clean_m, VALUE),
        corrupted_metric=round(corr_m, VALUE),
        clean_top=next_tokens(service, p.clean.logits, p.req.top_k),
        corrupted_top=next_tokens(service, p.corrupted.logits, p.req.top_k),
        sweeps=sweeps,
        detail=_detail(service, p, clean_m, corr_m),
        runs=n_runs,
        seconds=round(seconds, SECONDS),
    )
