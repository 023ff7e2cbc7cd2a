"""`build_mixer`: a registered mixer from its name and checked options."""

from __future__ import annotations

from .base import SequenceMixer
from .options import check_mixer_options
from .registry import mixer_class


def build_mixer(name: str, dim: int, heads: int = 1, **options) -> SequenceMixer:
    """Build a registered mixer: `build_mixer("mag", dim=256, heads=4, window=128)`.

    Options are checked first (`titans_seq.mixers.options`): an unknown one raises
    `UnknownOptionError` (a TypeError) with a did-you-mean and the accepted options, a value
    of the wrong type a `ConfigError` (a ValueError) naming it.
    """
    checked = check_mixer_options(name, options)
    return mixer_class(name)(dim=dim, heads=heads, **checked)
