"""Name -> mixer class registry behind `build_mixer` / `list_mixers`."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .base import SequenceMixer

_REGISTRY: dict[str, type[SequenceMixer]] = {}


def register_mixer(name: str) -> Callable[[type[SequenceMixer]], type[SequenceMixer]]:
    """Class decorator: make a `SequenceMixer` subclass buildable as `build_mixer(name, ...)`."""

    def decorate(cls: type[SequenceMixer]) -> type[SequenceMixer]:
        if not (isinstance(cls, type) and issubclass(cls, SequenceMixer)):
            raise TypeError(f"register_mixer({name!r}) expects a SequenceMixer subclass, got {cls}")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"a mixer named {name!r} is already registered ({_REGISTRY[name]})")
        _REGISTRY[name] = cls
        cls.mixer_name = name
        return cls

    return decorate


def list_mixers() -> list[str]:
    """Names accepted by `build_mixer`, sorted."""
    return sorted(_REGISTRY)


def mixer_class(name: str) -> type[SequenceMixer]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown mixer {name!r}; available: {', '.join(list_mixers())}") from None


def build_mixer(name: str, dim: int, heads: int = 1, **options) -> SequenceMixer:
    """Build a registered mixer: `build_mixer("mag", dim=256, heads=4, window=128)`.

    Unknown options raise a TypeError that names them and lists the accepted ones.
    """
    cls = mixer_class(name)
    accepted = [
        p
        for p in inspect.signature(cls.__init__).parameters
        if p not in ("self", "dim", "heads", "args", "kwargs")
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(
            f"mixer {name!r} got unknown option(s) {unknown}; accepted: {', '.join(accepted)}"
        )
    return cls(dim=dim, heads=heads, **options)
