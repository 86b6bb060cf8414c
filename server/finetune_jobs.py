"""Fine-tuning jobs inside the app: one at a time, in a background thread, on copies of a model.

A job runs every (method, size) cell of a comparison in turn (model/finetune.py) and, when asked,
saves the `finetune` classifier of its largest size as models/<save_as>. Cells are cached on disk
(<data>/finetune-cache), so asking again for the same comparison returns at once. Users' CSV tasks
live in <data>/tasks/<name>.csv and are referred to by name only.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model import finetune as ft
from gptscope.model import tasks as tasks_mod

from . import memory
from .errors import InputError
from .jobs import Job, JobRunner, Work
from .schemas.finetune import MAX_CSV_BYTES, TASK_PATTERN, FinetuneRequest


@dataclass
class Comparison:
    """A fine-tuning job's own state: what it compares, the cells done and the one running (its
    progress counts the cells)."""

    request: FinetuneRequest
    checkpoint: str
    task: tasks_mod.Task
    cells: list[dict] = field(default_factory=list)
    current: dict | None = None
    saved_as: str | None = None

    @property
    def total_cells(self) -> int:
        return len(self.request.methods) * len(self.request.sizes)


@lru_cache(maxsize=8)
def _csv_task(path: str, mtime: float, name: str) -> tasks_mod.Task:
    return tasks_mod.from_csv(Path(path).read_bytes(), name)


class FinetuneManager(JobRunner[Comparison]):
    """Fine-tuning jobs, and the labelled tasks and saved classifiers under the data folder."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__("fine-tuning job", "finetune", ft.Cancelled)
        self.data_dir = Path(data_dir)
        self.tasks_dir = self.data_dir / "tasks"
        self.cache_dir = self.data_dir / "finetune-cache"
        self.models_dir = self.data_dir / "models"

    # ---- tasks ------------------------------------------------------------------------------

    def task_names(self) -> list[str]:
        users = sorted(p.stem for p in self.tasks_dir.glob("*.csv")) if self.tasks_dir.is_dir() else []
        return [*tasks_mod.BUILTIN_TASKS, *(n for n in users if n not in tasks_mod.BUILTIN_TASKS)]

    def task(self, name: str, field_name: str = "task") -> tasks_mod.Task:
        if name in tasks_mod.BUILTIN_TASKS:
            return tasks_mod.builtin(name)
        if not re.fullmatch(TASK_PATTERN, name):
            raise InputError(field_name, f"task name {name!r} is not valid")
        p = self.tasks_dir / f"{name}.csv"
        if not p.is_file():
            raise InputError(
                field_name,
                f"no task named {name!r}; choose one of {', '.join(self.task_names())} "
                "or upload a CSV to /api/v1/finetune/tasks",
            )
        try:
            return _csv_task(str(p), p.stat().st_mtime, name)
        except tasks_mod.TaskError as e:
            raise InputError(field_name, str(e)) from None

    def save_csv(self, name: str, data: bytes) -> tasks_mod.Task:
        """Check a CSV (refusing a bad row by its number) and keep it as task `name`."""
        if name in tasks_mod.BUILTIN_TASKS or not re.fullmatch(TASK_PATTERN, name):
            raise InputError("name", f"{name!r} is a built-in task's name or not a valid name", where="form")
        if len(data) > MAX_CSV_BYTES:
            raise InputError(
                "file", f"the CSV is {len(data):,} bytes; the limit is {MAX_CSV_BYTES:,}", status=413, where="form"
            )
        try:
            task = tasks_mod.from_csv(data, name)
        except tasks_mod.TaskError as e:
            raise InputError("file", str(e), where="form") from None
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.tasks_dir / f".{name}.{uuid.uuid4().hex[:6]}.tmp"
        tmp.write_bytes(data)
        tmp.replace(self.tasks_dir / f"{name}.csv")
        return task

    # ---- jobs -------------------------------------------------------------------------------

    def finetune(
        self, req: FinetuneRequest, base: ckpt.Checkpoint, checkpoint_name: str, loaded: bool = False
    ) -> Job[Comparison]:
        """Start a comparison of `req` on the base checkpoint (`loaded` for this job, not the served one),
        once its request is checked and its memory fits the budget."""
        task = self.task(req.task)
        check_request(req, base)
        if req.save_as and (self.models_dir / req.save_as).exists():
            raise InputError("save_as", f"models/{req.save_as} already exists; choose another name")
        state = Comparison(req, checkpoint_name, task)
        return self.start(self.work(base), state, state.total_cells, need=job_need(req, base, task, loaded))

    def work(self, base: ckpt.Checkpoint, on_cell: Callable[[dict], None] | None = None) -> Work[Comparison]:
        """The work of a fine-tuning job on `base`, with this data folder's cache and models."""
        return partial(run_comparison, base=base, cache_dir=self.cache_dir, models_dir=self.models_dir, on_cell=on_cell)


def check_request(req: FinetuneRequest, base: ckpt.Checkpoint) -> None:
    """The limits the schema cannot state alone, each refused naming its field."""
    if base.meta.classifier:
        raise InputError("checkpoint", "this checkpoint is already a fine-tuned classifier; fine-tune a language model")
    if (base.meta.tokenizer or {}).get("kind") == "chars":
        raise InputError("checkpoint", "a character-level model has no room for the special tokens fine-tuning adds")
    if (base.meta.tokenizer or {}).get("kind") == "huggingface":
        raise InputError(
            "checkpoint",
            "an imported Hugging Face model keeps its own tokenizer.json, which has no room for the special "
            "tokens GPT-1's fine-tuning adds",
        )
    for name, values in (("sizes", req.sizes), ("methods", req.methods)):
        if len(set(values)) != len(values):
            raise InputError(name, f"{name} must not repeat a value (got {values})")
    if req.save_as and "finetune" not in req.methods:
        raise InputError("save_as", "save_as saves the `finetune` classifier: include 'finetune' in methods")


def job_need(req: FinetuneRequest, base: ckpt.Checkpoint, task: tasks_mod.Task, loaded: bool) -> memory.Need:
    """The memory a fine-tuning job takes at its peak (model/finetune.py's estimate: the classifiers,
    their gradients and AdamW's moments, a batch's activations, the task's examples)."""
    nbytes, field, hint = ft.memory_need(
        base.model.cfg,
        list(req.methods),
        len(task.train) + len(task.test),
        bool(req.save_as),
        loaded,
        memory.BUDGET.limit(job=True),
    )
    return memory.Need(nbytes, field, "this fine-tuning job", hint)


def _largest(sizes: list[int], n_train: int) -> int:
    return max(sizes, key=lambda s: ft.n_used(n_train, s))


def run_comparison(
    job: Job[Comparison],
    base: ckpt.Checkpoint,
    cache_dir: Path,
    models_dir: Path,
    on_cell: Callable[[dict], None] | None = None,
) -> None:
    """The work of a fine-tuning job: every (method, size) cell in turn, each result appended to
    its cells; saves the classifier when asked (a failed save leaves no hidden folder behind)."""
    try:
        _run_cells(job, base, cache_dir, models_dir, on_cell)
    finally:
        job.state.current = None
        if job.state.request.save_as:  # once saved it was renamed into place
            shutil.rmtree(models_dir / f".{job.state.request.save_as}.partial", ignore_errors=True)


def _run_cells(
    job: Job[Comparison], base: ckpt.Checkpoint, cache_dir: Path, models_dir: Path, on_cell: Callable | None
) -> None:
    state, req = job.state, job.state.request
    base_id = base.meta.weights_sha256 or str(base.path)
    prepared = ft.prepare(base.model, base_id, base.encoding(), state.task)
    keep_size = _largest(req.sizes, len(prepared.train.labels)) if req.save_as else None
    for method in req.methods:
        for size in req.sizes:
            n = ft.n_used(len(prepared.train.labels), size)
            state.current = {"method": method, "n_train": n, "step": 0, "steps": req.steps or ft.RECIPE.steps_for(n)}
            keep = method == "finetune" and size == keep_size

            def on_step(step: int, steps: int, cur=state.current) -> None:
                cur["step"], cur["steps"] = step, steps

            result, clf = ft.run_cell(
                prepared,
                method,
                size,
                req.lm_weight,
                req.seed,
                req.steps,
                cache_dir,
                keep_model=keep,
                on_step=on_step,
                cancel=job.cancel.is_set,
            )
            state.cells.append(result)
            job.progress.done = len(state.cells)
            if on_cell is not None:
                on_cell(result)
            if clf is not None:
                _save(state, clf, base, result, models_dir)


def _save(state: Comparison, clf: ft.Classifier, base: ckpt.Checkpoint, result: dict, models_dir: Path) -> None:
    """Write the classifier in a hidden folder, load it back as the app would, then rename it into place."""
    name = state.request.save_as
    partial_dir = models_dir / f".{name}.partial"
    shutil.rmtree(partial_dir, ignore_errors=True)
    ft.save_classifier(
        partial_dir,
        clf,
        base.meta,
        state.task,
        result,
        command=f"POST /api/v1/finetune {state.request.model_dump_json(exclude_none=True)}",
        name=name,
    )
    ft.load_classifier(ckpt.load(partial_dir))
    final = models_dir / name
    if final.exists():
        raise FileExistsError(f"models/{name} appeared while the job ran; the classifier was not saved")
    partial_dir.rename(final)
    state.saved_as = f"models/{name}"
