"""Option checks shared by the mixers, with messages that name the option and the value."""

from __future__ import annotations

from ..errors import ConfigError, did_you_mean


def check_int(name: str, value, minimum: int) -> None:
    """ConfigError (a ValueError) unless `value` is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    """ConfigError (a ValueError) unless `value` is one of `choices`."""
    if value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ConfigError(f"{name} must be one of {list(choices)}, got {value!r}{hint}")


def resolve_head_dim(dim: int, heads: int, head_dim: int | None) -> int:
    """The per-head width d: `head_dim`, or dim // heads when None (heads must divide dim)."""
    check_int("heads", heads, 1)
    if head_dim is None:
        if dim % heads:
            raise ConfigError(
                f"heads={heads} does not divide dim={dim}; pass head_dim explicitly or choose "
                "heads dividing dim"
            )
        return dim // heads
    check_int("head_dim", head_dim, 1)
    return head_dim
