"""Training runs, corpora and checkpoints as API models."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from model import checkpoint as ckpt
from model import corpus as corpus_mod
from model.gpt import GPTConfig, count_params

from ..errors import InputError
from ..schemas.forward import ForwardRequest
from ..schemas.training import CheckpointInfo, CorpusInfo, EvalPoint, ReplayFrame, TrainingStatus, TrainingStep
from ..service import ModelService
from ..training import Job, TrainingManager, eta, finite
from . import embeddings as emb
from . import forward as fwd


def status(job: Job, since: int = 0) -> TrainingStatus:
    hist = [h for h in job.history if h["step"] > since]
    last = job.history[-1] if job.history else None
    return TrainingStatus(
        id=job.id, status=job.status, request=job.request, step=job.step, total_steps=job.total_steps,
        elapsed_s=round(job.elapsed, 2), eta_s=eta(job), tokens_per_s=last["tokens_per_s"] if last else None,
        uniform_loss=job.uniform_loss,
        history=[TrainingStep(**{**h, "loss": finite(h["loss"]) or 0.0}) for h in hist],
        evals=[EvalPoint(**e) for e in job.evals], snapshots=sorted(set(job.snapshots)),
        checkpoint=job.id if job.status == "done" else None, error=job.error, cached=job.cached)


def corpora(manager: TrainingManager) -> list[CorpusInfo]:
    text = corpus_mod.shakespeare().text
    out = [CorpusInfo(name="shakespeare", chars=len(text), bytes=len(text.encode("utf-8")), builtin=True)]
    if manager.corpora_dir.is_dir():
        for p in sorted(manager.corpora_dir.glob("*.txt")):
            data = p.read_bytes()
            out.append(CorpusInfo(name=p.stem, chars=len(data.decode("utf-8", errors="replace")), bytes=len(data), builtin=False))
    return out


def _info(name: str, path: Path, loaded: Path) -> CheckpointInfo | None:
    try:
        meta = ckpt.read_meta(path)
        cfg = GPTConfig.from_dict(meta["config"])
    except (ckpt.CheckpointError, KeyError, TypeError, ValueError):
        return None  # half-written or foreign folders are not listed
    evals = meta.get("evals") or []
    return CheckpointInfo(name=name, step=int(meta.get("step", 0)), final=bool(meta.get("final", True)),
                          val_loss=evals[-1]["val_loss"] if evals else None,
                          corpus=str(meta.get("corpus", {}).get("name", "?")), params=count_params(cfg)["total"],
                          loaded=path.resolve() == loaded.resolve())


def checkpoints(manager: TrainingManager, builtin: Path, loaded: Path) -> list[CheckpointInfo]:
    found = [_info("builtin", builtin, loaded)]
    if manager.runs_dir.is_dir():
        for run in sorted(manager.runs_dir.iterdir()):
            if not run.is_dir():
                continue
            found.append(_info(run.name, run, loaded))
            snaps = run / "snapshots"
            if snaps.is_dir():
                found += [_info(f"{run.name}/{s.name}", s, loaded) for s in sorted(snaps.iterdir()) if s.is_dir()]
    return [f for f in found if f is not None]


@lru_cache(maxsize=8)
def _snapshot_service(path: str) -> ModelService:
    return ModelService(Path(path))


def replay(manager: TrainingManager, run_id: str, step: int, text: str, tokens: int) -> ReplayFrame:
    """One snapshot of a run applied to a fixed prompt; the same data functions as the live pages."""
    job_dir = manager.runs_dir / run_id / "snapshots"
    steps = sorted(int(p.name.split("-")[1]) for p in job_dir.glob("step-*") if (p / ckpt.META_NAME).is_file()) \
        if job_dir.is_dir() else []
    if step not in steps:
        raise InputError("step", f"run {run_id} has no snapshot at step {step}; snapshots: {steps}", where="query")
    svc = _snapshot_service(str(manager.checkpoint_path(f"{run_id}/step-{step:06d}", Path("/nonexistent"))))
    trace = fwd.forward(svc, ForwardRequest(text=text, include=["attention", "next_token"], truncate=True))
    ids = svc.encoding.encode_ordinary(text)[-svc.model.cfg.n_ctx // 2:]
    with svc.run() as m:
        out = m.generate(torch.tensor([ids]), 40, temperature=0.8, top_k=50, seed=0)
    evals = [e for e in svc.meta.get("evals", []) if e["step"] <= step]
    return ReplayFrame(run=run_id, step=step, steps=steps, val_loss=evals[-1]["val_loss"] if evals else None,
                       forward=trace, sample=svc.encoding.decode(out[0, len(ids):].tolist()),
                       projection=emb.projection(svc, tokens))
