"""The files of a training run folder, and reading a run's trained weights.

<run>/config.yaml                   the resolved recipe (RUN_CONFIG)
<run>/best_model.safetensors        the weights of the best validation metric (BEST_WEIGHTS)
<run>/checkpoints/step_*/           resumable checkpoints (CHECKPOINT_DIR)
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import (
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    state_mismatch,
)

CHECKPOINT_DIR = "checkpoints"
RUN_CONFIG = "config.yaml"  # the resolved recipe of the run
BEST_WEIGHTS = "best_model.safetensors"


def run_weights(run: str | Path, weights: str = "best") -> dict[str, torch.Tensor]:
    """The model state of run folder `run`: `weights="best"` reads `best_model.safetensors`
    where the run wrote one, else (as `weights="last"` does) its newest complete checkpoint.
    Every file is verified (digests, manifests) on the way."""
    run = Path(run)
    if weights not in ("best", "last"):
        raise ValueError(f"weights must be 'best' or 'last', got {weights!r}")
    if weights == "best" and (run / BEST_WEIGHTS).is_file():
        return load_weights(run / BEST_WEIGHTS)
    latest = latest_checkpoint(run / CHECKPOINT_DIR)
    if latest is None:
        raise CheckpointError(f"{run} holds neither {BEST_WEIGHTS} nor a checkpoint yet")
    return load_checkpoint(latest).model_state


def initial_weights(source: str | Path) -> dict[str, torch.Tensor]:
    """The weights a run starts from (`train.init_from`): a `.safetensors` file, or a run
    folder (its best weights, else its newest checkpoint)."""
    source = Path(source)
    if source.is_dir():
        if not (source / RUN_CONFIG).is_file():
            raise CheckpointError(
                f"train.init_from: {source} is neither a .safetensors file nor a training run "
                f"folder (no {RUN_CONFIG})"
            )
        return run_weights(source)
    if not source.is_file():
        raise FileNotFoundError(f"train.init_from: {source} does not exist")
    if source.suffix != ".safetensors":
        raise CheckpointError(
            f"train.init_from: {source} is not a .safetensors file or a run folder"
        )
    return load_weights(source)


def load_initial_weights(model: torch.nn.Module, source: str | Path) -> None:
    """Start `model` from the weights of `source` (`initial_weights`); every parameter and
    buffer must be there with its shape, and nothing else, or the names that differ are
    given before anything is loaded."""
    state = initial_weights(source)
    mismatch = state_mismatch(model, state)
    reshaped = [f"{name} {have} (the model's {want})" for name, have, want in mismatch.reshaped]
    problems = []
    found = (
        ("missing", mismatch.missing),
        ("not in the model", mismatch.unexpected),
        ("of another shape", reshaped),
    )
    for label, names in found:
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            problems.append(f"{label}: {shown}")
    if problems:
        raise CheckpointError(
            f"train.init_from: the weights of {source} do not fit this run's model ("
            + "; ".join(problems)
            + "): build the model as the source run did"
        )
    model.load_state_dict(state)
