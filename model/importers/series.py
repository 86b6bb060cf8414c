"""A run's snapshots brought in as one series (`gptscope import SRC --name NAME --series`), for /timeline.

SRC is one of:
- a gptscope run folder (what `gptscope train --out DIR` writes): DIR/snapshots/step-NNNNNN;
- a folder of step folders, each a checkpoint this package reads (a gptscope checkpoint, a Hugging Face
  folder, a nanoGPT ckpt.pt folder), named as their trainers name them: step-100, step100 (Pythia's
  revisions, saved one folder each), step_100, checkpoint-100 (transformers' Trainer), iter-100;
- a nanochat checkpoint folder with several model_<step>.pt files.

Each step is converted and checked as `import_model` does, every one must have the first one's shape
(one run, not a mix), and the series is stored atomically as <data_dir>/models/NAME: the last step as the
folder's own checkpoint (so it can be served) and every step under snapshots/step-NNNNNN.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from .. import checkpoint as ckpt
from .common import ImportFailed, new_model_folder

STEP_DIR = re.compile(r"^(?:step|checkpoint|ckpt|iter)[-_]?(\d{1,12})$")
NANOCHAT_STEP = re.compile(r"^model_(\d{1,12})\.pt$")
MAX_STEPS = 256


def series_steps(src: Path) -> list[tuple[int, Path]]:
    """(step, what to read) for every step of the series at src, in step order."""
    if not src.is_dir():
        raise ImportFailed(f"{src} is not a folder; a series is a folder of step checkpoints")
    snaps = src / "snapshots"
    base = snaps if snaps.is_dir() else src
    found = []
    for p in base.iterdir():
        m = STEP_DIR.match(p.name) if p.is_dir() else NANOCHAT_STEP.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    found.sort()
    steps = [s for s, _ in found]
    if len(set(steps)) != len(steps):
        raise ImportFailed(f"{base} names one step twice: {sorted(s for s in steps if steps.count(s) > 1)}")
    if len(found) < 2:
        raise ImportFailed(
            f"{base} holds {len(found)} step checkpoint(s); a series needs at least 2 (folders named step-N, stepN, "
            f"checkpoint-N or iter-N, a run's snapshots/, or nanochat's model_<step>.pt)"
        )
    if len(found) > MAX_STEPS:
        raise ImportFailed(f"{base} holds {len(found)} steps; a series may have at most {MAX_STEPS}")
    return found


def import_series(
    path: str | Path,
    name: str,
    data_dir: str | Path,
    command: str = "",
    convert_one: Callable[[Path], tuple[object, dict]] | None = None,
) -> tuple[Path, dict]:
    """Convert every step, check they are one run, store them as models/NAME; (folder, summary)."""
    dest = new_model_folder(name, data_dir)
    steps = series_steps(Path(path).expanduser())
    tmp = dest.parent / f".{name}.importing-{os.getpid()}"
    first_cfg: dict | None = None
    try:
        for step, src in steps:
            model, meta = _read_step(src, convert_one)
            cfg = model.cfg.to_dict()  # type: ignore[attr-defined]
            if first_cfg is None:
                first_cfg = cfg
            elif cfg != first_cfg:
                diff = sorted(k for k in set(cfg) | set(first_cfg) if cfg.get(k) != first_cfg.get(k))
                raise ImportFailed(
                    f"step {step} ({src.name}) is not the same model as step {steps[0][0]}: {diff} differ"
                )
            meta = {**meta, "name": f"{name} step {step:,}", "step": step, "command": command}
            ckpt.save(tmp / "snapshots" / f"step-{step:06d}", model, meta)  # type: ignore[arg-type]
        last = tmp / "snapshots" / f"step-{steps[-1][0]:06d}"
        for f in last.iterdir():
            shutil.copy2(f, tmp / f.name)  # the last step is the series' own checkpoint
        ckpt.load(tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise ImportFailed(f"the series cannot be written under {dest.parent}: {e}") from None
        raise
    return dest, {"name": name, "checkpoint": str(dest), "steps": [s for s, _ in steps], "config": first_cfg}


def _read_step(src: Path, convert_one: Callable[[Path], tuple[object, dict]] | None) -> tuple[object, dict]:
    """A step's model and checkpoint.json body: a gptscope checkpoint read as it is, anything else converted."""
    if (src / ckpt.META_NAME).is_file():
        c = ckpt.load(src)
        return c.model, {**c.meta.to_dict(), "final": True}
    if convert_one is None:
        raise ImportFailed(f"{src} is not a gptscope checkpoint")
    model, meta = convert_one(src)
    return model, {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "final": True,
        "evals": [],
        "corpus": {"name": "unknown (imported)"},
        **meta,
    }
