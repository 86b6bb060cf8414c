"""POST /api/v1/export/model: a checkpoint written for other tools (server/model_export.py), as a job."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import JobStatus, StrictRequest
from .training import CHECKPOINT_PATTERN


class ExportModelRequest(StrictRequest):
    checkpoint: str | None = Field(
        None,
        pattern=CHECKPOINT_PATTERN,
        description="a name from GET /api/v1/checkpoints (the built-in model, a run's checkpoint or snapshot, an "
        "imported model); null: the served model",
    )
    format: Literal["hf", "gguf"] = Field(
        "hf",
        description="hf: a Hugging Face folder (config.json, model.safetensors, generation_config.json, tokenizer.json, "
        "tokenizer_config.json) for the transformers class that computes the model exactly, downloaded as a zip; "
        "gguf: one file for llama.cpp",
    )
    addons: bool = Field(True, description="hf: the SAEs, transcoders and tuned lenses trained on the model, beside it")


class ExportedFile(BaseModel):
    name: str = Field(description="its path inside the folder")
    bytes: int


class ExportModelResponse(BaseModel):
    checkpoint: str = Field(description="the checkpoint exported")
    format: Literal["hf", "gguf"]
    architecture: str = Field(
        description="the class that computes it: GPT2LMHeadModel, LlamaForCausalLM, ... or the GGUF architecture"
    )
    files: list[ExportedFile]
    addons: dict[str, list[str]] = Field(default_factory=dict, description="add-ons written beside it, by kind")
    download: str = Field(description="GET it: a zip of the folder (hf) or the .gguf file")


class ExportModelJob(BaseModel):
    id: str
    status: JobStatus
    done: int = Field(description="steps finished: loading, writing, the add-ons")
    total: int
    elapsed: float = Field(description="seconds since the job started")
    result: ExportModelResponse | None = Field(description="the answer, once status is done")
    error: str | None = Field(description="what went wrong, when status is failed")
