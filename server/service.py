"""The loaded model: one per app, created in the lifespan, shared by every request.

Forward passes that add hooks must not overlap (a hook would see another request's tensors), so
every use of the model goes through `run()`, which holds a lock. The model is always in eval mode
and only ever read here; training works on its own copy (see model.train).
"""

from __future__ import annotations

import functools
import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model import finetune
from gptscope.model.gpt import GPT, KVCache

from .config import default_threads


class ModelService:
    def __init__(self, path: Path, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.checkpoint = ckpt.load(path, self.device)
        self.model: GPT = self.checkpoint.model.eval()
        # Explain mode always: the fused path agrees only to float32 rounding, and every panel must
        # show the same digits for the same prompt whichever parts a request captures.
        self.model.set_mode("explain")
        self.encoding = self.checkpoint.encoding()
        # a fine-tuned classifier (GPT-1's second stage) also has W_y; None for a language model
        self.classifier = finetune.load_classifier(self.checkpoint)
        self.meta = self.checkpoint.meta
        self.path = Path(path)
        self._lock = threading.Lock()
        # torch threads for a request (the app sets it from Settings.threads_for); each request
        # thread sets it for itself, since torch's count is per thread and a job's differs
        self.threads = default_threads(self.model.num_params())
        # the generation stepper's last KV cache and the ids it holds: the next step's request
        # repeats them plus one token, so only that token needs the model (see kv_prefix)
        self._kv: tuple[list[int], KVCache] | None = None
        # the folders holding what was trained on this model (SAEs, transcoder sets, tuned lenses) by
        # kind, the first for new ones (server/artefacts.py sets them: the built-in model's own folder
        # is package data, never written)
        self.artefact_folders: dict[str, list[Path]] = {}
        # results worked out from this model (per_model below): they go when the model goes
        self.memo: dict[str, LRU] = {}
        self.memo_lock = threading.Lock()

    @cached_property
    def history(self) -> list[dict]:
        """The per-update training records (read from the checkpoint's history file when first asked)."""
        return self.checkpoint.read_history()

    @property
    def name(self) -> str:
        return str(self.meta.name or self.path.name)

    def kv_prefix(self, ids: list[int]) -> KVCache:
        """A KV cache already holding the longest start of `ids` a previous request computed (a
        copy; empty when none). Call inside run()."""
        if self._kv is None:
            return KVCache(self.model.cfg, 1, self.device)
        held, cache = self._kv
        n = 0
        for a, b in zip(held, ids):
            if a != b:
                break
            n += 1
        return cache.copy(n)

    def keep_kv(self, ids: list[int], cache: KVCache) -> None:
        """Remember a cache and the ids it holds, for the next kv_prefix. Call inside run()."""
        self._kv = (list(ids[: cache.length]), cache)

    def store(self, name: str, budget: int, size: Callable[[Any], int] | None = None) -> LRU:
        """The LRU kept on this model under `name` (made with `budget` and `size` the first time it is
        asked for): results worked out from the model, which go when the model goes."""
        with self.memo_lock:
            memo = self.memo.get(name)
            if memo is None:
                memo = self.memo[name] = LRU(budget, size)
            return memo

    @contextmanager
    def run(self) -> Iterator[GPT]:
        with self._lock, torch.inference_mode():
            torch.set_num_threads(self.threads)
            yield self.model


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING: Any = object()  # per_model's default for LRU.get: nothing kept under these arguments


class LRU(Generic[K, V]):
    """The most recently used values by key, their sizes adding up to at most `budget`: size(value)
    each, 1 when no size is given (a count), or a value's bytes (a memory budget); and, if
    max_items is given, at most that many values besides. A new value makes room by dropping the
    least recently used; one bigger than the whole budget is not kept. Thread-safe."""

    def __init__(self, budget: int, size: Callable[[V], int] | None = None, max_items: int | None = None) -> None:
        self.budget, self.size, self.max_items = budget, size, max_items
        self.used = 0  # the kept values' sizes, added up
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: K) -> bool:
        return key in self._items

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value kept under key (now the most recent), or `default`."""
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key: K, value: V) -> None:
        n = 1 if self.size is None else self.size(value)
        with self._lock:
            if key in self._items:
                self.used -= self._items.pop(key)[1]
            if n > self.budget:
                return
            self._items[key] = (value, n)
            self.used += n
            while self.used > self.budget or (self.max_items is not None and len(self._items) > self.max_items):
                self.used -= self._items.popitem(last=False)[1][1]

    def values(self) -> list[V]:
        """The kept values, least recently used first."""
        with self._lock:
            return [v for v, _ in self._items.values()]


def per_model(maxsize: int) -> Callable:
    """functools.lru_cache for a function of (service, *hashable args), its entries kept on the
    service: a model the app no longer serves (POST /api/v1/model) takes them with it, where an
    lru_cache keyed by the service held up to `maxsize` replaced models in memory. The `maxsize`
    most recent arguments are kept per model."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def cached(service: ModelService, *args):
            memo = service.store(fn.__qualname__, maxsize)
            value = memo.get(args, _MISSING)
            if value is _MISSING:
                value = fn(service, *args)
                memo.put(args, value)
            return value

        return cached

    return wrap


def freeze_heap() -> None:
    """In a process that is only the app, what it holds once started lives as long as the process:
    tell the garbage collector (gc.freeze), so its full collections no longer walk those objects. A
    128-token JSON trace of GPT-2 small makes about 18,000 lists, and the full collections they set
    off walked some 330,000 objects, 200-300 ms in the middle of a request (that trace's
    serialisation: 131-177 ms, but 372 and 417 ms for two in twelve; frozen, 135-174 ms). Not for
    an app inside another program (a test, a notebook's kernel), whose objects are not all long-lived.
    Called again when the app serves another model: the frozen objects are unfrozen and collected
    first, so whatever of the replaced model a cycle held is freed."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
