"""Sequence mixers behind one interface, `y, state = mixer(x, state=None)`.

Importing this package registers the built-in mixers.
"""

from . import attention, lmm, mac, mag, mal  # noqa: F401  (register the built-in mixers)
from .attention import CausalSelfAttention, KVCacheState, SlidingWindowAttention
from .base import SequenceMixer
from .lmm import LMMMixer, LMMState
from .registry import build_mixer, list_mixers, mixer_class, register_mixer
from .state import MixerState

__all__ = [
    "CausalSelfAttention",
    "KVCacheState",
    "LMMMixer",
    "LMMState",
    "MixerState",
    "SequenceMixer",
    "SlidingWindowAttention",
    "build_mixer",
    "list_mixers",
    "mixer_class",
    "register_mixer",
]
