"""Generation: sample new tokens one at a time after a prompt, the KV cache keeping every earlier
position's keys and values (GPT.generate calls `generate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .kv_cache import KVCache
from .sampling import sample_next

if TYPE_CHECKING:
    from .gpt import GPT


@torch.no_grad()
def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    use_cache: bool = True,
) -> torch.Tensor:
    """Sample max_new_tokens after idx (1, T). Prefill once, then one token per step with
    the KV cache. Step i draws with seed (seed, i), so `sample_next` reproduces any step."""
    assert idx.size(0) == 1, "generate takes one sequence"
    n_ctx = model.cfg.n_ctx
    out = idx
    cache = None
    for step in range(max_new_tokens):
        if not use_cache:
            logits, _ = model(out[:, -n_ctx:], last_only=True)
        elif cache is None or cache.length >= n_ctx:
            # prefill (again, on the last n_ctx - 1 tokens, when the window is full)
            cache = KVCache(model.cfg, 1, idx.device, model.wte.weight.dtype)
            logits, _ = model(out[:, -(n_ctx - 1) :] if step else out[:, -n_ctx:], kv_cache=cache, last_only=True)
        else:
            logits, _ = model(out[:, -1:], kv_cache=cache)
        nxt = sample_next(logits[0, -1], temperature, top_k, top_p, seed, step).token
        out = torch.cat([out, torch.tensor([[nxt]], device=idx.device)], dim=1)
    return out
