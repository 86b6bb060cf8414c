"""Every model the app loads, in one place: the one it serves, and those it reads beside it (the
two sides of /compare, a training run's snapshots for its replay and head roles).

`ModelRegistry.load` is the only way the server builds a ModelService, so each model runs on the
configured device with the thread count its size calls for and knows where its SAEs are. The
served model is swapped by `serve` (POST /api/v1/model); the others are kept by `get`, least
recently used first out, within a count and a memory budget (their parameters' and buffers'
bytes), and the served model is handed back instead of a second copy of its folder.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from gptscope.model import checkpoint as ckpt

from .config import Settings
from .lenses import LENSES
from .saes import SAES
from .service import LRU, ModelService, freeze_heap
from .transcoders import TRANSCODERS

KEEP_MODELS = 8  # read-only models kept loaded beside the served one (compare's sides, snapshots)


def model_bytes(service: ModelService) -> int:
    """What a loaded model holds in memory: its parameters and buffers."""
    tensors = [*service.model.parameters(), *service.model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


class ModelRegistry:
    def __init__(self, settings: Settings, own_process: bool = False) -> None:
        self.settings = settings
        # own_process: the app is the whole process (`gptscope serve`), so what the served model
        # holds lives as long as it: see service.freeze_heap
        self.own_process = own_process
        self._served: ModelService | None = None
        self._kept: LRU[tuple[str, int], ModelService] = LRU(
            settings.model_cache_bytes, model_bytes, max_items=KEEP_MODELS
        )
        self._loading = threading.Lock()  # two requests for one folder load it once

    def load(self, path: Path) -> ModelService:
        """A checkpoint folder as a ModelService on the configured device and threads, its SAEs found."""
        service = ModelService(path, self.settings.device)
        return self.configure(service)

    def configure(self, service: ModelService) -> ModelService:
        """Give a ModelService (loaded here, or handed to create_app by a test) the settings' threads
        and its SAE, transcoder and tuned-lens folders."""
        service.threads = self.settings.threads_for(service.model.num_params())
        for store in (SAES, TRANSCODERS, LENSES):
            store.attach(service, self.settings.data_dir)
        return service

    @property
    def serving(self) -> bool:
        return self._served is not None

    @property
    def served(self) -> ModelService:
        if self._served is None:
            raise RuntimeError("no model served yet (the app's lifespan serves one)")
        return self._served

    def serve(self, model: Path | ModelService) -> ModelService:
        """Serve another model: a folder (loaded here) or a ready ModelService. Requests already
        running finish on the old one."""
        service = self.load(model) if isinstance(model, Path) else self.configure(model)
        self._served = service
        torch.set_num_threads(service.threads)  # and for any other torch work of the app
        if self.own_process:
            freeze_heap()  # the new model is long-lived now, and the old one's cycles can go
        return service

    def get(self, path: Path) -> ModelService:
        """A checkpoint folder's model, to read beside the served one: the served model itself when
        it is that folder, else a kept copy (loaded again if its checkpoint.json changed)."""
        path = path.resolve()
        if self._served is not None and self._served.path.resolve() == path:
            return self._served
        try:
            key = (str(path), (path / ckpt.META_NAME).stat().st_mtime_ns)
        except OSError:
            raise ckpt.CheckpointError(f"{path} holds no {ckpt.META_NAME}") from None
        with self._loading:
            service = self._kept.get(key)
            if service is None:
                service = self.load(path)
                self._kept.put(key, service)
        return service

    def kept(self) -> list[ModelService]:
        """The read-only models loaded now, least recently used first."""
        return self._kept.values()
