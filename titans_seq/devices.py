"""`resolve_device`: a device name as users write it ("auto", "cpu", "cuda", "cuda:1")."""

from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """ "auto" is cuda:local_rank when CUDA is available, else cpu; "cuda" without an index
    is cuda:local_rank (the process's GPU under torchrun). A name that is not a device, or
    CUDA where there is none, raises a ConfigError naming it."""
    if name == "auto":
        return (
            torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        )
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"device {name!r} is not a device: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r}: CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device
