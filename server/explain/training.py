"""Training runs, corpora and checkpoints as API models."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.model.gpt import GPTConfig, count_params
from gptscope.model.timeline import snapshot_steps
from gptscope.model.train import F32, ConfigError, TrainConfig, optimizer_bytes, run_model_config

from ..errors import InputError, NotFound
from ..jobs import Job, answer_fields
from ..models import ModelRegistry
from ..runs import RUN_ID, RunManager, TrainingRun
from ..schemas.forward import ForwardRequest
from ..schemas.training import (
    CheckpointInfo,
    CorpusInfo,
    EvalPoint,
    ReplayFrame,
    SnapshotPlan,
    TrainingRequest,
    TrainingStatus,
)
from . import embeddings as emb
from . import forward as fwd
from . import tokens as tok


def status(job: Job[TrainingRun], since: int = 0) -> TrainingStatus:
    run = job.state
    recs = run.records()
    last = recs[-1] if recs else None
    return TrainingStatus(
        **answer_fields(job, elapsed="elapsed_s"),
        request=run.request,
        step=job.progress.done,
        total_steps=job.progress.total,
        eta_s=eta(job),
        tokens_per_s=last.tokens_per_s if last else None,
        uniform_loss=run.uniform_loss,
        precision=run.precision,
        unigram_loss=(run.reference_losses or {}).get("unigram"),
        bigram_loss=(run.reference_losses or {}).get("bigram"),
        # a diverged update's loss (inf or NaN) is not JSON: it is sent as 0 beside the run's error
        history=[h if math.isfinite(h.loss) else replace(h, loss=0.0) for h in recs if h.step > since],
        evals=[EvalPoint(**e) for e in run.evals],
        snapshots=sorted(set(run.snapshots)),
        checkpoint=job.id if job.status == "done" else None,
        cached=run.cached,
    )


def snapshot_plan(req: TrainingRequest) -> SnapshotPlan:
    """How many snapshots a request saves, at which steps, and their disk cost, before it runs: float32
    weights in each, and the optimizer's state in those taken mid-run (the trainer saves none at step 0,
    before any update, nor in the last snapshot, taken with the final checkpoint)."""
    tc = TrainConfig(**{**req.model_dump(exclude_none=True, exclude={"corpus"}), "device": "cpu"})
    try:
        tc.validate()  # the checks POST /api/v1/training makes (exactly one of max_steps and time_budget, ...)
    except ConfigError as e:
        raise InputError(e.field, e.message) from None
    cfg = run_model_config(tc)
    params = count_params(cfg)["total"]
    state, _ = optimizer_bytes(cfg, req.optimizer)
    fractions = sorted(set(req.snapshots))
    total = req.max_steps
    steps = snapshot_steps(fractions, total) if total is not None else None
    if steps is not None and total is not None:
        count, mid = len(steps), sum(0 < s < total for s in steps)
    else:
        count, mid = len(fractions), sum(0 < f < 1 for f in fractions)
    return SnapshotPlan(
        fractions=fractions,
        steps=steps,
        count=count,
        weights_bytes=params * F32,
        optimizer_bytes=state,
        with_optimizer=mid,
        bytes_total=count * params * F32 + mid * state,
        params=params,
    )


def eta(job: Job[TrainingRun]) -> float | None:
    """Seconds left of a run going, at the pace of its steps so far."""
    step, total = job.progress.done, job.progress.total
    if job.status != "running" or not total:
        return None  # (a finished run's history file is not read just for this)
    recs = job.state.records()
    if not recs:
        return None
    per_step = recs[-1].elapsed_s / max(1, step - (recs[0].step - 1))
    return round(max(0.0, (total - step) * per_step), 1)


def corpora(runs: RunManager) -> list[CorpusInfo]:
    out = []
    for name in corpus_mod.BUILTIN:
        text = corpus_mod.load(name).text
        out.append(CorpusInfo(name=name, chars=len(text), bytes=len(text.encode("utf-8")), builtin=True))
    for p in runs.corpus_files():
        data = p.read_bytes()
        out.append(
            CorpusInfo(name=p.stem, chars=len(data.decode("utf-8", errors="replace")), bytes=len(data), builtin=False)
        )
    return out


def _info(name: str, path: Path, loaded: Path) -> CheckpointInfo | None:
    try:
        meta = ckpt.read_meta(path)
        if meta.config is None:
            return None
        cfg = GPTConfig.from_dict(meta.config)
    except (ckpt.CheckpointError, KeyError, TypeError, ValueError):
        return None  # half-written or foreign folders are not listed
    evals = meta.evals or []
    return CheckpointInfo(
        name=name,
        step=int(meta.step or 0),
        final=meta.final is not False,
        val_loss=evals[-1]["val_loss"] if evals else None,
        corpus=str((meta.corpus or {}).get("name", "?")),
        params=count_params(cfg)["total"],
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        loaded=path.resolve() == loaded.resolve(),
        source=str((meta.source or {}).get("kind", "trained")),
    )


def checkpoints(runs: RunManager, builtin: Path, loaded: Path) -> list[CheckpointInfo]:
    found = (_info(name, path, loaded) for name, path in runs.checkpoint_dirs(builtin))
    return [f for f in found if f is not None]


def snapshot_path(runs: RunManager, run_id: str, step: int) -> Path:
    """The folder of a run's snapshot at `step` (a snapshot, never the built-in model)."""
    return runs.checkpoint_path(f"{run_id}/step-{step:06d}", Path("/nonexistent"))


def replay(runs: RunManager, models: ModelRegistry, run_id: str, step: int, text: str, tokens: int) -> ReplayFrame:
    """One snapshot of a run applied to a fixed prompt; the same data functions as the live pages."""
    if not RUN_ID.fullmatch(run_id) or not (run_id in runs.jobs or (runs.runs_dir / run_id).is_dir()):
        raise NotFound(f"no training run {run_id!r}")
    steps = runs.snapshot_steps(run_id)
    if step not in steps:
        raise InputError("step", f"run {run_id} has no snapshot at step {step}; snapshots: {steps}", where="query")
    svc = models.get(snapshot_path(runs, run_id, step))
    trace = fwd.forward(svc, ForwardRequest(text=text, include=["attention", "next_token"], truncate=True))
    ids = tok.encode(svc.encoding, text, where="query")[-svc.model.cfg.n_ctx // 2 :]
    with svc.run() as m:
        top_k = min(50, m.cfg.vocab_size)  # a character vocabulary may have fewer tokens
        out = m.generate(torch.tensor([ids]), 40, temperature=0.8, top_k=top_k, seed=0)
    evals = [e for e in svc.meta.evals or [] if e["step"] <= step]
    return ReplayFrame(
        run=run_id,
        step=step,
        steps=steps,
        val_loss=evals[-1]["val_loss"] if evals else None,
        forward=trace,
        sample=svc.encoding.decode(out[0, len(ids) :].tolist()),
        projection=emb.projection(svc, tokens),
    )
