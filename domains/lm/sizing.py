"""Model sizes for side-by-side comparisons: the MLP width that matches parameter counts."""

from __future__ import annotations

import torch

from titans_seq.nn.mlp import swiglu_hidden_dim

from .model import TitansLM
from .presets import preset_config


def parameter_matched_mlp_ratio(
    name: str,
    mixer: str | list[str],
    vocab_size: int = 256,
    reference: str = "attention",
    mixer_options: dict | None = None,
) -> float:
    """The `mlp_ratio` that gives preset `name` with `mixer` (nearly) the parameter count of
    the same preset with the `reference` mixer (Transformer++ by default), for side-by-side
    comparisons at equal size: the Titans mixers' extra parameters are taken out of (or, for
    smaller mixers, added to) the SwiGLU width. The SwiGLU width moves in steps of 8, so the
    counts then differ by less than 4 * 3 * dim * depth parameters. The models are built on
    the `meta` device (no memory, no initialization time).
    """
    config = preset_config(name)
    dim, depth = config["dim"], config["depth"]
    with torch.device("meta"):
        target = TitansLM.from_preset(
            name, mixer=reference, vocab_size=vocab_size, mixer_options=None
        ).num_parameters()
        current = TitansLM.from_preset(
            name, mixer=mixer, vocab_size=vocab_size, mixer_options=mixer_options
        ).num_parameters()
    hidden = swiglu_hidden_dim(dim, config["mlp_ratio"])
    per_unit = 3 * dim * depth  # parameters per unit of SwiGLU width over the whole stack
    wanted = hidden - (current - target) / per_unit
    matched = max(8, 8 * round(wanted / 8))
    # a ratio whose width rounds up to exactly `matched` (away from float ties at multiples)
    return 3 * (matched - 4) / (2 * dim)
