"""Tuned lenses: the served model's lenses with their held-out figures, and training jobs' answers.
The lens itself is read in the forward trace (stages.py's tuned_lens part)."""

from __future__ import annotations

from gptscope.model.tuned_lens import LoadedLens

from ..artefacts import Training
from ..digits import FINE
from ..jobs import Job, answer_fields
from ..lenses import LENSES as store
from ..schemas.lens import LensFigures, LensInfo, LensJob, LensList, LensStageFigures
from ..service import ModelService


def lens_figures(q: dict) -> LensFigures:
    """A lens's JSON figures as the answer gives them (rounded)."""
    return LensFigures(
        tokens=int(q["tokens"]),
        sequences=int(q["sequences"]),
        stages=[
            LensStageFigures(**{k: (v if k == "stage" else round(float(v), FINE)) for k, v in s.items()})
            for s in q["stages"]
        ],
    )


def info(loaded: LoadedLens) -> LensInfo:
    m = loaded.meta
    return LensInfo(
        name=loaded.name,
        stages=list(m.get("stages") or []),
        translators=loaded.lens.n_translators,
        d_model=int(m["d_model"]),
        corpus=str((m.get("corpus") or {}).get("name", "?")),
        steps=int(m.get("steps", 0)),
        tokens=int(m.get("tokens", 0)),
        train_seconds=float(m.get("train_seconds", 0.0)),
        eval_seconds=float(m.get("eval_seconds", 0.0)),
        command=str(m.get("command", "")),
        created=str(m.get("created", "")),
        quality=lens_figures(m["quality"]),
    )


def listing(service: ModelService) -> LensList:
    """Every lens of the served model that loads and fits it, with its figures."""
    return LensList(lenses=store.views(service, info))


def job_status(job: Job[Training]) -> LensJob:
    state, last = job.state, job.state.last
    return LensJob(
        **answer_fields(job),
        phase="evaluating" if state.phase == "evaluating" else "training",
        lens=state.name,
        progress=float(last.get("progress", 0.0)),
        step=job.progress.done,
        tokens=int(last.get("tokens", 0)),
        kl=last.get("kl"),
        history=state.history,
        quality=lens_figures(state.meta["quality"]) if state.meta else None,
    )
