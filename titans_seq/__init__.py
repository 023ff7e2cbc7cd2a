"""titans-seq: the Titans neural long-term memory as sequence mixers.

>>> import torch, titans_seq as ts
>>> mixer = ts.build_mixer("lmm", dim=256, heads=4)
>>> y, state = mixer(torch.randn(2, 100, 256))  # x, y: [B, T, D]
"""

from .backbone import Backbone
from .inspection import MemoryRecording, plot_memory_trace, record_memory
from .mixers import MixerState, SequenceMixer, build_mixer, list_mixers, register_mixer

__version__ = "0.1.0"

__all__ = [
    "Backbone",
    "MemoryRecording",
    "MixerState",
    "SequenceMixer",
    "__version__",
    "build_mixer",
    "list_mixers",
    "plot_memory_trace",
    "record_memory",
    "register_mixer",
]
