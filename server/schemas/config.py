"""Schema fields taken from GPTConfig: the one declaration of the model's shape.

Every schema that shows or takes GPTConfig fields (health's ModelInfo, /params' ParamsConfig,
training's ModelOverrides) selects them here by name from `dataclasses.fields(GPTConfig)`: the
name, the type and the default come from the dataclass, and a schema adds only what is its own
(which fields are required, a description in its own words, the limits of a request). A field
that GPTConfig does not have, or a type it does not declare, fails at import.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

from pydantic import BaseModel, Field, create_model

from gptscope.model.gpt import GPTConfig

CONFIG_FIELDS = {f.name: f for f in fields(GPTConfig)}
CONFIG_TYPES: dict[str, Any] = get_type_hints(GPTConfig)


def config_field(
    name: str, *, required: bool = False, optional: bool = False, loose: bool = False, **field: Any
) -> tuple[Any, Any]:
    """(type, FieldInfo) of GPTConfig's field `name`, for pydantic.create_model.

    required: no default (the answer always has it); optional: `type | None`, default None (a
    request's override); otherwise GPTConfig's default. loose: a Literal field as its plain type
    (an answer's "str" rather than an enum). `field`: Field's own arguments (description, ge, le)."""
    if name not in CONFIG_FIELDS:
        raise KeyError(f"GPTConfig has no field {name!r}")
    t = CONFIG_TYPES[name]
    if loose and get_origin(t) is Literal:
        t = type(get_args(t)[0])
    if optional:
        return t | None, Field(None, **field)
    default = CONFIG_FIELDS[name].default
    assert default is not MISSING, f"GPTConfig.{name} has no default"
    return t, Field(... if required else default, **field)


def config_fields(names: tuple[str, ...], *, describe: dict[str, dict] | None = None, **common: Any) -> dict:
    """config_field for each name, in order; `describe`: one field's own Field arguments by name."""
    per = describe or {}
    return {n: config_field(n, **common, **per.get(n, {})) for n in names}


def schema_model(
    model_name: str, module: str, /, __base__: type[BaseModel] = BaseModel, __doc__: str | None = None, **fields_: Any
) -> type[BaseModel]:
    """A pydantic model of these (type, FieldInfo) fields in this order; `module`: where it is declared."""
    return create_model(model_name, __base__=__base__, __module__=module, __doc__=__doc__, **fields_)
