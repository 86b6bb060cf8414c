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
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.model.train import Cancelled, ConfigError, StepRecord, TrainConfig, train

from .background import JOB_ID as RUN_ID
from .background import BackgroundJobs
from .errors import Conflict, InputError, NotFound
from .schemas.training import CHECKPOINT_PATTERN, NAME_PATTERN, TrainingRequest


@dataclass
class Job:
    id: str
    request: TrainingRequest
    out: Path
    status: str = "starting"
    step: int = 0
    total_steps: int | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    uniform_loss: float | None = None
    reference_losses: dict | None = None  # {"unigram": .., "bigram": ..} nats/token of the training text
    precision: str | None = None  # what the run computes in, and why (the trainer's choice)
    history: list[StepRecord] | None = field(default_factory=list)  # None: on disk, read on first use
    evals: list[dict] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    error: str | None = None
    cached: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started

    def records(self) -> list[StepRecord]:
        if self.history is None:  # a finished run from an earlier start of the app
            try:
                self.history = [StepRecord(**h) for h in ckpt.read_history(self.out, ckpt.read_meta(self.out))]
            except (ckpt.CheckpointError, TypeError):
                self.history = []
        return self.history

    def eta(self) -> float | None:
        if self.status != "running" or not self.total_steps:
            return None  # (a finished run's history file is not read just for this)
        recs = self.records()
        if not recs:
            return None
        per_step = recs[-1].elapsed_s / max(1, self.step - (recs[0].step - 1))
        return round(max(0.0, (self.total_steps - self.step) * per_step), 1)


class RunManager(BackgroundJobs[Job]):
    noun, route, active = "training run", "training", ("starting", "running")

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
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
            job = Job(d.name, req, d, status="cancelled", started=(d / "request.json").stat().st_mtime)
            job.snapshots = self.snapshot_steps(d.name)
            try:
                meta = ckpt.read_meta(d)
            except ckpt.CheckpointError:
                meta = None
            if meta and meta.get("final"):
                job.status, job.step = "done", int(meta["step"])
                job.total_steps = int(meta["step"])  # finished: the steps it took (the schedule keeps the plan)
                job.history, job.evals = None, meta.get("evals", [])
                job.uniform_loss = meta.get("uniform_loss")
                job.reference_losses = meta.get("reference_losses")
                job.precision = meta.get("precision")
            job.finished = job.started
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

    def start(self, req: TrainingRequest) -> Job:
        corpus = self.corpus_path(req.corpus)  # raises before anything is written
        key = self.cache_key(req)
        with self._lock:
            done = [j for j in self.jobs.values() if j.status == "done" and self.cache_key(j.request) == key]
            if done and req.corpus in corpus_mod.BUILTIN:  # an uploaded corpus may have been replaced since
                return replace(done[-1], cached=True)
            self.refuse_if_busy()
            run_id = uuid.uuid4().hex[:12]
            tc = TrainConfig(
                **{
                    **req.model_dump(exclude_none=True),
                    "corpus": corpus,
                    "name": req.name or f"run-{run_id}",
                    "device": "cpu",
                }
            )
            try:
                tc.validate()
            except ConfigError as e:
                raise InputError(e.field, e.message) from None
            job = Job(run_id, req, self.runs_dir / run_id)
            self.jobs[run_id] = job
        job.out.mkdir(parents=True, exist_ok=True)
        (job.out / "request.json").write_text(json.dumps(req.model_dump(), indent=1), encoding="utf-8")
        return self.launch(job, self._run, tc)

    def _run(self, job: Job, tc: TrainConfig) -> None:
        def on_event(e: dict) -> None:
            kind = e["type"]
            if kind == "start":
                job.status, job.uniform_loss = "running", e["uniform_loss"]
                job.reference_losses, job.precision = e.get("reference_losses"), e.get("precision")
            if kind in ("start", "schedule", "step"):
                job.total_steps = e["total_steps"]
            if kind == "step":
                job.history.append(e["record"])
                job.step = e["record"].step
            elif kind == "eval":
                job.evals.append({k: e[k] for k in ("step", "val_loss", "train_loss")})
            elif kind == "snapshot":
                job.snapshots.append(e["step"])

        try:
            train(
                tc,
                out=job.out,
                progress=False,
                on_event=on_event,
                should_stop=job.cancel.is_set,
                command=f"POST /api/v1/training {job.request.model_dump_json(exclude_none=True)}",
            )
            job.status = "done"
            job.total_steps = job.step  # a time budget's plan may have been a step longer than the run
        except Cancelled:
            job.status = "cancelled"
        except Exception as e:
            job.status = "failed"
            job.error = f"{type(e).__name__}: {e}"
        finally:
            job.finished = time.time()

    def delete(self, run_id: str, serving: Path) -> None:
        """Forget a run and remove its folder (final checkpoint, snapshots); a run still going is
        cancelled first. Refused while the app serves one of its checkpoints."""
        job = self.get(run_id)
        if Path(serving).resolve().is_relative_to(job.out.resolve()):
            raise Conflict(
                f"the app is serving a checkpoint of run {run_id}; switch to another model "
                f"(POST /api/v1/model) before deleting the run",
                running_id=run_id,
            )
        job = self.cancel(run_id)
        if job.thread is not None and job.thread.is_alive():
            raise Conflict(f"run {run_id} has not stopped yet; try again", running_id=run_id)
        with self._lock:
            self.jobs.pop(run_id, None)
        shutil.rmtree(job.out, ignore_errors=True)
