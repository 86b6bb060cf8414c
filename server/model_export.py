"""A checkpoint written out for other tools (`gptscope export`, POST /api/v1/export/model): the model as
a Hugging Face folder or a GGUF file (model/export_hf.py, model/export_gguf.py), and, beside a folder,
the add-ons trained on these very weights in the layouts their own libraries read: SAEs in SAELens's
(saes/NAME/), transcoders in circuit-tracer's (transcoders/NAME/), tuned lenses in the tuned-lens
library's (lenses/NAME/)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

from gptscope.model import checkpoint as ckpt
from gptscope.model.export_gguf import export_gguf
from gptscope.model.export_hf import ExportRefused, export_hf, write_head

Format = Literal["hf", "gguf"]
FORMATS: tuple[str, ...] = ("hf", "gguf")


def addon_stores() -> list[Any]:
    from .lenses import LENSES
    from .saes import SAES
    from .transcoders import TRANSCODERS

    return [SAES, TRANSCODERS, LENSES]


def copy_addons(checkpoint: Path, c: ckpt.Checkpoint, out: Path, data_dir: Path) -> dict[str, list[str]]:
    """Every add-on trained on the checkpoint's weights, copied to out/<kind>/<name>/ as it is kept."""
    copied: dict[str, list[str]] = {}
    for store in addon_stores():
        for name, folder in store.listing_in(store.folders_for(checkpoint, data_dir), c.meta.weights_sha256):
            shutil.copytree(folder, out / store.folder / name)
            copied.setdefault(store.folder, []).append(name)
    return copied


def export_model(
    checkpoint: Path, out: Path, fmt: Format, data_dir: Path, addons: bool = True, progress=None
) -> dict[str, Any]:
    """Write the checkpoint as `fmt` to `out`; ExportRefused names what stops it."""
    if fmt not in FORMATS:
        raise ExportRefused("format", f"format {fmt!r} is not one gptscope writes; choose one of {', '.join(FORMATS)}")
    say = progress or (lambda phase: None)
    say("loading")
    c = ckpt.load(checkpoint)
    name = c.meta.name or Path(checkpoint).name
    say("writing")
    if fmt == "gguf":
        return export_gguf(c.model, c.encoding(), out, name)
    source = (c.meta.source or {}).get("model_type")
    info = export_hf(c.model, c.encoding(), out, name, prefer=source)
    if c.head and c.meta.classifier:
        write_head(out, c.head, c.meta.classifier)
        info["classifier"] = "classifier.safetensors"
    if addons:
        say("add-ons")
        info["addons"] = copy_addons(Path(checkpoint), c, out, data_dir)
    return info
