"""Transcoder sets in the app: the store of a model's sets (server/artefacts.py) and the check that
one fits it. A checkpoint's sets are folders beside it, `<checkpoint>/transcoders/<name>/`
(model/transcoders.py's format, or a cross-layer transcoder's, model/clt.py: one store lists both, a
request's `transcoders` names either); the built-in model's new ones go to `<data>/transcoders/builtin/<name>/`.
A set is listed for a model only when it was trained on these very weights and fits it."""

from __future__ import annotations

from gptscope.model import clt as clt_mod
from gptscope.model import sae as sae_mod
from gptscope.model import transcoders as tc_mod
from gptscope.model.errors import Cancelled

from .artefacts import ArtefactStore
from .service import ModelService


def misfit(service: ModelService, loaded: tc_mod.LoadedSet) -> str | None:
    """Why a set listed for the served model cannot read it, or None."""
    cfg, name = service.model.cfg, loaded.name
    c = loaded.codes[0].cfg
    if len(loaded.codes) != cfg.n_layer:
        return f"transcoder set {name!r} has {len(loaded.codes)} transcoders; the served model has {cfg.n_layer} MLPs"
    if c.d_in != cfg.d_model:
        return f"transcoder set {name!r} reads width {c.d_in} but the served model's is {cfg.d_model}"
    for s in loaded.stats:
        ids = s["eval_ids"]
        if ids.size(1) > cfg.n_ctx or (ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < cfg.vocab_size):
            return f"transcoder set {name!r}'s held-out token ids do not fit the served model"
    return None


TRANSCODERS: ArtefactStore[tc_mod.LoadedSet] = ArtefactStore(
    noun="transcoder set",
    folder="transcoders",
    request_field="transcoders",
    meta_file=tc_mod.META_FILE,
    read_meta=tc_mod.read_meta,
    load_folder=clt_mod.load_any,
    error=sae_mod.SAEError,
    misfit=misfit,
    train_hint="train one (gptscope transcoders)",
    train_and_save=clt_mod.train_and_save,
    default_name=tc_mod.default_name,
    figures_key="fvu",
    cancelled=Cancelled,
    memory_need=tc_mod.memory_need,
)
