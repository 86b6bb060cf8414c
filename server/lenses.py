"""Tuned lenses in the app: the store of a model's lenses (server/artefacts.py) and the check that
one fits it. A checkpoint's lenses are folders beside it, `<checkpoint>/lenses/<name>/`
(model/tuned_lens.py's format); the built-in model's new ones go to `<data>/lenses/builtin/<name>/`."""

from __future__ import annotations

from gptscope.model import tuned_lens as tl
from gptscope.model.errors import Cancelled

from .artefacts import ArtefactStore
from .service import ModelService


def misfit(service: ModelService, loaded: tl.LoadedLens) -> str | None:
    """Why a lens listed for the served model cannot read it, or None."""
    cfg, lens, name = service.model.cfg, loaded.lens, loaded.name
    want = len(tl.stream_hooks(cfg)) - 1
    if lens.n_translators != want:
        return f"tuned lens {name!r} has {lens.n_translators} translators; the served model's stream has {want} stages before its last"
    if lens.layer_translators[0].in_features != cfg.d_model:
        return f"tuned lens {name!r} reads width {lens.layer_translators[0].in_features}; the served model's is {cfg.d_model}"
    return None


LENSES: ArtefactStore[tl.LoadedLens] = ArtefactStore(
    noun="tuned lens",
    folder="lenses",
    request_field="lens",
    meta_file=tl.META_FILE,
    read_meta=tl.read_meta,
    load_folder=tl.load_lens,
    error=tl.LensError,
    misfit=misfit,
    train_hint="train one (gptscope lens)",
    train_and_save=tl.train_and_save,
    default_name=tl.default_name,
    figures_key="kl",
    cancelled=Cancelled,
    memory_need=tl.memory_need,
)
