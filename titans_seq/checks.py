"""Checks of options and parameters, with messages that name the option and the value.

Shared by the mixers, the recipes' dataclasses and the estimators."""

from __future__ import annotations

import math
import numbers

from .errors import ConfigError, did_you_mean


def check_int(name: str, value, minimum: int) -> None:
    """ConfigError (a ValueError) unless `value` is an integer (a Python or NumPy int, not a
    bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def check_number(
    name: str, value, low: float, high: float = math.inf, low_open=False, high_open=True
) -> None:
    """ConfigError naming `name` unless `value` is a finite real number within the bounds
    (each bound closed unless marked open)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high
        )
    if not ok:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        bounds = f"{left}{low:g}, {high:g}{right}"
        raise ConfigError(f"{name} must be a number in {bounds}, got {value!r}")


def check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    """ConfigError (a ValueError) unless `value` is one of `choices`."""
    if value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ConfigError(f"{name} must be one of {list(choices)}, got {value!r}{hint}")
