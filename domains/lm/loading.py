"""Load a `TitansLM` (and its tokenizer) from a saved model folder or a training run."""

from __future__ import annotations

from pathlib import Path

import torch

from .model import TitansLM
from .serialization import read_model


def load_lm(directory: str | Path, map_location: str | torch.device = "cpu") -> TitansLM:
    """A `TitansLM` from a directory written by `TitansLM.save` or from an `lm` training run
    (its folder, its `checkpoints/` folder or one `step_*` checkpoint)."""
    model, _ = read_model(directory, TitansLM, map_location)
    return model


def load_lm_and_tokenizer(directory: str | Path, map_location: str | torch.device = "cpu"):
    """(model, tokenizer) from a saved model directory or an `lm` training run; a model
    saved without a tokenizer gets the byte-level one."""
    return read_model(directory, TitansLM, map_location, with_tokenizer=True)
