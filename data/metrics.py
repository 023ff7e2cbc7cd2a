"""Point-forecast errors as the long-horizon benchmarks report them (on normalized values)."""

from __future__ import annotations

import numpy as np
import torch


def _pair(prediction, target) -> tuple[np.ndarray, np.ndarray]:
    def as_array(x):
        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu", torch.float64)
        return np.asarray(x, dtype=np.float64)

    prediction, target = as_array(prediction), as_array(target)
    if prediction.shape != target.shape:
        raise ValueError(f"shape mismatch: prediction {prediction.shape}, target {target.shape}")
    return prediction, target


def mse(prediction, target) -> float:
    """Mean squared error over all elements, e.g. [N, H, C]; tensors or arrays, in float64.

    The benchmark tables report it on z-scored values (the scaler fit on train), i.e.
    directly on what `ForecastWindows` returns.
    """
    prediction, target = _pair(prediction, target)
    return float(np.mean((prediction - target) ** 2))


def mae(prediction, target) -> float:
    """Mean absolute error over all elements (same conventions as `mse`)."""
    prediction, target = _pair(prediction, target)
    return float(np.mean(np.abs(prediction - target)))
