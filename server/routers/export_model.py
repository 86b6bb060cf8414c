"""POST /api/v1/export/model: the served model, or a checkpoint by name, written for other tools (a Hugging
Face folder with its add-ons, or a GGUF file) as a job; GET .../jobs/{id} for its step and answer,
.../download for the files (a zip of the folder, or the .gguf file)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, Response

from ..config import BUILTIN_CHECKPOINT
from ..deps import Runs, Service
from ..errors import InputError, NotFound
from ..export_model_jobs import plan, start
from ..job_kinds import EXPORT_MODEL
from ..jobs import Answered, JobRunner, analysis_routes
from ..schemas.common import ERROR_RESPONSES, NOT_FOUND
from ..schemas.export_model import ExportModelJob, ExportModelRequest, ExportModelResponse

router = APIRouter(tags=["export"])
get_jobs = EXPORT_MODEL.runner
Jobs = Annotated[JobRunner[Answered[ExportModelResponse]], Depends(get_jobs)]


@router.post(
    "/export/model",
    status_code=202,
    response_model=ExportModelJob,
    responses={**ERROR_RESPONSES, **NOT_FOUND, 409: {"description": "another export is being written"}},
    summary="Write a model for transformers, TransformerLens or llama.cpp, as a job (a model no transformers class "
    "computes exactly is refused, naming the switch)",
)
def export_model_job(req: ExportModelRequest, service: Service, runs: Runs, jobs: Jobs) -> ExportModelJob:
    if req.checkpoint is None:
        path, name = service.path, service.meta.name or service.path.name
    else:
        path, name = runs.checkpoint_path(req.checkpoint, BUILTIN_CHECKPOINT), req.checkpoint
    p = plan(path, _safe(name), req, runs.data_dir / "exports")
    return show(start(jobs, p, runs.data_dir))


def _safe(name: str) -> str:
    """A file name from a checkpoint's name (its letters, digits, '-', '_', '.')."""
    out = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip(".") or "model"
    return out[:80]


show = analysis_routes(router, "/export/model/jobs", get_jobs, ExportModelJob, "export job", "steps")


@router.get(
    "/export/model/jobs/{job_id}/download",
    responses={**NOT_FOUND, 200: {"content": {"application/zip": {}, "application/octet-stream": {}}}},
    summary="A finished export's files: a zip of the Hugging Face folder, or the .gguf file",
)
def download(job_id: str, jobs: Jobs, runs: Runs) -> Response:
    job = jobs.get(job_id)
    result = job.state.result
    if job.status != "done" or result is None:
        raise InputError("job_id", f"export job {job_id} is {job.status}; its files come once it is done", where="path")
    folder = runs.data_dir / "exports" / job.id
    if not folder.is_dir():
        raise NotFound(f"export job {job_id}'s files are gone (only the last exports are kept)")
    if result.format == "gguf":
        f = folder / result.files[0].name
        return FileResponse(f, media_type="application/octet-stream", filename=f.name)
    zipped = folder / f"{result.checkpoint}.zip"
    if not zipped.is_file():
        _zip(folder / result.checkpoint, zipped)
    return FileResponse(zipped, media_type="application/zip", filename=zipped.name)


def _zip(src: Path, dest: Path) -> None:
    tmp = dest.with_suffix(".partial")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                z.write(f, Path(src.name) / f.relative_to(src))
    tmp.rename(dest)
