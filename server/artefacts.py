"""What the app trains on a served model and keeps beside it: SAEs, transcoder sets, tuned lenses.

Each kind is one `ArtefactStore`, declared once in its own module (server/saes.py, transcoders.py,
lenses.py) with the model/ functions that read, check and train it. A store says where a model's
artefacts of its kind live, lists the ones trained on these very weights, loads them (once per
version of their JSON), answers a request that names one (a 422 naming the field, or a 404 for a
path), and runs training jobs.

Where they live: a checkpoint's artefacts are folders beside it, `<checkpoint>/<kind>/<name>/`. The
built-in checkpoint is package data, which the app never writes: artefacts trained on it go to
`<data>/<kind>/builtin/<name>/`, and its shipped ones stay in the package. One is listed for a model
only when the sha256 of the weights its JSON records is the model's. Training runs one job at a time
in a background thread, on a copy of the served model loaded from its folder (never the served one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Generic, TypeVar

from gptscope.model import checkpoint as ckpt
from gptscope.model.errors import SettingError
from gptscope.model.gpt import GPTConfig
from gptscope.model.train import corpus_bytes

from . import memory
from .config import BUILTIN_CHECKPOINT
from .errors import InputError, NotFound
from .jobs import Job, JobRunner
from .schemas.sae import SAE_NAME
from .service import ModelService

L = TypeVar("L")  # a loaded artefact (model/sae.LoadedSAE, transcoders.LoadedSet, tuned_lens.LoadedLens)
V = TypeVar("V")
RESERVED = {"jobs"}  # /api/v1/<kind>/jobs is the kind's jobs' list, never an artefact's name


@dataclass
class Training:
    """A training job's own state (its answer is the kind's job schema; its progress counts steps)."""

    name: str
    config: Any  # the kind's train config (model/sae.SAETrainConfig, ...)
    corpus: str
    phase: str = "training"
    last: dict = field(default_factory=dict)  # the trainer's last progress report
    history: list[dict] = field(default_factory=list)  # its reports with figures (the curves)
    meta: dict | None = None  # what the saved artefact's JSON records (its quality figures...), once saved


@dataclass(frozen=True, eq=False)
class ArtefactStore(Generic[L]):
    """One kind of artefact: its words, its folder name and the model/ functions behind it."""

    noun: str  # how messages name one: "SAE", "tuned lens", "transcoder set"
    folder: str  # its folder beside a checkpoint and its API path: "saes", "lenses", "transcoders"
    request_field: str  # the field that names one in a request's body: "sae", "lens", "transcoders"
    meta_file: str  # the JSON whose version a load is kept for
    read_meta: Callable[[Path], dict]  # raises `error` when the folder is not one of this kind
    load_folder: Callable[[Path], L]  # raises `error`
    error: type[SettingError]  # what model/ raises for a folder it cannot read or a config it cannot train
    misfit: Callable[[ModelService, L], str | None]  # why a listed one cannot read the served model, or None
    train_hint: str  # how to make one, for "the served model has no ..."
    train_and_save: Callable[..., dict]  # (checkpoint, corpus, config, folder, command, on_progress, should_stop)
    default_name: Callable[[Any], str]  # a name from a train config
    figures_key: str  # the progress reports that carry figures have it ("fvu", "kl")
    cancelled: type[BaseException]  # what training raises once cancelled
    # (config, the model's config, the text's bytes, the bytes a job may hold) -> (the job's peak bytes,
    # the request field whose smaller value needs less, what to ask for instead): model/'s memory_need
    memory_need: Callable[[Any, GPTConfig, int, int], tuple[int, str, str]]
    cache_size: int = 8  # loaded folders kept
    _cache: Callable[[str, float], L] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # a folder loaded once per version of its JSON (its path and mtime), cache_size of them kept
        object.__setattr__(
            self, "_cache", lru_cache(maxsize=self.cache_size)(lambda path, _mtime: self.load_folder(Path(path)))
        )

    # ---- where they are -------------------------------------------------------------------------

    def folders_for(self, checkpoint: Path, data_dir: Path) -> list[Path]:
        """The folders that hold a checkpoint's artefacts of this kind; the first is where new ones go."""
        own = Path(checkpoint) / self.folder
        if Path(checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve():
            return [Path(data_dir) / self.folder / "builtin", own]
        return [own]

    def folders(self, service: ModelService) -> list[Path]:
        """A served model's folders of this kind (the model registry sets them: see attach)."""
        return service.artefact_folders.get(self.folder) or [service.path / self.folder]

    def attach(self, service: ModelService, data_dir: Path) -> None:
        service.artefact_folders[self.folder] = self.folders_for(service.path, data_dir)

    def load(self, path: Path) -> L:
        """One folder, loaded once per version of its JSON."""
        return self._cache(str(path), (path / self.meta_file).stat().st_mtime)

    def listing(self, service: ModelService) -> list[tuple[str, Path]]:
        """(name, folder) of every one trained on the served model's weights, by name; a name in two
        folders is the first folder's."""
        return self.listing_in(self.folders(service), service.meta.weights_sha256)

    def listing_in(self, roots: list[Path], sha: str | None) -> list[tuple[str, Path]]:
        """(name, folder) of every one in these folders trained on the weights of this sha256."""
        found: dict[str, Path] = {}
        for root in roots:
            if not root.is_dir():
                continue
            for p in sorted(root.iterdir()):
                if p.name in found or p.name.startswith(".") or not re.fullmatch(SAE_NAME, p.name):
                    continue
                try:
                    meta = self.read_meta(p)
                except self.error:
                    continue
                if (meta.get("checkpoint") or {}).get("weights_sha256") == sha:
                    found[p.name] = p
        return sorted(found.items())

    # ---- what a request names -------------------------------------------------------------------

    def get(self, service: ModelService, name: str | None, field: str | None = None, where: str = "body") -> L:
        """The named one of the served model (None: its first), loaded and checked; a 422 naming `field`
        (default: request_field) otherwise (also when it cannot be read, or cannot read this model: see
        misfit)."""
        field = field or self.request_field
        found = dict(self.listing(service))
        if name is None:
            if not found:
                raise InputError(field, f"the served model has no {self.noun}; {self.train_hint}", where=where)
            name = next(iter(found))
        if name not in found:
            raise InputError(
                field, f"no {self.noun} named {name!r} for this model; choose one of {sorted(found)}", where=where
            )
        try:
            loaded = self.load(found[name])
        except self.error as e:
            raise InputError(field, str(e), where=where) from None
        if (why := self.misfit(service, loaded)) is not None:
            raise InputError(field, why, where=where)
        return loaded

    def get_by_path(self, service: ModelService, name: str) -> L:
        """The one a path names (/<kind>/{name}/...): 404 when the served model has none of that name,
        a 422 naming the path's `name` when it cannot be read or cannot read this model."""
        if name not in dict(self.listing(service)):
            raise NotFound(f"no {self.noun} {name!r} for the served model")
        return self.get(service, name, field="name", where="path")

    def views(self, service: ModelService, view: Callable[[L], V]) -> list[V]:
        """view(one) for every listed one that loads, reads the served model and has what view needs;
        the rest are left out of the lists (a folder written by hand can lack a figure)."""
        out = []
        for _name, path in self.listing(service):
            try:
                loaded = self.load(path)
                if self.misfit(service, loaded) is None:
                    out.append(view(loaded))
            except (self.error, KeyError, TypeError, ValueError):
                continue
        return out

    # ---- training jobs --------------------------------------------------------------------------

    def runner(self) -> JobRunner[Training]:
        return JobRunner(f"{self.noun} training job", f"{self.folder}/jobs", self.cancelled)

    def start_training(
        self, runner: JobRunner[Training], service: ModelService, tc: Any, name: str | None, corpus: str
    ) -> Job[Training]:
        """Train one on the served model in the background, once its config and name are checked and its
        memory fits the budget (a 422 naming the setting that needs the most, otherwise queued)."""
        try:
            tc.validate(service.model)
        except self.error as e:
            raise InputError(e.field, e.message) from None
        name = name or self.default_name(tc)
        if name in RESERVED or not re.fullmatch(SAE_NAME, name):
            raise InputError("name", f"{name!r} is reserved or not a valid name")
        folder = self.folders(service)[0] / name
        if folder.exists() or name in dict(self.listing(service)):
            raise InputError("name", f"the served model already has a {self.noun} named {name!r}; choose another name")
        work = partial(self.train, checkpoint=service.path, folder=folder)
        return runner.start(work, Training(name, tc, corpus), need=self.need(tc, service.model.cfg, corpus))

    def need(self, tc: Any, cfg: GPTConfig, corpus: str) -> memory.Need:
        """The memory a job training one of tc on a model of cfg over `corpus` (a built-in's name or an
        uploaded file's path) takes at its peak: its own tensors, the model's copy it loads, the text."""
        nbytes, field, hint = self.memory_need(tc, cfg, corpus_bytes(corpus), memory.BUDGET.limit(job=True))
        return memory.Need(nbytes, field, f"this {self.noun} training job", hint)

    def train(
        self,
        job: Job[Training],
        checkpoint: Path | ckpt.Checkpoint,
        folder: Path,
        command: str | None = None,
        on_progress: Callable[[dict], None] | None = None,
    ) -> None:
        """The work of a training job: train on a checkpoint (a folder is loaded first, in the job's
        thread) and save in `folder`, recording the command that asked for it."""
        state = job.state

        def report(e: dict) -> None:
            state.phase, state.last = str(e.get("phase", "training")), e
            job.progress.done = int(e.get("step", 0))
            if self.figures_key in e:
                state.history.append(e)
            if on_progress is not None:
                on_progress(e)

        state.meta = self.train_and_save(
            checkpoint if isinstance(checkpoint, ckpt.Checkpoint) else ckpt.load(checkpoint),
            state.corpus,
            state.config,
            folder,
            command or f"POST /api/v1/{self.folder} (job {job.id})",
            on_progress=report,
            should_stop=job.cancel.is_set,
        )
