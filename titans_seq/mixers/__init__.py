"""Sequence mixers behind one interface, `y, state = mixer(x, state=None)`.

Importing this package registers the built-in mixers.
"""

from . import lmm  # noqa: F401  (registers "lmm")
from .base import SequenceMixer
from .registry import build_mixer, list_mixers, mixer_class, register_mixer
from .state import MixerState

__all__ = [
    "MixerState",
    "SequenceMixer",
    "build_mixer",
    "list_mixers",
    "mixer_class",
    "register_mixer",
]
