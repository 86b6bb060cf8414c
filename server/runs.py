"""Training runs inside the app: one at a time, in a background thread, on a separate model.

The served model is never touched: a run builds and trains its own GPT, writes snapshots and a
final checkpoint under <data_dir>/runs/<id>/, and the user may then switch the app to it. Runs,
corpora and checkpoints are referred to by validated names only, never by paths from a request.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.model.train import (
    Cancelled,
    ConfigError,
    StepRecord,
    TrainConfig,
    corpus_bytes,
    run_memory_need,
    train,
)

from . import memory
from .errors import Conflict, InputError, NotFound
from .jobs import JOB_ID as RUN_ID
from .jobs import Job, JobProgress, JobRunner
from .schemas.training import CHECKPOINT_PATTERN, NAME_PATTERN, TrainingRequest


@dataclass
class TrainingRun:
    """A training run's own state beside what the runner keeps (step and total_steps are its progress)."""

    request: TrainingRequest
    uniform_loss: float | None = None
    reference_losses: dict | None = None  # {"unigram": .., "bigram": ..} nats/token of the training text
    precision: str | None = None  # what the run computes in, and why (the trainer's choice)
    history: list[StepRecord] = field(default_factory=list)
    unread: Path | None = None  # a run from an earlier start of the app: its folder, history read on first use
    evals: list[dict] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    cached: bool = False

    def records(self) -> list[StepRecord]:
        if self.unread is not None:
            folder, self.unread = self.unread, None
            try:
                self.history = [StepRecord(**h) for h in ckpt.read_history(folder, ckpt.read_meta(folder))]
            except (ckpt.CheckpointError, TypeError):
                self.history = []
        return self.history


class RunManager(JobRunner[TrainingRun]):
    """Training runs, and the corpora and checkpoints they use and make, under the data folder."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__("training run", "training", Cancelled, first_status="starting")
        self.data_dir = Path(data_dir)
        self.runs_dir = self.data_dir / "runs"
        self.corpora_dir = self.data_dir / "corpora"
        self.models_dir = self.data_dir / "models"  # models brought in with `gptscope import`
        self._restore()

    @staticmethod
    def cache_key(req: TrainingRequest) -> str:
        return req.model_dump_json(exclude={"name"})

    def snapshot_steps(self, run_id: str) -> list[int]:
        """Steps of a run's complete snapshots, in order."""
        snaps = self.runs_dir / run_id / "snapshots"
        return (
            sorted(int(p.name.split("-")[1]) for p in snaps.glob("step-*") if (p / ckpt.META_NAME).is_file())
            if snaps.is_dir()
            else []
        )

    def _restore(self) -> None:
        """Runs left on disk by an earlier start of the app come back as finished or cancelled."""
        if not self.runs_dir.is_dir():
            return
        for d in sorted(self.runs_dir.iterdir()):
            if not (RUN_ID.fullmatch(d.name) and (d / "request.json").is_file()):
                continue
            try:
                req = TrainingRequest.model_validate_json((d / "request.json").read_text(encoding="utf-8"))
            except ValueError:
                continue
            run = TrainingRun(req, snapshots=self.snapshot_steps(d.name))
            started = (d / "request.json").stat().st_mtime
            job = Job(d.name, self.noun, run, "cancelled", started=started, finished=started)
            try:
                meta = ckpt.read_meta(d)
            except ckpt.CheckpointError:
                meta = None
            if meta and meta.final:
                # finished: the steps it took are its total (the schedule keeps the plan)
                job.status, job.progress = "done", JobProgress(int(meta.step or 0), int(meta.step or 0))
                run.unread, run.evals = d, meta.evals or []
                run.uniform_loss = meta.uniform_loss
                run.reference_losses = meta.reference_losses
                run.precision = meta.precision
            self.jobs[d.name] = job

    # ---- names -> paths (validated before any filesystem call) --------------------------------

    def corpus_path(self, name: str) -> str:
        if name in corpus_mod.BUILTIN:
            return name
        if not re.fullmatch(NAME_PATTERN, name) or ".." in name:
            raise InputError("corpus", f"corpus name {name!r} is not valid")
        p = (self.corpora_dir / f"{name}.txt").resolve()
        if p.parent != self.corpora_dir.resolve() or not p.is_file():
            raise InputError("corpus", f"no corpus named {name!r}; upload it to /api/v1/corpora first")
        return str(p)

    def checkpoint_path(self, name: str, builtin: Path) -> Path:
        if not re.fullmatch(CHECKPOINT_PATTERN, name):
            raise InputError("checkpoint", f"checkpoint name {name!r} is not valid")
        if name == "builtin":
            return builtin
        run, _, snap = name.partition("/")
        if run == "models":
            base, p = self.models_dir, self.models_dir / snap
        else:
            base, p = self.runs_dir, self.runs_dir / run / "snapshots" / snap if snap else self.runs_dir / run
        p = p.resolve()
        if base.resolve() not in p.parents or not (p / ckpt.META_NAME).is_file():
            raise NotFound(f"no checkpoint named {name!r}")
        return p

    def checkpoint_dirs(self, builtin: Path) -> list[tuple[str, Path]]:
        """(name, folder) of every checkpoint the app can serve: built-in, imported models, runs, their
        snapshots."""
        found = [("builtin", builtin)]
        if self.models_dir.is_dir():  # hidden folders are imports still being written
            found += [
                (f"models/{p.name}", p)
                for p in sorted(self.models_dir.iterdir())
                if p.is_dir() and not p.name.startswith(".")
            ]
        if self.runs_dir.is_dir():
            for run in sorted(p for p in self.runs_dir.iterdir() if p.is_dir()):
                found.append((run.name, run))
                snaps = run / "snapshots"
                if snaps.is_dir():
                    found += [(f"{run.name}/{s.name}", s) for s in sorted(snaps.iterdir()) if s.is_dir()]
        return found

    # ---- corpora ------------------------------------------------------------------------------

    def save_corpus(self, name: str, data: bytes) -> corpus_mod.Corpus:
        """Check an upload is usable UTF-8 text, then write it atomically as <name>.txt."""
        if name in corpus_mod.BUILTIN or ".." in name:
            raise InputError("name", f"{name!r} is reserved or not valid")
        try:
            corpus = corpus_mod.from_bytes(data, name)
        except corpus_mod.CorpusError as e:
            raise InputError("file", str(e), status=413 if len(data) > corpus_mod.MAX_CORPUS_BYTES else 422) from None
        self.corpora_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.corpora_dir / f".{name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.corpora_dir / f"{name}.txt")
        return corpus

    def corpus_files(self) -> list[Path]:
        return sorted(self.corpora_dir.glob("*.txt")) if self.corpora_dir.is_dir() else []

    # ---- runs ---------------------------------------------------------------------------------

    def train(self, req: TrainingRequest) -> Job[TrainingRun]:
        """Start a run of `req` (or, when an identical one on a built-in corpus is done, that run, cached)."""
        corpus = self.corpus_path(req.corpus)  # raises before anything is written
        tc = train_config(req, corpus, req.name or "run")
        key = self.cache_key(req)
        need = run_need(tc, corpus)
        with self.lock:  # the same lock as start's: no identical run can finish between the two
            done = [j for j in self.jobs.values() if j.status == "done" and self.cache_key(j.state.request) == key]
            if done and req.corpus in corpus_mod.BUILTIN:  # an uploaded corpus may have been replaced since
                return replace(done[-1], state=replace(done[-1].state, cached=True))
            return self.start(partial(train_run, tc=tc, runs_dir=self.runs_dir), TrainingRun(req), need=need)

    def delete(self, run_id: str, serving: Path) -> None:
        """Forget a run and remove its folder (final checkpoint, snapshots); a run still going is
        cancelled first. Refused while the app serves one of its checkpoints."""
        folder = self.runs_dir / self.get(run_id).id
        if Path(serving).resolve().is_relative_to(folder.resolve()):
            raise Conflict(
                f"the app is serving a checkpoint of run {run_id}; switch to another model "
                f"(POST /api/v1/model) before deleting the run",
                running_id=run_id,
            )
        job = self.cancel(run_id)
        if job.thread is not None and job.thread.is_alive():
            raise Conflict(f"run {run_id} has not stopped yet; try again", running_id=run_id)
        with self.lock:
            self.jobs.pop(run_id, None)
        shutil.rmtree(folder, ignore_errors=True)


def train_config(req: TrainingRequest, corpus: str, name: str) -> TrainConfig:
    """The trainer's configuration of a request, checked (a 422 naming the field otherwise)."""
    tc = TrainConfig(**{**req.model_dump(exclude_none=True), "corpus": corpus, "name": name, "device": "cpu"})
    try:
        tc.validate()
    except ConfigError as e:
        raise InputError(e.field, e.message) from None
    return tc


def run_need(tc: TrainConfig, corpus: str) -> memory.Need:
    """The memory a run of tc on `corpus` (a built-in's name or an uploaded file's path) takes at its peak
    (model/train.py's estimate: weights, gradients, optimizer, one batch's activations, the token ids),
    naming the request field that needs the most and, when one fits the budget, the largest batch_size."""
    nbytes, field, hint = run_memory_need(
        tc, corpus_bytes(corpus), corpus in corpus_mod.BUILTIN, memory.BUDGET.limit(job=True)
    )
    return memory.Need(nbytes, field, "this training run", hint)


def train_run(job: Job[TrainingRun], tc: TrainConfig, runs_dir: Path) -> None:
    """The work of a training run: train into <runs_dir>/<id>/, keeping the job's progress and state."""
    run, req, out = job.state, job.state.request, runs_dir / job.id
    out.mkdir(parents=True, exist_ok=True)
    (out / "request.json").write_text(json.dumps(req.model_dump(), indent=1), encoding="utf-8")

    def on_event(e: dict) -> None:
        kind = e["type"]
        if kind == "start":
            job.status, run.uniform_loss = "running", e["uniform_loss"]
            run.reference_losses, run.precision = e.get("reference_losses"), e.get("precision")
        if kind in ("start", "schedule", "step"):
            job.progress.total = e["total_steps"]
        if kind == "step":
            run.history.append(e["record"])
            job.progress.done = e["record"].step
        elif kind == "eval":
            run.evals.append({k: e[k] for k in ("step", "val_loss", "train_loss")})
        elif kind == "snapshot":
            run.snapshots.append(e["step"])

    train(
        replace(tc, name=req.name or f"run-{job.id}"),
        out=out,
        progress=False,
        on_event=on_event,
        should_stop=job.cancel.is_set,
        command=f"POST /api/v1/training {req.model_dump_json(exclude_none=True)}",
    )
    job.progress.total = job.progress.done  # a time budget's plan may have been a step longer than the run
