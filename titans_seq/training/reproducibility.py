"""Seeds, deterministic mode, and capturing/restoring every RNG a run consumes."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_deterministic(enabled: bool) -> tuple[bool, bool, bool]:
    """Deterministic kernels (slower on GPU): repeated runs give bitwise-identical results.

    On CPU the engine's computation is already deterministic; on CUDA this also needs a fixed
    cuBLAS workspace, which must be set before the first cuBLAS call, hence the env var.
    Returns the previous settings, for `restore_deterministic` (these flags are global to the
    process, and a run must not leave them changed for the code that called it).
    """
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
    )
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.benchmark = not enabled
    torch.backends.cudnn.deterministic = enabled
    return previous


def restore_deterministic(previous: tuple[bool, bool, bool]) -> None:
    torch.use_deterministic_algorithms(previous[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = previous[1:]


def rng_state(device: torch.device) -> dict[str, Any]:
    """The state of every generator this process draws from (checkpointed per rank)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
