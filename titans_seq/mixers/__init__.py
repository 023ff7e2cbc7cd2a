"""Sequence mixers behind one interface, `y, state = mixer(x, state=None)`.

Importing this package registers the built-in mixers.
"""

from . import attention, lmm, mac, mag, mal  # noqa: F401  (register the built-in mixers)
from .attention import CausalSelfAttention, KVCacheState, SlidingWindowAttention
from .base import SequenceMixer
from .build import build_mixer
from .lmm import LMMMixer, LMMState
from .memory_config import MemoryConfig
from .options import UnknownOptionError, check_layer_options, check_mixer_options
from .registry import list_mixers, mixer_class, register_mixer
from .state import MixerState

__all__ = [
    "CausalSelfAttention",
    "KVCacheState",
    "LMMMixer",
    "LMMState",
    "MemoryConfig",
    "MixerState",
    "SequenceMixer",
    "SlidingWindowAttention",
    "UnknownOptionError",
    "build_mixer",
    "check_layer_options",
    "check_mixer_options",
    "list_mixers",
    "mixer_class",
    "register_mixer",
]
