"""Transcoder sets in the app: where a model's sets live, loading them (model/transcoders.py's format),
and training jobs.

A checkpoint's sets are folders beside it, `<checkpoint>/transcoders/<name>/`. The built-in
checkpoint is package data, which the app never writes: sets trained on it go to
`<data>/transcoders/builtin/<name>/`, and its shipped one stays in the package. A set is listed for a
model only when it was trained on these very weights (the sha256 its JSON records) and fits it.
Training runs one job at a time in a background thread, on a copy of the served model loaded from its
folder, as an SAE's does (server/saes.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import sae as sae_mod
from gptscope.model import transcoders as tc_mod
from gptscope.model.sae import SAEError

from .config import BUILTIN_CHECKPOINT
from .errors import InputError, NotFound
from .jobs import Job, JobRunner
from .schemas.sae import SAE_NAME
from .service import ModelService


def folders_for(checkpoint: Path, data_dir: Path) -> list[Path]:
    """The folders that hold a checkpoint's transcoder sets; the first is where new ones are written."""
    own = Path(checkpoint) / "transcoders"
    if Path(checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve():
        return [Path(data_dir) / "transcoders" / "builtin", own]
    return [own]


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tc_mod.LoadedSet:
    return tc_mod.load_set(path)


def load(path: Path) -> tc_mod.LoadedSet:
    """A set's folder, loaded once per version of its JSON."""
    return _load(str(path), (path / tc_mod.META_FILE).stat().st_mtime)


def listing(service: ModelService) -> list[tuple[str, Path]]:
    """(name, folder) of every set trained on the served model's weights, by name; a name in two
    folders is the first folder's."""
    sha = service.meta.weights_sha256
    found: dict[str, Path] = {}
    for root in service.transcoder_folders:
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.name in found or p.name.startswith(".") or not re.fullmatch(SAE_NAME, p.name):
                continue
            try:
                meta = tc_mod.read_meta(p)
            except SAEError:
                continue
            if (meta.get("checkpoint") or {}).get("weights_sha256") == sha:
                found[p.name] = p
    return sorted(found.items())


def misfit(service: ModelService, loaded: tc_mod.LoadedSet) -> str | None:
    """Why a set listed for the served model cannot read it, or None."""
    cfg, name = service.model.cfg, loaded.name
    c = loaded.codes[0].cfg
    if len(loaded.codes) != cfg.n_layer:
        return f"transcoder set {name!r} has {len(loaded.codes)} transcoders; the served model has {cfg.n_layer} MLPs"
    if c.d_in != cfg.d_model:
        return f"transcoder set {name!r} reads width {c.d_in} but the served model's is {cfg.d_model}"
    for s in loaded.stats:
        ids = s["eval_ids"]
        if ids.size(1) > cfg.n_ctx or (ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < cfg.vocab_size):
            return f"transcoder set {name!r}'s held-out token ids do not fit the served model"
    return None


def get(service: ModelService, name: str | None, field: str = "transcoders", where: str = "body") -> tc_mod.LoadedSet:
    """The named set of the served model (None: its first), loaded and checked; a 422 naming `field`
    otherwise."""
    sets = dict(listing(service))
    if name is None:
        if not sets:
            raise InputError(
                field, "the served model has no transcoder set; train one (gptscope transcoders)", where=where
            )
        name = next(iter(sets))
    if name not in sets:
        raise InputError(
            field, f"no transcoder set named {name!r} for this model; choose one of {sorted(sets)}", where=where
        )
    try:
        loaded = load(sets[name])
    except SAEError as e:
        raise InputError(field, str(e), where=where) from None
    if (why := misfit(service, loaded)) is not None:
        raise InputError(field, why, where=where)
    return loaded


def get_by_path(service: ModelService, name: str) -> tc_mod.LoadedSet:
    """The set a path names: 404 when the served model has none of that name, 422 when it cannot be read."""
    if name not in dict(listing(service)):
        raise NotFound(f"no transcoder set {name!r} for the served model")
    return get(service, name, field="name", where="path")


# ---- training jobs ------------------------------------------------------------------------------


@dataclass
class SetTraining:
    """A transcoder set's training job: its own state (its answer is schemas.attribution.TranscoderJob)."""

    name: str
    config: tc_mod.TranscoderTrainConfig
    corpus: str
    phase: str = "training"
    last: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    meta: dict | None = None


def runner() -> JobRunner[SetTraining]:
    return JobRunner("transcoder training job", "transcoders/jobs", sae_mod.Cancelled)


def default_name(tc: tc_mod.TranscoderTrainConfig) -> str:
    return f"x{tc.expansion}-{tc.activation}{tc.k if tc.activation == 'topk' else ''}-s{tc.seed}"


def start_training(
    jobs: JobRunner[SetTraining], service: ModelService, tc: tc_mod.TranscoderTrainConfig, name: str | None, corpus: str
) -> Job[SetTraining]:
    """Train a set on the served model in the background, once its config and name are checked."""
    try:
        tc.validate(service.model)
    except SAEError as e:
        raise InputError(e.field, str(e)) from None
    name = name or default_name(tc)
    if name == "jobs" or not re.fullmatch(SAE_NAME, name):
        raise InputError("name", f"{name!r} is reserved or not a valid name")
    folder = service.transcoder_folders[0] / name
    if folder.exists() or name in dict(listing(service)):
        raise InputError("name", f"the served model already has a transcoder set named {name!r}; choose another name")
    return jobs.start(partial(train, checkpoint=service.path, folder=folder), SetTraining(name, tc, corpus))


def train(job: Job[SetTraining], checkpoint: Path, folder: Path) -> None:
    """The work of a training job: load the checkpoint in the job's thread, train, save in `folder`."""
    state = job.state

    def report(e: dict) -> None:
        state.phase, state.last = str(e.get("phase", "training")), e
        job.progress.done = int(e.get("step", 0))
        if "fvu" in e:
            state.history.append(e)

    state.meta = tc_mod.train_and_save(
        ckpt.load(checkpoint), state.corpus, state.config, folder, f"POST /api/v1/transcoders (job {job.id})",
        on_progress=report, should_stop=job.cancel.is_set,
    )  # fmt: skip
