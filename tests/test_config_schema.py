"""GPTConfig is declared once: the schemas take its fields from it, and checkpoint.json is read
into one typed CheckpointMeta that writes back the same bytes."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from gptscope.model import checkpoint as ckpt
from gptscope.model.gpt import GPTConfig
from gptscope.model.importers.common import ImportFailed, config_from
from gptscope.server.explain import learn as learn_explain
from gptscope.server.schemas import config as config_schema
from gptscope.server.schemas.health import ModelInfo
from gptscope.server.schemas.learn import ParamsConfig
from gptscope.server.schemas.training import ModelOverrides

BUILTIN = Path(__file__).resolve().parents[1] / "model" / "builtin"
DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}


@pytest.mark.parametrize("schema", [ModelInfo, ParamsConfig, ModelOverrides])
def test_every_config_field_of_a_schema_is_gptconfigs_own(schema):
    own = [n for n in schema.model_fields if n in DEFAULTS]
    assert own, schema
    for n in own:
        f = schema.model_fields[n]
        if schema is ModelOverrides:
            assert f.default is None, n  # an override: absent unless given
        elif not f.is_required():
            assert f.default == DEFAULTS[n], n  # the default is GPTConfig's


def test_params_config_and_config_fields_are_the_same_selection():
    assert tuple(ParamsConfig.model_fields) == learn_explain.CONFIG_FIELDS
    assert set(learn_explain.CONFIG_FIELDS) <= set(DEFAULTS)


def test_a_field_gptconfig_lacks_fails_at_once():
    with pytest.raises(KeyError, match="no field 'n_embd'"):
        config_schema.config_field("n_embd")


def test_importers_build_the_config_through_one_checked_path():
    assert config_from("config.json", lambda: {"n_layer": 2}).n_layer == 2
    with pytest.raises(ImportFailed, match=r"^config.json: unknown config fields: \['n_embd'\]"):
        config_from("config.json", lambda: {"n_embd": 64})
    with pytest.raises(ImportFailed, match=r"^config.json: d_model \(100\) must be divisible"):
        config_from("config.json", lambda: {"d_model": 100, "n_head": 3})


def test_typed_meta_round_trips_the_builtin_checkpoint_json_byte_for_byte():
    raw = (BUILTIN / ckpt.META_NAME).read_bytes()
    meta = ckpt.read_meta(BUILTIN)
    assert isinstance(meta, ckpt.CheckpointMeta)
    assert json.dumps(meta.to_dict(), indent=1).encode("utf-8") == raw.rstrip(b"\n")
    assert meta.step == json.loads(raw)["step"] and meta.tokenizer["kind"] == "bpe"


def test_load_then_save_writes_the_same_checkpoint_json(tmp_path):
    """(The built-in file predates GPTConfig's newest fields, so the first save adds them to its config.)"""
    c = ckpt.load(BUILTIN)
    ckpt.save(tmp_path / "once", c.model, c.meta, history=c.read_history())
    once = ckpt.load(tmp_path / "once")
    ckpt.save(tmp_path / "twice", once.model, once.meta, history=once.read_history())
    assert (tmp_path / "twice" / ckpt.META_NAME).read_bytes() == (tmp_path / "once" / ckpt.META_NAME).read_bytes()
    before, after = json.loads((BUILTIN / ckpt.META_NAME).read_text()), once.meta.to_dict()
    assert list(after) == list(before)
    assert {k for k in before if before[k] != after[k]} == {"config", "weights", "weights_sha256"}


def test_unknown_keys_and_nulls_are_kept_in_their_place(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(BUILTIN, folder)
    d = json.loads((folder / ckpt.META_NAME).read_text())
    d = {"a_future_key": {"x": 1}, **d, "step": None}
    (folder / ckpt.META_NAME).write_text(json.dumps(d, indent=1))
    meta = ckpt.read_meta(folder)
    assert meta.extra == {"a_future_key": {"x": 1}} and meta.step is None
    assert meta.to_dict() == d and list(meta.to_dict()) == list(d)


def test_a_key_of_the_wrong_kind_is_a_clear_error(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(BUILTIN, folder)
    d = json.loads((folder / ckpt.META_NAME).read_text())
    (folder / ckpt.META_NAME).write_text(json.dumps({**d, "step": "many"}))
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint.json: 'step' must be int, not str"):
        ckpt.read_meta(folder)
    (folder / ckpt.META_NAME).write_text(json.dumps({**d, "tokenizer": ["bpe"]}))
    with pytest.raises(ckpt.CheckpointError, match=r"'tokenizer' must be dict, not list"):
        ckpt.load(folder)
