"""Training runs inside the app: one at a time, in a background thread, on a separate model.

The served model is never touched: a run builds and trains its own GPT, writes snapshots and a
final checkpoint under <data_dir>/runs/<id>/, and the user may then switch the app to it. Runs,
corpora and checkpoints are referred to by validated names only, never by paths from a request.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from model import checkpoint as ckpt
from model.train import Cancelled, TrainConfig, train

from .schemas.training import CHECKPOINT_PATTERN, NAME_PATTERN, TrainingRequest

RUN_ID = re.compile(r"^[0-9a-f]{12}$")


class Conflict(Exception):
    def __init__(self, running_id: str) -> None:
        super().__init__(f"a training run is already going: {running_id}; cancel it (DELETE /api/v1/training/{running_id}) or wait")
        self.running_id = running_id


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
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    error: str | None = None
    cached: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.time()) - self.started


class TrainingManager:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.runs_dir = self.data_dir / "runs"
        self.corpora_dir = self.data_dir / "corpora"
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._restore()

    @staticmethod
    def cache_key(req: TrainingRequest) -> str:
        return req.model_dump_json(exclude={"name"})

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
            snaps = d / "snapshots"
            job.snapshots = sorted(int(p.name.split("-")[1]) for p in snaps.glob("step-*")
                                   if (p / ckpt.META_NAME).is_file()) if snaps.is_dir() else []
            try:
                meta = ckpt.read_meta(d)
            except ckpt.CheckpointError:
                meta = None
            if meta and meta.get("final"):
                job.status, job.step = "done", int(meta["step"])
                job.total_steps = int(meta["schedule"]["total_steps"])
                job.history, job.evals = meta.get("history", []), meta.get("evals", [])
                job.uniform_loss = meta.get("uniform_loss")
            job.finished = job.started
            self.jobs[d.name] = job

    # ---- names -> paths (validated before any filesystem call) --------------------------------

    def corpus_path(self, name: str) -> str:
        if name == "shakespeare":
            return "shakespeare"
        if not re.fullmatch(NAME_PATTERN, name) or ".." in name:
            raise ValueError(f"corpus name {name!r} is not valid")
        p = (self.corpora_dir / f"{name}.txt").resolve()
        if p.parent != self.corpora_dir.resolve() or not p.is_file():
            raise FileNotFoundError(f"no corpus named {name!r}; upload it to /api/v1/corpora first")
        return str(p)

    def checkpoint_path(self, name: str, builtin: Path) -> Path:
        if not re.fullmatch(CHECKPOINT_PATTERN, name):
            raise ValueError(f"checkpoint name {name!r} is not valid")
        if name == "builtin":
            return builtin
        run, _, snap = name.partition("/")
        p = self.runs_dir / run / "snapshots" / snap if snap else self.runs_dir / run
        p = p.resolve()
        if self.runs_dir.resolve() not in p.parents or not (p / ckpt.META_NAME).is_file():
            raise FileNotFoundError(f"no checkpoint named {name!r}")
        return p

    # ---- runs ---------------------------------------------------------------------------------

    def running(self) -> Job | None:
        return next((j for j in self.jobs.values() if j.status in ("starting", "running")), None)

    def start(self, req: TrainingRequest) -> Job:
        corpus = self.corpus_path(req.corpus)  # raises before anything is written
        key = self.cache_key(req)
        with self._lock:
            done = [j for j in self.jobs.values() if j.status == "done" and self.cache_key(j.request) == key]
            if done and req.corpus == "shakespeare":  # an uploaded corpus may have been replaced since
                return replace(done[-1], cached=True)
            busy = self.running()
            if busy:
                raise Conflict(busy.id)
            run_id = uuid.uuid4().hex[:12]
            job = Job(run_id, req, self.runs_dir / run_id)
            self.jobs[run_id] = job
        overrides = {k: v for k, v in req.overrides.model_dump().items() if v is not None}
        tc = TrainConfig(corpus=corpus, preset=req.preset, vocab_size=req.vocab_size, max_steps=req.max_steps,
                         time_budget=req.time_budget, batch_size=req.batch_size, seq_len=req.seq_len,
                         max_lr=req.max_lr, warmup_steps=min(req.warmup_steps, req.max_steps or req.warmup_steps),
                         seed=req.seed, snapshot_fractions=tuple(sorted(set(req.snapshots))), overrides=overrides,
                         name=req.name or f"run-{run_id}", device="cpu")
        try:
            tc.validate()
        except ValueError:
            with self._lock:
                del self.jobs[run_id]
            raise
        job.out.mkdir(parents=True, exist_ok=True)
        (job.out / "request.json").write_text(json.dumps(req.model_dump(), indent=1), encoding="utf-8")
        job.thread = threading.Thread(target=self._run, args=(job, tc), name=f"train-{run_id}", daemon=True)
        job.thread.start()
        return job

    def _run(self, job: Job, tc: TrainConfig) -> None:
        def on_event(e: dict) -> None:
            kind = e["type"]
            if kind == "start":
                job.status = "running"
                job.uniform_loss = e["uniform_loss"]
                job.total_steps = e["total_steps"]
            elif kind == "schedule":
                job.total_steps = e["total_steps"]
            elif kind == "step":
                rec = {k: e[k] for k in ("step", "loss", "lr", "grad_norm", "layer_grad_norms", "tokens_per_s", "elapsed_s")}
                if "val_loss" in e:
                    rec["val_loss"] = e["val_loss"]
                    job.evals.append({"step": e["step"], "val_loss": e["val_loss"], "train_loss": e["loss"]})
                job.history.append(rec)
                job.step = e["step"]
                job.total_steps = e["total_steps"]
            elif kind == "snapshot":
                job.snapshots.append(e["step"])

        req = job.request
        try:
            train(tc, out=job.out, progress=False, on_event=on_event, should_stop=job.cancel.is_set,
                  command=f"POST /api/v1/training {req.model_dump_json(exclude_none=True)}")
            if tc.snapshot_fractions and job.step not in job.snapshots and \
                    (job.out / "snapshots" / f"step-{job.step:06d}").is_dir():
                job.snapshots.append(job.step)
            job.status = "done"
        except Cancelled:
            job.status = "cancelled"
        except Exception as e:  # noqa: BLE001 - report any failure of the run to the user
            job.status = "failed"
            job.error = f"{type(e).__name__}: {e}"
        finally:
            job.finished = time.time()

    def get(self, run_id: str) -> Job:
        if not RUN_ID.fullmatch(run_id) or run_id not in self.jobs:
            raise KeyError(run_id)
        return self.jobs[run_id]

    def cancel(self, run_id: str, wait: float = 30.0) -> Job:
        job = self.get(run_id)
        job.cancel.set()
        if job.thread is not None:
            job.thread.join(timeout=wait)
        return job

    def shutdown(self) -> None:
        for job in self.jobs.values():
            job.cancel.set()
        for job in self.jobs.values():
            if job.thread is not None:
                job.thread.join(timeout=30)


def eta(job: Job) -> float | None:
    if job.status != "running" or not job.total_steps or job.step == 0:
        return None
    per_step = job.history[-1]["elapsed_s"] / max(1, job.step - (job.history[0]["step"] - 1)) if job.history else None
    return None if per_step is None else round(max(0.0, (job.total_steps - job.step) * per_step), 1)


def finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None
