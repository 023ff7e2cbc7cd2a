"""Dataclasses from plain mappings, with every key and value type checked.

Used for the run configuration (`titans_seq.training.schema`) and for the mixers' typed
options (`titans_seq.mixers.options`): an unknown key or a value of the wrong type raises a
`ConfigError` naming the dotted key and, for a typo, the closest known key.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
import types
import typing
from typing import Any, Literal

import numpy as np

from .errors import ConfigError, closest


def build_dataclass(cls: type | None, raw: Any, prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and value types.

    `cls=None` means the task declares no schema for the section: the mapping is kept as is.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {raw!r}")
    if cls is None:
        return dict(raw)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    reject_unknown(raw, fields, prefix + ".")
    hints = typing.get_type_hints(cls)
    values = {key: coerce(value, hints[key], f"{prefix}.{key}") for key, value in raw.items()}
    try:
        return cls(**values)
    except ConfigError as error:  # a check of the dataclass itself: say which section
        raise ConfigError(_in_section(str(error), prefix, fields)) from None


def _in_section(message: str, prefix: str, fields) -> str:
    """`message` of a check in section `prefix`: "prefix.field ..." when it starts with a
    field's name, else "prefix: message"."""
    if message.startswith(prefix):
        return message
    first = re.split(r"[\s:.,=\[]", message, maxsplit=1)[0]
    return f"{prefix}.{message}" if first in fields else f"{prefix}: {message}"


def reject_unknown(raw: dict, known, prefix: str) -> None:
    for key in raw:
        if key not in known:
            match = closest(key, known)
            hint = f"; did you mean '{prefix}{match}'?" if match else ""
            raise ConfigError(
                f"unknown key '{prefix}{key}'{hint} (known: {', '.join(sorted(known))})"
            )


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against a type hint, converting only where YAML is lossy.

    PyYAML reads `3e-4` as a string (YAML 1.1 wants `3.0e-4`), and lists stand for tuples, so a
    numeric string is accepted for a float and a list for a tuple; nothing else is converted.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return coerce(value, option, key)
            except ConfigError as err:
                errors.append(err)
        raise ConfigError(f"{key}: expected {_type_name(hint)}, got {value!r}")
    if hint is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null, got {value!r}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if hint is int:  # NumPy integers too (scikit-learn parameter grids hold them)
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} values, got {list(value)!r}")
            return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        value_hint = args[1] if args else Any
        return {k: coerce(v, value_hint, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):  # already built (a Python caller's own instance)
            return value
        return build_dataclass(hint, value, key)
    raise ConfigError(f"{key}: unsupported type annotation {hint!r} in the config schema")


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def to_plain(value: Any) -> Any:
    """Dataclasses/tuples -> dicts/lists, so that `yaml.safe_dump` can write them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value
