"""Tuned lenses in the app: where a model's lenses live, loading them, and training jobs
(model/tuned_lens.py's format).

A checkpoint's lenses are folders beside it, `<checkpoint>/lenses/<name>/`. The built-in checkpoint
is package data, which the app never writes: lenses trained on it go to `<data>/lenses/builtin/<name>/`,
and its shipped one stays in the package. A lens is listed for a model only when it was trained on
these very weights (the sha256 its JSON records). Training runs one job at a time in a background
thread, on a copy of the served model loaded from its folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import tuned_lens as tl

from .config import BUILTIN_CHECKPOINT
from .errors import InputError, NotFound
from .jobs import Job, JobRunner
from .schemas.sae import SAE_NAME
from .service import ModelService

RESERVED = {"jobs"}  # /api/v1/lenses/jobs is the jobs' list


def folders_for(checkpoint: Path, data_dir: Path) -> list[Path]:
    """The folders that hold a checkpoint's tuned lenses; the first is where new ones are written."""
    own = Path(checkpoint) / "lenses"
    if Path(checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve():
        return [Path(data_dir) / "lenses" / "builtin", own]
    return [own]


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tl.LoadedLens:
    return tl.load_lens(path)


def load(path: Path) -> tl.LoadedLens:
    """A lens's folder, loaded once per version of its JSON."""
    return _load(str(path), (path / tl.META_FILE).stat().st_mtime)


def listing(service: ModelService) -> list[tuple[str, Path]]:
    """(name, folder) of every lens trained on the served model's weights, by name; a name in two
    folders is the first folder's."""
    sha = service.meta.weights_sha256
    found: dict[str, Path] = {}
    for root in service.lens_folders:
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.name in found or p.name.startswith(".") or not re.fullmatch(SAE_NAME, p.name):
                continue
            try:
                meta = tl.read_meta(p)
            except tl.LensError:
                continue
            if (meta.get("checkpoint") or {}).get("weights_sha256") == sha:
                found[p.name] = p
    return sorted(found.items())


def misfit(service: ModelService, loaded: tl.LoadedLens) -> str | None:
    """Why a lens listed for the served model cannot read it, or None."""
    cfg, lens, name = service.model.cfg, loaded.lens, loaded.name
    want = len(tl.stream_hooks(cfg)) - 1
    if lens.n_translators != want:
        return f"tuned lens {name!r} has {lens.n_translators} translators; the served model's stream has {want} stages before its last"
    if lens.layer_translators[0].in_features != cfg.d_model:
        return f"tuned lens {name!r} reads width {lens.layer_translators[0].in_features}; the served model's is {cfg.d_model}"
    return None


def get(service: ModelService, name: str | None, field: str = "lens", where: str = "body") -> tl.LoadedLens:
    """The named lens of the served model (None: its first), loaded and checked; a 422 naming `field`
    otherwise."""
    lenses = dict(listing(service))
    if name is None:
        if not lenses:
            raise InputError(field, "the served model has no tuned lens; train one (gptscope lens)", where=where)
        name = next(iter(lenses))
    if name not in lenses:
        raise InputError(
            field, f"no tuned lens named {name!r} for this model; choose one of {sorted(lenses)}", where=where
        )
    try:
        loaded = load(lenses[name])
    except tl.LensError as e:
        raise InputError(field, str(e), where=where) from None
    if (why := misfit(service, loaded)) is not None:
        raise InputError(field, why, where=where)
    return loaded


def get_by_path(service: ModelService, name: str) -> tl.LoadedLens:
    """The lens a path names: 404 when the served model has none of that name, 422 when it cannot be read."""
    if name not in dict(listing(service)):
        raise NotFound(f"no tuned lens {name!r} for the served model")
    return get(service, name, field="name", where="path")


# ---- training jobs ------------------------------------------------------------------------------


@dataclass
class LensTraining:
    """A tuned-lens training job's own state (its answer is schemas.lens.LensJob; progress counts steps)."""

    name: str
    config: tl.LensTrainConfig
    corpus: str
    phase: str = "training"
    last: dict = field(default_factory=dict)  # the trainer's last progress report
    history: list[dict] = field(default_factory=list)
    meta: dict | None = None  # what the saved lens's JSON records (its figures...), once saved


def lens_runner() -> JobRunner[LensTraining]:
    return JobRunner("tuned-lens training job", "lenses/jobs", tl.Cancelled)


def start_training(
    runner: JobRunner[LensTraining], service: ModelService, tc: tl.LensTrainConfig, name: str | None, corpus: str
) -> Job[LensTraining]:
    """Train a tuned lens for the served model in the background, once its config and name are checked."""
    try:
        tc.validate(service.model)
    except tl.LensError as e:
        raise InputError(e.field, str(e)) from None
    name = name or tl.default_name(tc)
    if name in RESERVED or not re.fullmatch(SAE_NAME, name):
        raise InputError("name", f"{name!r} is reserved or not a valid name")
    folder = service.lens_folders[0] / name
    if folder.exists() or name in dict(listing(service)):
        raise InputError("name", f"the served model already has a tuned lens named {name!r}; choose another name")
    work = partial(train, checkpoint=service.path, folder=folder)
    return runner.start(work, LensTraining(name, tc, corpus))


def train(
    job: Job[LensTraining],
    checkpoint: Path | ckpt.Checkpoint,
    folder: Path,
    command: str | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> None:
    """The work of a tuned-lens training job: train on a checkpoint (a folder is loaded first, in the
    job's thread) and save the lens in `folder`, recording the command that asked for it."""
    state = job.state

    def report(e: dict) -> None:
        state.phase, state.last = str(e.get("phase", "training")), e
        job.progress.done = int(e.get("step", 0))
        if "kl" in e:
            state.history.append(e)
        if on_progress is not None:
            on_progress(e)

    state.meta = tl.train_and_save(
        checkpoint if isinstance(checkpoint, ckpt.Checkpoint) else ckpt.load(checkpoint),
        state.corpus,
        state.config,
        folder,
        command=command or f"POST /api/v1/lenses (job {job.id})",
        on_progress=report,
        should_stop=job.cancel.is_set,
    )
