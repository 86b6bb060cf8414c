"""Issue #60: a trainable add-on's settings are declared once (model/settings.py), so the dataclass, the
API's request and the command line agree on every default and bound, but for the API's own choices
listed here; and model/ has one Cancelled."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gptscope.model import sae as sae_mod
from gptscope.model import transcoders as tc_mod
from gptscope.model import tuned_lens as tl
from gptscope.model.settings import declared, limit
from gptscope.server import cli
from gptscope.server.schemas.attribution import TranscoderTrainRequest
from gptscope.server.schemas.lens import LensTrainRequest
from gptscope.server.schemas.sae import SaeTrainRequest

ROOT = Path(__file__).resolve().parent.parent

# (dataclass, API request, command, the command's required options, the API's fields beyond the
# dataclass, the settings the API leaves out, the API's deliberate differences {field: {key: value}})
ADD_ONS = [
    (
        sae_mod.SAETrainConfig,
        SaeTrainRequest,
        "sae",
        ["--layer", "0"],
        {"name", "corpus"},
        {"dead_after_tokens", "aux_coefficient"},
        {"time_budget": {"default": 120, "minimum": 1}},
    ),
    (
        tc_mod.TranscoderTrainConfig,
        TranscoderTrainRequest,
        "transcoders",
        [],
        {"name", "corpus"},
        {"l1_coefficient", "dead_after_tokens", "aux_coefficient"},
        {"time_budget": {"default": 300, "minimum": 1}},
    ),
    (
        tl.LensTrainConfig,
        LensTrainRequest,
        "lens",
        [],
        {"name", "corpus"},
        set(),
        {"max_tokens": {"minimum": 1}, "time_budget": {"minimum": 1}},
    ),
]
IDS = [a[2] for a in ADD_ONS]
SCHEMA_BOUND = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum"}


def dataclass_view(config) -> dict[str, dict]:
    """Each setting's default and bounds, as JSON Schema names them."""
    out = {}
    for f in dataclasses.fields(config):
        meta = declared(config)[f.name]
        view = {SCHEMA_BOUND[b]: meta[b] for b in SCHEMA_BOUND if meta[b] is not None}
        if f.default is not dataclasses.MISSING:
            view["default"] = f.default
        out[f.name] = view
    return out


def parsed(command: str, required: list[str]) -> dict:
    sub = cli.build_parser().parse_args([command, *required])
    return vars(sub)


@pytest.mark.parametrize("config, request_model, command, required, extra, left_out, overrides", ADD_ONS, ids=IDS)
def test_every_setting_is_declared_once_for_the_dataclass_the_api_and_the_command_line(
    config, request_model, command, required, extra, left_out, overrides
):
    fields = dataclass_view(config)
    assert set(declared(config)) == {f.name for f in dataclasses.fields(config)}, "a field not made by setting()"
    schema = request_model.model_json_schema()
    props = schema["properties"]
    assert set(props) == (set(fields) - left_out) | extra
    assert list(props)[: len(props) - len(extra)] == [n for n in fields if n not in left_out]  # the order too
    for name, view in fields.items():
        if name in left_out:
            continue
        api = {k: v for k, v in props[name].items() if k in ("default", *SCHEMA_BOUND.values())}
        assert api == {**view, **overrides.get(name, {})}, name
        assert (name in schema.get("required", [])) == ("default" not in view), name
    ns = parsed(command, required)
    for name, view in fields.items():
        meta = declared(config)[name]
        if not meta["cli"]:
            assert name not in ns, f"--{name} is internal"
            continue
        if "default" in view:
            assert ns[name] == view["default"], name
        helped = cli.build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        action = next(a for a in helped._actions if a.dest == name)
        assert action.option_strings == ["--" + name.replace("_", "-")]
        if any(meta[b] is not None for b in SCHEMA_BOUND):
            assert limit(meta).removeprefix("must be ") in action.help, name
    # what the command line builds from no options is the dataclass's own default
    assert config(**cli.settings_of(cli.build_parser().parse_args([command, *required]), config)) == config(
        **{n: int(v) for n, v in zip(["layer"], required[1:])}
    )


@pytest.mark.parametrize("config, request_model, command, required, extra, left_out, overrides", ADD_ONS, ids=IDS)
def test_the_api_overrides_are_all_listed(config, request_model, command, required, extra, left_out, overrides):
    """Any other difference between the API and the dataclass fails the test above; this one checks the
    overrides listed are real differences (an override made equal to the dataclass is stale)."""
    fields = dataclass_view(config)
    for name, changed in overrides.items():
        assert any(fields[name].get(k) != v for k, v in changed.items()), name


def test_a_setting_out_of_its_bounds_is_refused_naming_the_field_and_the_limit():
    with pytest.raises(sae_mod.SAEError) as e:
        sae_mod.SAETrainConfig(layer=0, expansion=4).validate()
    assert e.value.field == "expansion" and str(e.value) == "expansion must be 8..32 (got 4)"
    with pytest.raises(tl.LensError) as e2:
        tl.LensTrainConfig(lr=float("nan")).validate()
    assert e2.value.field == "lr" and str(e2.value) == "lr must be in (0, 0.1] (got nan)"
    with pytest.raises(tc_mod.SAEError, match=r"^time_budget must be 0\.\.7200 seconds \(got 9000\)$"):
        tc_mod.TranscoderTrainConfig(time_budget=9000).validate()


def test_cancelled_is_declared_once_in_model():
    """The repository has one Cancelled (model/errors.py), which the rest import (server/memory.py's
    for a job cancelled while it waits on memory too)."""
    found = [
        str(p.relative_to(ROOT))
        for folder in ("model", "server", "gptscope")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if re.search(r"^class Cancelled\b", p.read_text(encoding="utf-8"), re.M)
    ]
    assert found == ["model/errors.py"]
    from gptscope.model import errors, finetune, patching, train
    from gptscope.model.errors import Cancelled

    for mod in (finetune, patching, train, sae_mod, tl, tc_mod):  # imported where used, never one of its own
        assert getattr(mod, "Cancelled", Cancelled) is Cancelled, mod.__name__
    assert finetune.Cancelled is patching.Cancelled is train.Cancelled is Cancelled
    # the SAE's, the lens's and the transcoders' loops raise it through the one stop_if
    assert sae_mod.stop_if is tl.stop_if is tc_mod.stop_if is errors.stop_if


@pytest.mark.parametrize("config, request_model, command, required, extra, left_out, overrides", ADD_ONS, ids=IDS)
def test_the_manuals_command_line_shows_the_declared_defaults(
    config, request_model, command, required, extra, left_out, overrides
):
    """docs/manual.md's synopsis of each add-on's command (`[--time-budget 180]`) shows the defaults the
    command line has, which are the dataclass's."""
    manual = (ROOT / "docs" / "manual.md").read_text(encoding="utf-8")
    line = next(x for x in manual.splitlines() if x.startswith(f"gptscope {command} ") and "[" in x)
    shown = dict(re.findall(r"\[--([a-z-]+) (-?[0-9.e+-]+)\]", line))
    assert shown, line
    defaults = parsed(command, required)
    for option, value in shown.items():
        name = option.replace("-", "_")
        assert name in defaults, f"{command}: the manual shows --{option}, which the command line lacks"
        assert float(value) == float(defaults[name]), f"{command} --{option}: manual {value}, CLI {defaults[name]}"
        if name in dataclass_view(config):
            assert float(value) == float(dataclass_view(config)[name]["default"]), (command, option)
