"""--tiling key=value,...: run a version with a tiling of its own choosing, from the command line.

The text names fields of the version's Tiling dataclass; values are converted to each field's
type (int, float, bool, str). Unknown fields and bad values are one-line errors naming the field
and listing what the version has; the Tiling's own `validate` still runs when the plan builds.
`key=value,...` sets those fields over the dataclass defaults (one tiling for every problem);
`+key=value,...` sets them over each problem's own tiling (its tuned winner, else the plan's
default for that problem), e.g. `--grid=bench --tiling +schedule=per_step` changes one knob and
keeps each cell's split length.
"""
from __future__ import annotations

import dataclasses
import typing

from mla_var3.errors import UsageError

_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _convert(name: str, text: str, typ):
    if typ in (int, "int"):
        return int(text)
    if typ in (float, "float"):
        return float(text)
    if typ in (bool, "bool"):
        if text.lower() not in _BOOLS:
            raise ValueError(text)
        return _BOOLS[text.lower()]
    return text


def is_override(text: str | None) -> bool:
    """`+key=value,...`: fields over each problem's own tiling, not over the dataclass defaults."""
    return bool(text) and text.lstrip().startswith("+")


def parse_tiling(plan, text: str):
    """The plan's Tiling with the fields given as `key=value,...` (the rest at their defaults)."""
    return plan.Tiling(**parse_fields(plan, text))


def resolve_tiling(plan, text: str, base):
    """--tiling's text in either form: `key=value,...` as given, or `+key=value,...` over `base()`
    (the tiling the caller would otherwise run; called only for the '+' form)."""
    return override_tiling(plan, base(), text) if is_override(text) else parse_tiling(plan, text)


def override_tiling(plan, base, text: str):
    """`base` (a problem's own tiling) with the fields of `+key=value,...` replaced."""
    return dataclasses.replace(base, **given_fields(plan, text))


def given_fields(plan, text: str) -> dict:
    """The fields `--tiling` names, in either form (`key=value,...` or `+key=value,...`)."""
    return parse_fields(plan, text.lstrip()[1:] if is_override(text) else text)


def parse_fields(plan, text: str) -> dict:
    """{field: value} of `key=value,...`, converted to the fields' types; one-line errors."""
    cls = plan.Tiling
    hints = typing.get_type_hints(cls)
    fields = {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}
    values = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" not in part:
            raise UsageError(f"--tiling: expected key=value pairs, got {part!r}")
        key, val = (x.strip() for x in part.split("=", 1))
        if key not in fields:
            known = ", ".join(fields) or "none (nothing to choose)"
            raise UsageError(f"--tiling: {plan.name} has no tiling field {key!r}; its fields: {known}")
        try:
            values[key] = _convert(key, val, fields[key])
        except ValueError:
            raise UsageError(f"--tiling: {key}={val!r} is not a valid {getattr(fields[key], '__name__', fields[key])}") from None
    if not values:
        raise UsageError(f"--tiling: expected key=value pairs, got {text!r}")
    return values
