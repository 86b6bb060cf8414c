"""Token attribution (POST /api/v1/token-attribution): which input tokens a prediction came from,
by integrated gradients on the input embeddings (model/token_attribution.py), with gradient x input,
occlusion and attention rollout beside it. One position's prediction is answered in the request; every
position's (a matrix) may be more work than a request, so it is an Analysis (server/jobs.py): `plan`
checks the request, counts its runs of the prompt and estimates its peak memory (`need`, server/memory.py:
more than the budget is a 422 naming the prompt, or every_position when one position would fit), `compute`
makes the runs a batched pass at a time, the model's lock held per pass and `cancel` asked before each. The
plain endpoint holds the need around its work (`attribute`), a job's runner around the job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from gptscope.model import token_attribution as ta

from .. import memory
from ..digits import FINE, VALUE
from ..errors import InputError
from ..schemas.token_attribution import (
    AttributionRow,
    Completeness,
    MethodNote,
    TokenAttributionRequest,
    TokenAttributionResponse,
    TokenRef,
)
from ..service import ModelService
from .common import check_index, given_ids, prompt_ids, token_text
from .tokens import token_pieces

# The work a request may ask for, in multiply-adds of the blocks it runs (token-positions run forward,
# a forward and backward pass counted as 3, times the blocks' parameters): the plain POST answers up to
# MAX_SYNC_MACS (the built-in model: one position of a full 256-token context at 32 steps, 2.4e11, or
# every position of a 32-token prompt, 1.4e11; a few seconds on two cores), a job
# (POST /api/v1/token-attribution/jobs) up to MAX_JOB_MACS (every position of a full context, 8.8e12).
MAX_SYNC_MACS = 300e9
MAX_JOB_MACS = 10e12
# The answer's memory beside the work's (model/token_attribution.py's peak_bytes): per number of a row's four
# lists (T each) and per row, as objects and JSON on the way out (measured: ~55 bytes a number).
ANSWER_VALUE_BYTES = 100
ANSWER_ROW_BYTES = 2_000
POSITIONS_PER_UNEMBED = 256  # plan's top predictions: positions unembedded at a time

BASELINES = {
    "zero": "every token's input embedding (its row of W_E) replaced by zeros; a learned position embedding is kept",
    "mean": "every token's input embedding replaced by the mean row of W_E (an average token); a learned position "
    "embedding is kept",
}
RULES = {
    "gauss_legendre": "Gauss-Legendre quadrature: the gradient at the steps' Gauss-Legendre points of the straight "
    "path from the baseline to the input, weighted, times (input - baseline), summed over each token's d numbers "
    "(its error falls far faster than a Riemann sum's where f is smooth along the path)",
    "midpoint": "the midpoint rule: the gradient at the middle of each of the steps' equal parts of the straight path "
    "from the baseline to the input, averaged, times (input - baseline), summed over each token's d numbers",
}
METHODS = [
    MethodNote(
        name="integrated_gradients",
        description="the gradient of f averaged along the path from the baseline to the input, times (input - "
        "baseline); the tokens' numbers add up to f(input) - f(baseline) (completeness)",
    ),
    MethodNote(
        name="gradient_x_input",
        description="the gradient at the input alone times (input - baseline): one point of the path instead of "
        "all of it (with the zero baseline, plain gradient x input)",
    ),
    MethodNote(
        name="occlusion",
        description="f(input) - f(input with that one token's embedding replaced by the baseline's)",
    ),
    MethodNote(
        name="rollout",
        description="attention rollout: each layer's attention averaged over heads, mixed half and half with the "
        "identity for the residual stream, multiplied through the layers; ignores the MLPs, the norms and the "
        "target, and each row sums to 1",
    ),
]


@dataclass
class Plan:
    """A checked request: its token ids, the rows to explain and their work (`total`: runs of the prompt)."""

    req: TokenAttributionRequest
    ids: list[int]
    dropped: int
    rows: list[ta.Row]
    total: int
    need: memory.Need  # the peak bytes of the work and its answer


def request_ids(service: ModelService, req: TokenAttributionRequest) -> tuple[list[int], int]:
    if req.ids is not None:
        return given_ids(service, req.ids), 0
    if not req.text:
        raise InputError("text", "give a prompt (text) or token ids (ids)")
    return prompt_ids(service, req.text, req.truncate, bos=req.bos)


def _block_params(service: ModelService) -> int:
    return sum(p.numel() for p in service.model.blocks[0].parameters())


def _check_work(
    service: ModelService, req: TokenAttributionRequest, ids: list[int], positions: list[int], limit: float
):
    cfg, T = service.model.cfg, len(ids)
    tokens = sum(ta.span(cfg, p, T) for p in positions) * (req.steps + 1) * 3 + T * (T + 2)
    macs = tokens * cfg.n_layer * _block_params(service)
    if macs > limit:
        where = f", or start it as a job, POST /api/v1/token-attribution/jobs (up to {MAX_JOB_MACS:.0e})"
        raise InputError(
            "steps",
            f"{len(positions)} position(s) at {req.steps} steps on {T} tokens are about {macs:.2e} multiply-adds; "
            f"this endpoint computes up to {limit:.0e}: ask for fewer steps or a shorter prompt"
            + (where if limit < MAX_JOB_MACS else ""),
        )


def plan(service: ModelService, req: TokenAttributionRequest, limit: float | None = None) -> Plan:
    """Check the request (every limit named by its field), then find the rows' targets (one forward pass)."""
    cfg = service.model.cfg
    try:
        ta.check_model(cfg)
    except ValueError as e:
        raise InputError("text" if req.ids is None else "ids", f"the served model: {e}") from None
    ids, dropped = request_ids(service, req)
    T = len(ids)
    for name in ("target", "contrast"):
        if getattr(req, name) is not None:
            check_index(getattr(req, name), cfg.vocab_size, name)
    if req.target is not None and req.contrast == req.target:
        raise InputError("contrast", f"contrast is the target ({req.target}); a logit difference needs two tokens")
    if req.every_position:
        positions = list(range(T))
    else:
        positions = [T - 1 if req.position is None else check_index(req.position, T, "position")]
    _check_work(service, req, ids, positions, MAX_SYNC_MACS if limit is None else limit)
    job = limit is not None and limit > MAX_SYNC_MACS
    need = attribution_need(service, req, T, len(positions), job)
    memory.BUDGET.check(need, job)  # (a 422 before the forward pass below, when it could never fit)
    targets = [req.target] * len(positions) if req.target is not None else top_predictions(service, ids, positions)
    if req.target is None and not req.every_position and req.contrast == targets[0]:
        raise InputError("contrast", f"contrast is the top prediction ({targets[0]}); choose another token")
    rows = [ta.Row(p, t, req.contrast) for p, t in zip(positions, targets)]
    return Plan(req, ids, dropped, rows, ta.runs(T, len(rows), req.steps), need)


def top_predictions(service: ModelService, ids: list[int], positions: list[int]) -> list[int]:
    """The model's top prediction at each position: one forward pass, unembedded POSITIONS_PER_UNEMBED
    positions at a time (the logits of every position at once take T x V numbers)."""
    out: list[int] = []
    with service.run() as m:
        h = m.hidden(torch.tensor([ids], device=service.device))[0]  # (T, d)
        for a in range(0, len(positions), POSITIONS_PER_UNEMBED):
            at = torch.tensor(positions[a : a + POSITIONS_PER_UNEMBED], device=h.device)
            out += m.unembed(h[at]).argmax(-1).tolist()
    return out


def peak_bytes(service: ModelService, T: int, n_rows: int, steps: int) -> int:
    """The work's peak (model/token_attribution.py's peak_bytes) and its answer's."""
    model = service.model
    item = model.lm_head.weight.element_size()
    work = ta.peak_bytes(model.cfg, T, n_rows, steps, ta.chunk_tokens(model), item)
    return work + n_rows * (4 * T * ANSWER_VALUE_BYTES + ANSWER_ROW_BYTES)


def attribution_need(service: ModelService, req: TokenAttributionRequest, T: int, n_rows: int, job: bool):
    """The request's peak bytes, named by the field to change: every_position while one position would fit
    the budget, else the prompt."""
    what = f"this token attribution ({T:,} tokens, {n_rows:,} position(s))"
    need = peak_bytes(service, T, n_rows, req.steps)
    if n_rows > 1 and peak_bytes(service, T, 1, req.steps) <= memory.BUDGET.limit(job):
        return memory.Need(need, "every_position", what, "one position (every_position false) or a shorter prompt")
    return memory.Need(need, "text" if req.ids is None else "ids", what, "a shorter prompt")


def _values(v: torch.Tensor, T: int) -> list[float | None]:
    out: list[float | None] = [round(float(x), VALUE) for x in v.double()]
    return out + [None] * (T - len(out))


def _row(service: ModelService, r: ta.RowResult, T: int) -> AttributionRow:
    total, diff = float(r.integrated_gradients.double().sum()), r.f_input - r.f_baseline
    ref = lambda i: TokenRef(id=i, text=token_text(service, i))  # noqa: E731
    return AttributionRow(
        position=r.row.position,
        target=ref(r.row.target),
        contrast=None if r.row.contrast is None else ref(r.row.contrast),
        f_input=round(r.f_input, VALUE),
        f_baseline=round(r.f_baseline, VALUE),
        integrated_gradients=_values(r.integrated_gradients, T),
        gradient_x_input=_values(r.gradient_x_input, T),
        occlusion=_values(r.occlusion, T),
        rollout=_values(r.rollout, T),
        completeness=Completeness(
            attribution_sum=round(total, VALUE),
            difference=round(diff, VALUE),
            error=round(total - diff, FINE),
            relative_error=round(abs(total - diff) / abs(diff), FINE) if diff != 0 else None,
        ),
    )


def baseline_choice(service: ModelService, req: TokenAttributionRequest) -> tuple[str, str]:
    """The baseline the request gets (its own, else the model's: ta.default_baseline) and why."""
    default, why = ta.default_baseline(service.model.cfg)
    if req.baseline is None:
        return default, f"this model's default: {why}"
    if req.baseline == default:
        return default, f"asked for, and this model's default: {why}"
    return req.baseline, f"asked for; this model's default is {default}: {why}"


@contextmanager
def _with_gradients(service: ModelService) -> Iterator[None]:
    """The model's lock, with gradients allowed (its requests run in inference mode)."""
    with service.run(), torch.inference_mode(False), torch.enable_grad():
        yield


def compute(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> TokenAttributionResponse:
    """Explain the plan's rows, a batched pass at a time (the model's lock held per pass, so other
    requests run between them); the progress counts runs of the prompt."""
    req, T, done = p.req, len(p.ids), [0]

    def advance(n: int) -> None:
        done[0] += n
        if on_chunk is not None:
            on_chunk(done[0], p.total)

    pace = ta.Pace(lambda: _with_gradients(service), cancel or (lambda: False), advance)
    baseline, reason = baseline_choice(service, req)
    prep = ta.prepare(service.model, p.ids, p.rows, baseline, pace)
    rows = [
        _row(service, ta.explain_row(service.model, prep, i, req.steps, pace, req.rule), T) for i in range(len(p.rows))
    ]
    errors = [r.completeness.relative_error for r in rows if r.completeness.relative_error is not None]
    return TokenAttributionResponse(
        model=service.name,
        tokens=token_pieces(service.encoding, p.ids),
        truncated=p.dropped,
        causal=service.model.cfg.causal,
        metric="logit" if req.contrast is None else "logit_difference",
        baseline=baseline,
        baseline_description=BASELINES[baseline],
        baseline_reason=reason,
        steps=req.steps,
        quadrature=req.rule,
        rule=RULES[req.rule],
        methods=METHODS,
        rows=rows,
        worst_relative_error=max(errors) if errors else None,
    )


def attribute(service: ModelService, req: TokenAttributionRequest) -> TokenAttributionResponse:
    """The plain endpoint: the plan, then its work once the memory budget holds its need (before the
    model's lock is asked for)."""
    p = plan(service, req)
    with memory.hold(p.need):
        return compute(service, p)
