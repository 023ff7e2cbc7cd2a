"""Name -> mixer class registry behind `build_mixer` (`titans_seq.mixers.build`)."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError, did_you_mean
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
        raise ConfigError(
            f"unknown mixer {name!r}{did_you_mean(name, _REGISTRY)}; available: "
            f"{', '.join(list_mixers())}"
        ) from None
