"""Fine-tuning as the API shows it: tasks, jobs, and a served classifier's prediction."""

from __future__ import annotations

from gptscope.model import tasks as tasks_mod
from gptscope.model.finetune import frame

from ..digits import COARSE
from ..errors import InputError
from ..finetune_jobs import Comparison, FinetuneManager
from ..jobs import Job, answer_fields
from ..schemas.finetune import (
    CellResult,
    ClassifyRequest,
    ClassifyResponse,
    FinetuneJob,
    Progress,
    TaskExample,
    TaskInfo,
    TasksResponse,
)
from ..schemas.forward import ForwardRequest
from ..service import ModelService
from .forward import forward

N_EXAMPLES = 6


def task_info(task: tasks_mod.Task) -> TaskInfo:
    return TaskInfo(
        name=task.name,
        source=task.source,
        description=task.description,
        labels=task.labels,
        n_train=len(task.train),
        n_test=len(task.test),
        train_counts=task.counts(task.train),
        test_counts=task.counts(task.test),
        chance=round(task.chance, COARSE),
        train_plays=task.train_plays,
        test_plays=task.test_plays,
        excluded_plays=task.excluded_plays,
        examples=[
            TaskExample(text=e.text, label=task.labels[e.label], text_b=e.text_b) for e in task.train[:N_EXAMPLES]
        ],
    )


def tasks(manager: FinetuneManager) -> TasksResponse:
    return TasksResponse(tasks=[task_info(manager.task(n)) for n in manager.task_names()])


def job_status(job: Job[Comparison]) -> FinetuneJob:
    state, req = job.state, job.state.request
    return FinetuneJob(
        **answer_fields(job),
        task=state.task.name,
        checkpoint=state.checkpoint,
        labels=state.task.labels,
        chance=round(state.task.chance, COARSE),
        methods=req.methods,
        sizes=req.sizes,
        lm_weight=req.lm_weight,
        seed=req.seed,
        cells=[CellResult(**c) for c in list(state.cells)],
        total_cells=job.progress.total or 0,
        current=Progress(**state.current) if state.current else None,
        saved_as=state.saved_as,
    )


def classify(service: ModelService, req: ClassifyRequest) -> ClassifyResponse:
    """Frame the text with the classifier's special tokens and read its label (the forward trace's
    `classifier` part, so the page and a tool see the same numbers)."""
    info = service.meta.classifier
    if service.classifier is None or not info:
        raise InputError(
            "text",
            "the served model is a language model, not a classifier: fine-tune one "
            "(POST /api/v1/finetune with save_as) and serve it (POST /api/v1/model)",
        )
    tok = info["special_tokens"]
    for field, value in (("text", req.text), ("text_b", req.text_b or "")):
        if any(t in value for t in tok.values()):
            raise InputError(field, f"the text may not contain the special tokens {', '.join(tok.values())}")
    enc, specials, n_ctx = service.encoding, service.classifier.specials, service.model.cfg.n_ctx
    ids, cut = frame(enc, specials, req.text, req.text_b, n_ctx, max_text=None)
    if cut and not req.truncate:
        raise InputError(
            "text",
            f"the framed text is {len(ids) + cut} tokens; the context window is n_ctx={n_ctx} "
            "(send truncate=true to keep the start of each text)",
        )
    trace = forward(service, ForwardRequest(ids=ids, include=["classifier"]))
    return ClassifyResponse(text=enc.decode(ids), tokens=trace.tokens, truncated=cut, result=trace.classifier)
