"""A trainable add-on's settings (an SAE's, a transcoder set's, a tuned lens's), declared once.

Each setting is a field of the add-on's config dataclass, made by `setting`: its default, its bounds
and its help sit in the field's metadata, and everything else is made from them: `check` (the bounds,
each refused with the field's name and its limit), the API's request (server/schemas/common.py's
`request_from`) and the command line's options (server/cli.py's `add_settings`). A check that
depends on another field or on the model stays in the config's own `validate`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .errors import SettingError

BOUNDS = ("ge", "gt", "le")


def setting(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    help: str = "",
    unit: str = "",
    cli: bool = True,
) -> Any:
    """A dataclass field with its bounds (ge: at least, gt: above, le: at most), its help (the API's
    description, the command line's help) and the unit its limit is said in; no default: required.
    cli=False: an internal setting, not offered as an option (nor, by request_from's exclude, in the API)."""
    meta = {"ge": ge, "gt": gt, "le": le, "help": help, "unit": unit, "cli": cli}
    return dataclasses.field(default=default, metadata={"setting": meta})


def declared(cls: Any) -> dict[str, dict]:
    """Every field of a config dataclass (or instance) made by `setting`: its name -> its metadata."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def number(v: float) -> str:
    """A limit as the messages write it: 0.1, 3600, 1e9."""
    if v >= 1e6 and math.log10(v).is_integer():
        return f"1e{int(math.log10(v))}"
    return f"{v:g}" if isinstance(v, float) else str(v)


def limit(meta: dict) -> str:
    """What a setting's bounds ask, as a message says it: "must be 8..32", "must be in (0, 0.1]"."""
    ge, gt, le, unit = meta["ge"], meta["gt"], meta["le"], meta["unit"]
    if gt is not None:
        said = f"in ({number(gt)}, {number(le)}]" if le is not None else f"above {number(gt)}"
    elif ge is not None:
        said = f"{number(ge)}..{number(le)}" if le is not None else f"at least {number(ge)}"
    else:
        said = f"at most {number(le)}"
    return f"must be {said}" + (f" {unit}" if unit else "")


def within(value: Any, meta: dict) -> bool:
    """Whether a value keeps its setting's bounds (NaN keeps none)."""
    if not any(meta[b] is not None for b in BOUNDS):
        return True
    if isinstance(value, float) and math.isnan(value):
        return False
    return (
        (meta["ge"] is None or value >= meta["ge"])
        and (meta["gt"] is None or value > meta["gt"])
        and (meta["le"] is None or value <= meta["le"])
    )


def check(obj: Any, error: type[SettingError] = SettingError) -> None:
    """Refuse the first setting of obj outside its bounds: error(field, "<field> must be ... (got v)")."""
    for name, meta in declared(obj).items():
        value = getattr(obj, name)
        if not within(value, meta):
            raise error(name, f"{name} {limit(meta)} (got {value})")
