"""Which mixer, with which options, each layer of a stack gets.

A stack names its mixers as one name, a pattern ("lmm*3,attention") or a list, and gives
their options as one mapping for every layer, a mapping per mixer name, or a list per
layer; these functions turn both into one entry per layer, and pin the options of models
saved under earlier defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import ConfigError
from .memory_config import CHUNK_COUPLED_DEFAULTS, MEMORY_MIXERS, PREVIOUS_MEMORY_DEFAULTS
from .registry import list_mixers, mixer_class


def per_mixer_sections(options: Mapping) -> dict[str, Mapping] | None:
    """The sections of a `mixer_options` mapping keyed by mixer name, or None when it is
    one set of options shared by every layer. A mapping whose keys are all registered
    mixer names is per mixer; one that mixes both kinds of key is an error."""
    registered = set(list_mixers())
    named = [k for k in options if k in registered]
    if not named:
        return None
    others = [k for k in options if k not in registered]
    if others:
        raise ConfigError(
            f"mixer_options mixes sections per mixer ({named}) with options for every layer "
            f"({others}); put the shared options inside each mixer's section"
        )
    for key, value in options.items():
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"mixer_options.{key}: the options of mixer {key!r} must be a mapping, "
                f"got {value!r}"
            )
    return {k: (v or {}) for k, v in options.items()}


def layer_mixer_names(mixer: str | Sequence[str], depth: int) -> list[str]:
    """The mixer name of every layer.

    `mixer` is one of:
      * a name, e.g. "swa": every layer;
      * a pattern, comma-separated names each optionally repeated with `*n`, tiled over the
        depth, e.g. "lmm*3,attention" with depth 8 -> 3 x lmm, attention, 3 x lmm, attention
        (depth must be a multiple of the pattern length);
      * a list of `depth` names, one per layer.
    """
    if isinstance(mixer, str):
        pattern = _parse_pattern(mixer)
        if depth % len(pattern):
            raise ValueError(
                f"mixer pattern {mixer!r} has {len(pattern)} layers, which does not divide "
                f"depth={depth}"
            )
        names = pattern * (depth // len(pattern))
    elif isinstance(mixer, Sequence):
        names = list(mixer)
        if len(names) != depth:
            raise ValueError(
                f"mixer list has {len(names)} entries but depth={depth}; give one name per "
                "layer or a pattern string such as 'lmm*3,attention'"
            )
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"mixer list entries must be names (str), got {name!r}")
    else:
        raise TypeError(
            f"mixer must be a name, a pattern string or a list of names, got {type(mixer).__name__}"
        )
    for name in names:
        mixer_class(name)  # raises ValueError listing the registered mixers
    return names


def _parse_pattern(pattern: str) -> list[str]:
    names: list[str] = []
    for item in pattern.split(","):
        name, star, count = (part.strip() for part in item.partition("*"))
        if not name:
            raise ValueError(f"empty mixer name in pattern {pattern!r}")
        repeat = 1
        if star:
            if not count.isdigit() or int(count) <= 0:
                raise ValueError(f"bad repeat count {count!r} in mixer pattern {pattern!r}")
            repeat = int(count)
        names.extend([name] * repeat)
    return names


def pin_layer_options(
    options: Mapping | Sequence[Mapping | None] | None,
    names: list[str],
    pinned: Mapping,
    mixers: Sequence[str],
) -> list[dict]:
    """Per-layer options (as `layer_mixer_options`) with the `pinned` values set on every
    layer whose mixer is one of `mixers`, unless that layer's options already set them (used
    to load models saved under earlier defaults)."""
    per_layer = layer_mixer_options(options, names)
    return [_pin(opts, pinned) if name in mixers else opts for name, opts in zip(names, per_layer)]


def _pin(options: dict, pinned: Mapping) -> dict:
    """`options` with the `pinned` memory options added where neither the flat options nor a
    nested `memory:` mapping sets them (a MemoryConfig object is complete: nothing to add)."""
    memory = options.get("memory")
    if memory is None:
        return {**pinned, **options}
    if not isinstance(memory, Mapping):
        return options
    nested = dict(memory)
    for key, value in pinned.items():
        if key not in nested and key not in options:
            nested[key] = value
    return {**options, "memory": nested}


# The generations of the mixers' defaults, the current one last. A saved model records the
# format version it was written in; each format maps its versions to these generations
# (e.g. `domains/lm/io.py`), and loading pins the defaults of the model's generation:
#   1  before the memory's stable parametrisation: `PREVIOUS_MEMORY_DEFAULTS`
#   2  theta_max followed the chunk size: `CHUNK_COUPLED_DEFAULTS`
#   3  MAL's layout was "one_block": `PREVIOUS_MAL_DEFAULTS`
#   4  the defaults of today
DEFAULTS_GENERATION = 4
PREVIOUS_MAL_DEFAULTS = {"layout": "one_block"}


def pin_saved_defaults(
    options: Mapping | Sequence[Mapping | None] | None, names: list[str], generation: int
) -> list[dict]:
    """The options every layer of a saved model was trained with, from those it stored and
    the generation of defaults it was saved under (see `DEFAULTS_GENERATION`). Options a
    model stored itself always stand."""
    if not 1 <= generation <= DEFAULTS_GENERATION:
        raise ValueError(
            f"defaults generation must be 1 to {DEFAULTS_GENERATION}, got {generation}"
        )
    pinned = layer_mixer_options(options, names)
    if generation < 2:
        pinned = pin_layer_options(pinned, names, PREVIOUS_MEMORY_DEFAULTS, MEMORY_MIXERS)
    if generation < 3:
        pinned = pin_layer_options(pinned, names, CHUNK_COUPLED_DEFAULTS, MEMORY_MIXERS)
    if generation < 4:  # a mixer option, not a memory one: set beside the others
        pinned = [
            {**PREVIOUS_MAL_DEFAULTS, **opts} if name == "mal" else opts
            for name, opts in zip(names, pinned)
        ]
    return pinned


def layer_mixer_options(
    options: Mapping | Sequence[Mapping | None] | None, names: list[str]
) -> list[dict]:
    """The keyword options of every layer's mixer.

    `options` is one of:
      * None: defaults everywhere;
      * a dict of options shared by every layer, e.g. {"window": 128};
      * a dict keyed by mixer name (all keys registered mixer names, all values dicts),
        e.g. {"swa": {"window": 128}, "lmm": {"memory": {"chunk_size": 32}}}; a dict that
        mixes mixer names and option names is an error (`per_mixer_sections`);
      * a list with one dict (or None) per layer.
    """
    depth = len(names)
    if options is None:
        return [{} for _ in range(depth)]
    if isinstance(options, Mapping):
        sections = per_mixer_sections(options)
        if sections is None:
            return [dict(options) for _ in range(depth)]
        unused = sorted(set(sections) - set(names))
        if unused:
            raise ConfigError(
                f"mixer_options gives options for {unused}, which no layer uses (layers: {names})"
            )
        return [dict(sections.get(name, {})) for name in names]
    if isinstance(options, Sequence) and not isinstance(options, str):
        if len(options) != depth:
            raise ValueError(f"mixer_options list has {len(options)} entries but depth={depth}")
        per_layer = []
        for entry in options:
            if entry is not None and not isinstance(entry, Mapping):
                raise TypeError(f"mixer_options list entries must be dicts or None, got {entry!r}")
            per_layer.append(dict(entry or {}))
        return per_layer
    raise TypeError(
        f"mixer_options must be a dict, a list of dicts or None, got {type(options).__name__}"
    )
