"""server/models.py: every model the app loads goes through one registry (device, threads, SAEs,
the cache's count and memory budget), /compare's sides and a run's snapshots included."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model.gpt import GPT, GPTConfig
from gptscope.server import models as models_mod
from gptscope.server.app import create_app
from gptscope.server.config import BUILTIN_CHECKPOINT, Settings
from gptscope.server.models import ModelRegistry, model_bytes
from gptscope.server.saes import SAES
from gptscope.server.service import ModelService

RUN = "0123456789ab"  # a run id as the app makes them


def save_model(folder, seed: int) -> None:
    torch.manual_seed(seed)
    ckpt.save(
        folder,
        GPT(GPTConfig(vocab_size=4, n_ctx=16, n_layer=1, n_head=2, d_model=16)),
        {"name": folder.name, "tokenizer": {"kind": "chars", "chars": list("abc ")}, "step": 0, "final": True},
    )


def test_the_registry_reuses_the_served_model_and_keeps_at_most_its_count(tmp_path, service, monkeypatch):
    monkeypatch.setattr(models_mod, "KEEP_MODELS", 3)
    registry = ModelRegistry(Settings(data_dir=tmp_path))
    assert not registry.serving
    with pytest.raises(RuntimeError):
        registry.served  # noqa: B018
    assert registry.serve(service) is service and registry.get(service.path) is service
    folders = [tmp_path / f"m{i}" for i in range(4)]
    for i, f in enumerate(folders):
        save_model(f, i)
    first = registry.get(folders[0])
    assert registry.get(folders[0]) is first and isinstance(first, ModelService)
    for f in folders[1:]:
        registry.get(f)
    assert len(registry.kept()) == 3 and first not in registry.kept()
    assert registry.get(folders[0]) is not first  # it was the least recently used: loaded again
    save_model(folders[0], 9)  # a new checkpoint.json in the same folder is a new model
    assert registry.get(folders[0]) is not registry.kept()[-2]


def test_the_registry_keeps_models_within_its_memory_budget(tmp_path):
    folders = [tmp_path / f"m{i}" for i in range(3)]
    for i, f in enumerate(folders):
        save_model(f, i)
    one = model_bytes(ModelService(folders[0]))
    registry = ModelRegistry(Settings(data_dir=tmp_path, model_cache_bytes=2 * one + one // 2))
    for f in folders:
        registry.get(f)
    assert [s.path for s in registry.kept()] == folders[1:]  # two fit in the budget, not three
    tiny = ModelRegistry(Settings(data_dir=tmp_path, model_cache_bytes=one - 1))
    assert tiny.get(folders[0]).path == folders[0] and tiny.kept() == []  # served, not kept


def test_compare_and_snapshots_load_through_the_registry_with_the_settings(tmp_path, monkeypatch):
    """The device and thread settings reach /compare's second model and a run's snapshots (on a GPU
    machine they would otherwise run on the CPU): every ModelService the app builds is made by the
    registry with settings.device."""
    built: list[tuple[str, str]] = []

    class Recorded(ModelService):
        def __init__(self, path, device="cpu"):
            built.append((str(path), str(device)))
            super().__init__(path, device)

    monkeypatch.setattr(models_mod, "ModelService", Recorded)
    snapshot = tmp_path / "runs" / RUN / "snapshots" / "step-000002"
    save_model(snapshot, 1)
    served_path = tmp_path / "served"
    save_model(served_path, 0)
    settings = Settings(
        checkpoint=served_path, data_dir=tmp_path, allow_hosts=["testserver"], device="cpu:0", torch_threads=3
    )
    app = create_app(settings)
    with TestClient(app) as c:
        assert built == [(str(served_path), "cpu:0")] and app.state.models.served.threads == 3
        r = c.post("/api/v1/compare", json={"a": "builtin", "b": f"{RUN}/step-000002", "text": "abc ab"})
        assert r.status_code == 200, r.text
        r = c.get(f"/api/v1/training/{RUN}/replay", params={"step": 2, "text": "abc ab", "tokens": 10})
        assert r.status_code == 200, r.text
        assert c.get(f"/api/v1/training/{RUN}/heads").status_code == 200
        assert c.post("/api/v1/model", json={"checkpoint": "builtin"}).status_code == 200
    assert dict(built) == {
        str(served_path): "cpu:0",
        str(BUILTIN_CHECKPOINT): "cpu:0",
        str(snapshot): "cpu:0",
    }
    assert len(built) == 4  # the built-in: once for /compare (kept), once more to serve it
    kept = app.state.models.kept()
    assert {s.path for s in kept} == {BUILTIN_CHECKPOINT, snapshot}
    assert all(s.threads == 3 and s.device == torch.device("cpu:0") for s in kept)
    assert all(SAES.folders(s)[0].is_relative_to(tmp_path) for s in kept)  # where their SAEs are written
