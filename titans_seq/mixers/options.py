"""Typed mixer options: every option checked against the mixer's constructor, with a
did-you-mean for a typo, before anything is built.

A mixer's options are its constructor's keyword arguments (after `dim` and `heads`), typed
by their annotations; the memory mixers take `memory=` (a `MemoryConfig` or a mapping of its
fields) and accept its fields flat too. `check_mixer_options` validates the options of one
mixer (used by `build_mixer`); `check_layer_options` validates the `mixer_options` of a
whole stack as a recipe writes it (used when a recipe is loaded, so that
`titans-seq train ... --print-config` already reports `model.mixer_options.chunk_sise`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError, did_you_mean
from ..typed_config import coerce
from .layer_spec import layer_mixer_names, layer_mixer_options, per_mixer_sections
from .memory_config import FLAT_ALIASES, MemoryConfig, flat_memory_keys
from .registry import mixer_class


class UnknownOptionError(ConfigError, TypeError):
    """A mixer option the mixer does not take (a TypeError, as for any unknown keyword)."""


def option_types(name: str) -> dict[str, Any]:
    """Option name -> type hint of mixer `name`, flat memory options included."""
    cls = mixer_class(name)
    hints = typing.get_type_hints(cls.__init__)
    options = {}
    for key, parameter in inspect.signature(cls.__init__).parameters.items():
        if key in ("self", "dim", "heads") or parameter.kind in (
            parameter.VAR_KEYWORD,
            parameter.VAR_POSITIONAL,
        ):
            continue
        options[key] = hints.get(key, Any)
    if "memory" in options:
        memory_hints = typing.get_type_hints(MemoryConfig)
        for flat in sorted(flat_memory_keys()):
            options.setdefault(flat, memory_hints[FLAT_ALIASES.get(flat, flat)])
    return options


def check_mixer_options(name: str, options: Mapping, where: str | None = None) -> dict:
    """The options of mixer `name` with every key known and every value of its type
    (numbers written as strings become numbers, `memory` a MemoryConfig). Raises
    UnknownOptionError (with a did-you-mean) or ConfigError naming `where.key`."""
    where = where or f"mixer {name!r}"
    if not isinstance(options, Mapping):
        raise ConfigError(f"{where}: expected a mapping of options, got {options!r}")
    types = option_types(name)
    unknown = sorted(str(k) for k in options if k not in types)
    if unknown:
        hint = did_you_mean(unknown[0], types)
        raise UnknownOptionError(
            f"{where}: mixer {name!r} got unknown option(s) {unknown}{hint}; accepted: "
            f"{', '.join(types)}"
        )
    memory_keys = flat_memory_keys() if "memory" in types else set()
    checked = {
        key: coerce(value, types[key], f"{where}.{key}")
        for key, value in options.items()
        if key != "memory" and key not in memory_keys
    }
    if "memory" in types:  # one MemoryConfig from `memory=` and the flat memory options
        flat = {k: v for k, v in options.items() if k in memory_keys}
        try:
            checked["memory"] = MemoryConfig.from_options(options.get("memory"), flat)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    return checked


def check_layer_options(
    mixer: str | Sequence[str], options: Any, where: str = "mixer_options"
) -> None:
    """Validate a stack's `mixer_options` (shared, per mixer name or per layer; see
    `titans_seq.backbone.layer_mixer_options`) against the mixers that `mixer` names."""
    names = _mixer_names(mixer)
    if options is None:
        return
    if isinstance(options, Mapping):
        sections = per_mixer_sections(options)
        if sections is None:
            for name in dict.fromkeys(names):
                check_mixer_options(name, options, where)
            return
        unused = sorted(set(sections) - set(names))
        if unused:
            raise ConfigError(
                f"{where} gives options for {unused}, which no layer uses (layers: {names})"
            )
        for name, section in sections.items():
            check_mixer_options(name, section or {}, f"{where}.{name}")
        return
    if isinstance(options, Sequence) and not isinstance(options, str):
        for index, entry in enumerate(options):
            if entry is not None:
                check_mixer_options(names[index % len(names)], entry, f"{where}[{index}]")
        return
    raise ConfigError(f"{where}: expected a mapping or a list of mappings, got {options!r}")


def canonical_mixer_options(mixer: str | Sequence[str], options: Any, depth: int) -> list[dict]:
    """Per-layer options in one form (memory options nested, every memory field filled
    in), so that flat and nested spellings of the same options compare equal."""
    names = layer_mixer_names(mixer, depth)
    canonical = []
    for name, layer in zip(names, layer_mixer_options(options, names)):
        checked = check_mixer_options(name, layer)
        if "memory" in checked:
            checked["memory"] = checked["memory"].to_dict()
        canonical.append(checked)
    return canonical


def _mixer_names(mixer: str | Sequence[str]) -> list[str]:
    """The mixer names of a spec (a name, a pattern "lmm*3,attention" or a list), untiled."""
    if isinstance(mixer, str):
        pattern = [item.partition("*")[0].strip() for item in mixer.split(",")]
        return layer_mixer_names(",".join(pattern), len(pattern))
    return layer_mixer_names(list(mixer), len(mixer))
