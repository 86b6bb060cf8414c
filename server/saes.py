"""Sparse autoencoders in the app: where a model's SAEs live, loading them, and training jobs.

A checkpoint's SAEs are folders beside it, `<checkpoint>/saes/<name>/` (model/sae.py's format).
The built-in checkpoint is package data, which the app never writes: SAEs trained on it go to
`<data>/saes/builtin/<name>/`, and its shipped one stays in the package. An SAE is listed for a
model only when it was trained on these very weights (the sha256 its JSON records). Training runs
one job at a time in a background thread, on a copy of the served model loaded from its folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.model import sae as sae_mod

from .config import BUILTIN_CHECKPOINT
from .errors import InputError, NotFound
from .jobs import Job, JobRunner
from .schemas.sae import SAE_NAME
from .service import ModelService

RESERVED = {"jobs"}  # /api/v1/saes/jobs is the jobs' list


def folders_for(checkpoint: Path, data_dir: Path) -> list[Path]:
    """The folders that hold a checkpoint's SAEs; the first is where new ones are written."""
    own = Path(checkpoint) / "saes"
    if Path(checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve():
        return [Path(data_dir) / "saes" / "builtin", own]
    return [own]


def attach(service: ModelService, data_dir: Path) -> ModelService:
    """Tell a served model where its SAEs are (the app calls it for every model it serves)."""
    service.sae_folders = folders_for(service.path, data_dir)
    return service


@lru_cache(maxsize=16)
def _load(path: str, mtime: float) -> sae_mod.LoadedSAE:
    return sae_mod.load_sae(path)


def load(path: Path) -> sae_mod.LoadedSAE:
    """An SAE folder, loaded once per version of its JSON."""
    return _load(str(path), (path / sae_mod.META_FILE).stat().st_mtime)


def listing(service: ModelService) -> list[tuple[str, Path]]:
    """(name, folder) of every SAE trained on the served model's weights, by name; a name in two
    folders is the first folder's."""
    sha = service.meta.weights_sha256
    found: dict[str, Path] = {}
    for root in service.sae_folders:
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.name in found or p.name.startswith(".") or not re.fullmatch(SAE_NAME, p.name):
                continue
            try:
                meta = sae_mod.read_meta(p)
            except sae_mod.SAEError:
                continue
            if (meta.get("checkpoint") or {}).get("weights_sha256") == sha:
                found[p.name] = p
    return sorted(found.items())


def misfit(service: ModelService, loaded: sae_mod.LoadedSAE) -> str | None:
    """Why an SAE listed for the served model (its recorded weights' sha256 matches) cannot read it,
    or None: the width of the stream it reads, its layer, and the held-out token ids its statistics
    were measured on (the feature pages run them through the model) are checked against the model."""
    cfg, c, ids = service.model.cfg, loaded.sae.cfg, loaded.stats["eval_ids"]
    name = loaded.name
    if c.d_in != cfg.d_model:
        return f"SAE {name!r} reads a stream of width {c.d_in} but the served model's is {cfg.d_model}"
    if not 0 <= c.layer < cfg.n_layer:
        return f"SAE {name!r} reads layer {c.layer} but the served model's layers are 0..{cfg.n_layer - 1}"
    if ids.size(1) > cfg.n_ctx:
        return f"SAE {name!r}'s held-out sequences have {ids.size(1)} tokens, more than the served model's n_ctx {cfg.n_ctx}"
    if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < cfg.vocab_size:
        return f"SAE {name!r}'s held-out token ids are not all in the served model's vocabulary 0..{cfg.vocab_size - 1}"
    return None


def get(service: ModelService, name: str | None, field: str = "sae", where: str = "body") -> sae_mod.LoadedSAE:
    """The named SAE of the served model (None: its first), loaded; a 422 naming `field` otherwise
    (also when it cannot be read, or cannot read this model: see misfit)."""
    saes = dict(listing(service))
    if name is None:
        if not saes:
            raise InputError(field, "the served model has no SAE; train one (POST /api/v1/saes)", where=where)
        name = next(iter(saes))
    if name not in saes:
        raise InputError(field, f"no SAE named {name!r} for this model; choose one of {sorted(saes)}", where=where)
    try:
        loaded = load(saes[name])
    except sae_mod.SAEError as e:
        raise InputError(field, str(e), where=where) from None
    if (why := misfit(service, loaded)) is not None:
        raise InputError(field, why, where=where)
    return loaded


def get_by_path(service: ModelService, name: str) -> sae_mod.LoadedSAE:
    """The SAE a path names (/saes/{name}/...): 404 when the served model has none of that name, a
    422 naming the path's `name` when it cannot be read or cannot read this model."""
    if name not in dict(listing(service)):
        raise NotFound(f"no SAE {name!r} for the served model")
    return get(service, name, field="name", where="path")


# ---- training jobs ------------------------------------------------------------------------------


@dataclass
class SaeTraining:
    """An SAE training job's own state (its answer is schemas.sae.SaeJob; its progress counts steps)."""

    name: str
    layer: int
    config: sae_mod.SAETrainConfig
    corpus: str
    phase: str = "training"
    last: dict = field(default_factory=dict)  # the trainer's last progress report
    history: list[dict] = field(default_factory=list)
    meta: dict | None = None  # what the saved SAE's JSON records (its quality figures...), once saved


def sae_runner() -> JobRunner[SaeTraining]:
    return JobRunner("SAE training job", "saes/jobs", sae_mod.Cancelled)


def start_training(
    runner: JobRunner[SaeTraining], service: ModelService, tc: sae_mod.SAETrainConfig, name: str | None, corpus: str
) -> Job[SaeTraining]:
    """Train an SAE on the served model in the background, once its config and name are checked."""
    try:
        tc.validate(service.model)
    except sae_mod.SAEError as e:
        raise InputError(e.field, str(e)) from None
    name = name or sae_mod.default_name(tc)
    if name in RESERVED or not re.fullmatch(SAE_NAME, name):
        raise InputError("name", f"{name!r} is reserved or not a valid name")
    folder = service.sae_folders[0] / name
    if folder.exists() or name in dict(listing(service)):
        raise InputError("name", f"the served model already has an SAE named {name!r}; choose another name")
    work = partial(train_sae, checkpoint=service.path, folder=folder)
    return runner.start(work, SaeTraining(name, tc.layer, tc, corpus))


def train_sae(
    job: Job[SaeTraining],
    checkpoint: Path | ckpt.Checkpoint,
    folder: Path,
    command: str | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> None:
    """The work of an SAE training job: train on a checkpoint (a folder is loaded first, in the job's
    thread) and save the SAE in `folder`, recording the command that asked for it."""
    state = job.state

    def report(e: dict) -> None:
        state.phase, state.last = str(e.get("phase", "training")), e
        job.progress.done = int(e.get("step", 0))
        if "fvu" in e:
            state.history.append(e)
        if on_progress is not None:
            on_progress(e)

    state.meta = sae_mod.train_and_save(
        checkpoint if isinstance(checkpoint, ckpt.Checkpoint) else ckpt.load(checkpoint),
        state.corpus,
        state.config,
        folder,
        command=command or f"POST /api/v1/saes (job {job.id})",
        on_progress=report,
        should_stop=job.cancel.is_set,
    )


def corpus_for(service: ModelService, asked: str | None, corpus_path) -> str:
    """The text an SAE trains on: the one asked for (a name from /api/v1/corpora), else the text the
    model was trained on when that is a built-in corpus."""
    if asked is not None:
        return corpus_path(asked)
    own = (service.meta.corpus or {}).get("name")
    if own in corpus_mod.BUILTIN:
        return own
    raise InputError("corpus", "the served model was not trained on a built-in corpus: name one from /api/v1/corpora")
