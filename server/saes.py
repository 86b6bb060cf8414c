"""Sparse autoencoders in the app: the store of a model's SAEs (server/artefacts.py) and what only
SAEs need. A checkpoint's SAEs are folders beside it, `<checkpoint>/saes/<name>/` (model/sae.py's
format); the built-in model's new ones go to `<data>/saes/builtin/<name>/`."""

from __future__ import annotations

from gptscope.model import corpus as corpus_mod
from gptscope.model import sae as sae_mod
from gptscope.model.errors import Cancelled

from .artefacts import ArtefactStore
from .errors import InputError
from .service import ModelService


def misfit(service: ModelService, loaded: sae_mod.LoadedSAE) -> str | None:
    """Why an SAE listed for the served model (its recorded weights' sha256 matches) cannot read it,
    or None: the width of the stream it reads, its layer, and the held-out token ids its statistics
    were measured on (the feature pages run them through the model) are checked against the model."""
    cfg, c, ids = service.model.cfg, loaded.sae.cfg, loaded.stats["eval_ids"]
    name = loaded.name
    if c.d_in != cfg.d_model:
        return f"SAE {name!r} reads a stream of width {c.d_in} but the served model's is {cfg.d_model}"
    if not 0 <= c.layer < cfg.n_layer:
        return f"SAE {name!r} reads layer {c.layer} but the served model's layers are 0..{cfg.n_layer - 1}"
    if ids.size(1) > cfg.n_ctx:
        return f"SAE {name!r}'s held-out sequences have {ids.size(1)} tokens, more than the served model's n_ctx {cfg.n_ctx}"
    if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < cfg.vocab_size:
        return f"SAE {name!r}'s held-out token ids are not all in the served model's vocabulary 0..{cfg.vocab_size - 1}"
    return None


SAES: ArtefactStore[sae_mod.LoadedSAE] = ArtefactStore(
    noun="SAE",
    folder="saes",
    request_field="sae",
    meta_file=sae_mod.META_FILE,
    read_meta=sae_mod.read_meta,
    load_folder=sae_mod.load_sae,
    error=sae_mod.SAEError,
    misfit=misfit,
    train_hint="train one (POST /api/v1/saes)",
    train_and_save=sae_mod.train_and_save,
    default_name=sae_mod.default_name,
    figures_key="fvu",
    cancelled=Cancelled,
    memory_need=sae_mod.memory_need,
    cache_size=16,
)


def corpus_for(service: ModelService, asked: str | None, corpus_path) -> str:
    """The text an SAE, a transcoder set or a tuned lens trains on: the one asked for (a name from
    /api/v1/corpora), else the text the model was trained on when that is a built-in corpus."""
    if asked is not None:
        return corpus_path(asked)
    own = (service.meta.corpus or {}).get("name")
    if own in corpus_mod.BUILTIN:
        return own
    raise InputError("corpus", "the served model was not trained on a built-in corpus: name one from /api/v1/corpora")
