"""The KV cache: every layer's keys and values for the positions already processed, so that generation
computes only the new token's (LayerKV is one layer's view of it, what attention appends to)."""

from __future__ import annotations

import torch

from .config import GPTConfig


class LayerKV:
    """One layer's view of a KVCache: appends new keys/values and returns all of them."""

    def __init__(self, cache: KVCache, layer: int) -> None:
        self.cache, self.layer = cache, layer

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c, start, T = self.cache, self.cache.length, k.size(2)
        c.k[self.layer, :, :, start : start + T] = k
        c.v[self.layer, :, :, start : start + T] = v
        return c.k[self.layer, :, :, : start + T], c.v[self.layer, :, :, : start + T]


class KVCache:
    """Keys and values of every layer for the positions already processed.

    Holds n_layer x 2 x B x n_kv_head x n_ctx x hs numbers (grouped-query attention keeps fewer
    key/value heads than query heads); `length` says how many positions are filled.
    """

    def __init__(self, cfg: GPTConfig, batch_size: int = 1, device=None, dtype=torch.float32):
        shape = (cfg.n_layer, batch_size, cfg.n_kv_head, cfg.n_ctx, cfg.d_head)
        # uninitialised: only the filled positions [:length] are ever read (GPT-2's 1024 positions
        # would cost 75 MB of zeros per request)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0
        self.n_ctx = cfg.n_ctx
        # the smear reads the previous position's embedding (normalised, before its own smear): kept per position
        self.emb = torch.empty((batch_size, cfg.n_ctx, cfg.d_model), device=device, dtype=dtype) if cfg.smear else None

    def copy(self, length: int | None = None) -> KVCache:
        """A new cache holding this one's first `length` positions (all filled ones by default)."""
        n = self.length if length is None else min(length, self.length)
        new = object.__new__(KVCache)
        new.k, new.v = torch.empty_like(self.k), torch.empty_like(self.v)
        new.k[:, :, :, :n] = self.k[:, :, :, :n]
        new.v[:, :, :, :n] = self.v[:, :, :, :n]
        new.length, new.n_ctx = n, self.n_ctx
        new.emb = None
        if self.emb is not None:
            new.emb = torch.empty_like(self.emb)
            new.emb[:, :n] = self.emb[:, :n]
        return new

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self, i)

    def numel_used(self) -> int:
        """Numbers held for the filled positions: layers x 2 (K and V) x B x T x n_kv x hs."""
        L, B, nh, _, hs = self.k.shape
        return L * 2 * B * self.length * nh * hs + (0 if self.emb is None else B * self.length * self.emb.size(-1))
