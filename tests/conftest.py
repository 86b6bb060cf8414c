"""Shared fixtures: the built-in model loaded once, an in-process client, a tiny random GPT."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from model.gpt import GPT, GPTConfig
from server.app import create_app
from server.config import BUILTIN_CHECKPOINT, Settings
from server.service import ModelService

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def service() -> ModelService:
    return ModelService(BUILTIN_CHECKPOINT)


@pytest.fixture(scope="session")
def app(service, tmp_path_factory):
    return create_app(Settings(checkpoint=BUILTIN_CHECKPOINT, allow_hosts=["testserver"],
                               data_dir=tmp_path_factory.mktemp("gptscope-data")), service=service)


@pytest.fixture(scope="session")
def client(app):
    with TestClient(app) as c:
        yield c


@pytest.fixture
def tiny_config() -> GPTConfig:
    return GPTConfig(vocab_size=97, n_ctx=32, n_layer=2, n_head=4, d_model=32)


@pytest.fixture
def tiny_model(tiny_config) -> GPT:
    torch.manual_seed(0)
    return GPT(tiny_config).eval()
