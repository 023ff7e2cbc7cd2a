"""Argument types for the command line's numeric options, checked when the line is parsed.

Each is a callable for `argparse.add_argument(type=...)`: it turns the text into a number
and raises `argparse.ArgumentTypeError` when the number is out of its range, so the command
stops before any work with argparse's "argument --NAME: ..." message, which names the
option. A command's own defaults are not parsed and may be None ("not given").
"""

from __future__ import annotations

import argparse
import math


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _real(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (a count, a length, a size)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (1 or more), got {value}")
    return value


def positive_int_or_auto(text: str) -> int | str:
    """An integer >= 1, or "auto" (a setting the command may choose from the data)."""
    return "auto" if text == "auto" else positive_int(text)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a seed, an index, a count where 0 means none)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (a learning rate, a time limit)."""
    value = _real(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def positive_float_or_auto(text: str) -> float | str:
    """A finite number > 0, or "auto" (a setting the command may choose from the data)."""
    return "auto" if text == "auto" else positive_float(text)


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (a temperature, where 0 means greedy)."""
    value = _real(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def fraction_below_one(text: str) -> float:
    """A number in [0, 1) (a share of the data held out)."""
    value = _real(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text}")
    return value


def probability_mass(text: str) -> float:
    """A number in (0, 1] (nucleus sampling's top-p)."""
    value = _real(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return value
