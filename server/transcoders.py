"""Transcoder sets in the app: where a model's sets live and loading them (model/transcoders.py's format).

A checkpoint's sets are folders beside it, `<checkpoint>/transcoders/<name>/`. The built-in
checkpoint is package data, which the app never writes: sets trained on it go to
`<data>/transcoders/builtin/<name>/`, and its shipped one stays in the package. A set is listed for a
model only when it was trained on these very weights (the sha256 its JSON records) and fits it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from gptscope.model import transcoders as tc_mod
from gptscope.model.sae import SAEError

from .config import BUILTIN_CHECKPOINT
from .errors import InputError, NotFound
from .schemas.sae import SAE_NAME
from .service import ModelService


def folders_for(checkpoint: Path, data_dir: Path) -> list[Path]:
    """The folders that hold a checkpoint's transcoder sets; the first is where new ones are written."""
    own = Path(checkpoint) / "transcoders"
    if Path(checkpoint).resolve() == BUILTIN_CHECKPOINT.resolve():
        return [Path(data_dir) / "transcoders" / "builtin", own]
    return [own]


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> tc_mod.LoadedSet:
    return tc_mod.load_set(path)


def load(path: Path) -> tc_mod.LoadedSet:
    """A set's folder, loaded once per version of its JSON."""
    return _load(str(path), (path / tc_mod.META_FILE).stat().st_mtime)


def listing(service: ModelService) -> list[tuple[str, Path]]:
    """(name, folder) of every set trained on the served model's weights, by name; a name in two
    folders is the first folder's."""
    sha = service.meta.weights_sha256
    found: dict[str, Path] = {}
    for root in service.transcoder_folders:
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.name in found or p.name.startswith(".") or not re.fullmatch(SAE_NAME, p.name):
                continue
            try:
                meta = tc_mod.read_meta(p)
            except SAEError:
                continue
            if (meta.get("checkpoint") or {}).get("weights_sha256") == sha:
                found[p.name] = p
    return sorted(found.items())


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


def get(service: ModelService, name: str | None, field: str = "transcoders", where: str = "body") -> tc_mod.LoadedSet:
    """The named set of the served model (None: its first), loaded and checked; a 422 naming `field`
    otherwise."""
    sets = dict(listing(service))
    if name is None:
        if not sets:
            raise InputError(
                field, "the served model has no transcoder set; train one (gptscope transcoders)", where=where
            )
        name = next(iter(sets))
    if name not in sets:
        raise InputError(
            field, f"no transcoder set named {name!r} for this model; choose one of {sorted(sets)}", where=where
        )
    try:
        loaded = load(sets[name])
    except SAEError as e:
        raise InputError(field, str(e), where=where) from None
    if (why := misfit(service, loaded)) is not None:
        raise InputError(field, why, where=where)
    return loaded


def get_by_path(service: ModelService, name: str) -> tc_mod.LoadedSet:
    """The set a path names: 404 when the served model has none of that name, 422 when it cannot be read."""
    if name not in dict(listing(service)):
        raise NotFound(f"no transcoder set {name!r} for the served model")
    return get(service, name, field="name", where="path")
