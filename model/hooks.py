"""Hook points: identity modules whose dotted names (``blocks.0.attn.hook_pattern``) are where a forward
hook may read or replace an intermediate; `hook_name` spells those names, and the types say what
GPT.hooks() takes (model/gpt.py: `hooks()` and `capture()` add the hooks and always remove them)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn


class HookPoint(nn.Module):
    """Identity module: a named place where a forward hook may read or replace a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # filled in by GPT.__init__ with the dotted module path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def hook_name(name: str, layer: int | None = None) -> str:
    """The one place a hook's dotted name is spelled: ``hook_name("attn.hook_pattern", 0)`` is
    ``"blocks.0.attn.hook_pattern"``; with no layer, a model-level hook such as ``"hook_embed"``."""
    return name if layer is None else f"blocks.{layer}.{name}"


# A hook function receives (tensor, hook_name) and returns None (look only) or a replacement.
HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
# Which hook points a hook function is added to: one name, a predicate on the name, or None for all.
HookFilter = str | Callable[[str], bool] | None


def _matches(name: str, flt: HookFilter) -> bool:
    if flt is None:
        return True
    if callable(flt):
        return bool(flt(name))
    return name == flt
