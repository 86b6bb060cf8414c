"""Exports of a model as background jobs (server/jobs.py's JobRunner, one at a time): POST /api/v1/export/model checks at once
that the checkpoint can be written as asked (a 422 naming the switch a transformers class does not
compute), then writes it under <data>/exports/<job id>/ in a thread; GET .../jobs/{id} tells the step
and holds the answer, whose `download` serves the folder as a zip or the .gguf file. Paths come from
the job, never from a request; the last 4 exports are kept."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from gptscope.model import checkpoint as ckpt
from gptscope.model.config import GPTConfig, count_params
from gptscope.model.errors import Cancelled
from gptscope.model.export_hf import (
    ExportRefused,
    check_read_back,
    config_json,
    family_of,
    special_ids,
    tokenizer_files,
)

from . import memory
from .errors import InputError
from .jobs import Answered, Job, JobRunner
from .model_export import export_model
from .schemas.export_model import ExportedFile, ExportModelResponse

KEEP = 4
STEPS = ("loading", "writing", "add-ons")


@dataclass
class ExportPlan:
    checkpoint: Path
    name: str
    format: str
    addons: bool
    out_root: Path  # <data>/exports
    total: int = len(STEPS)
    need: memory.Need | None = None


def plan(checkpoint: Path, name: str, req, out_root: Path) -> ExportPlan:
    """The request checked against the checkpoint before anything is written: its switches against the
    class it would become, its tokenizer (a 422 naming the field)."""
    try:
        meta = ckpt.read_meta(checkpoint)
        cfg = GPTConfig.from_dict(meta.config or {})
        fam = family_of(cfg, (meta.source or {}).get("model_type"))
        enc = meta.encoding()
        _json, tok_cfg = tokenizer_files(enc, cfg.n_ctx)
        check_read_back(cfg, fam, config_json(cfg, fam, special_ids(enc, tok_cfg)))
    except ExportRefused as e:
        raise InputError("checkpoint", f"{name} cannot be exported: {e}") from None
    except (ckpt.CheckpointError, ValueError) as e:
        raise InputError("checkpoint", str(e)) from None
    weights = count_params(cfg)["total"] * 4  # float32: the model, its copy for the file, the file's buffers
    need = memory.Need(3 * weights, "checkpoint", "exporting this model", "a smaller model")
    return ExportPlan(checkpoint, name, req.format, req.addons, out_root, need=need)


def runner() -> JobRunner[Answered[ExportModelResponse]]:
    return JobRunner("export job", "export/model/jobs", Cancelled, keep=KEEP)


def start(jobs: JobRunner[Answered[ExportModelResponse]], p: ExportPlan, data_dir: Path) -> Job:
    return jobs.start(partial(_work, p=p, data_dir=data_dir), Answered(), p.total, p.need)


def _work(job: Job[Answered[ExportModelResponse]], p: ExportPlan, data_dir: Path) -> None:
    def progress(done: int, _total: int) -> None:
        job.progress.done = done

    job.state.result = compute(data_dir, p, job.id, progress, job.cancel.is_set)
    job.progress.done = p.total


def compute(data_dir: Path, p: ExportPlan, job_id: str, on_chunk, cancel) -> ExportModelResponse:
    p.out_root.mkdir(parents=True, exist_ok=True)
    _prune(p.out_root)
    folder = p.out_root / job_id
    out = folder / (f"{p.name}.gguf" if p.format == "gguf" else p.name)
    done = 0

    def step(phase: str) -> None:
        nonlocal done
        if cancel():
            raise Cancelled("export cancelled")
        on_chunk(done := min(done + (phase != "loading"), len(STEPS)), len(STEPS))

    folder.mkdir(parents=True, exist_ok=True)
    info = export_model(p.checkpoint, out, p.format, data_dir, addons=p.addons, progress=step)  # type: ignore[arg-type]
    files = [out] if out.is_file() else sorted(f for f in out.rglob("*") if f.is_file())
    base = out.parent if out.is_file() else out
    return ExportModelResponse(
        checkpoint=p.name,
        format=p.format,  # type: ignore[arg-type]
        architecture=info["architecture"],
        files=[ExportedFile(name=str(f.relative_to(base)), bytes=f.stat().st_size) for f in files],
        addons=info.get("addons", {}),
        download=f"/api/v1/export/model/jobs/{job_id}/download",
    )


def _prune(root: Path) -> None:
    """Keep the newest KEEP - 1 exports before a new one is written."""
    olds = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    for d in olds[: max(0, len(olds) - (KEEP - 1))]:
        shutil.rmtree(d, ignore_errors=True)
