"""The seasonal naive forecast beside the network: weighed in where the hold-out shows that
it lowers the error.

On many short series a network can end level with the forecast that repeats the last
season (M4's hourly series: a day), and on some series below it. The forecaster's default
keeps the network and mixes the seasonal naive forecast in, `w * naive + (1 - w) *
network`, with the weight `w` among `WEIGHTS` whose validation loss is lowest; a weight
above 0 must lower the network's own loss by more than `MARGIN` of it, so that the network
alone stays the forecast where the two are level.
"""

from __future__ import annotations

import numpy as np
import torch

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
MARGIN = 0.01


def seasonal_naive(context: torch.Tensor, horizon: int, season: int) -> torch.Tensor:
    """[B, L, C] context -> [B, H, C]: each step repeats the value `season` steps before it
    (season 1: the last value). A season longer than the context repeats the whole
    context."""
    m = max(1, min(int(season), context.shape[1]))
    repeats = -(-horizon // m)
    return context[:, -m:].repeat(1, repeats, 1)[:, :horizon]


def mix(network: torch.Tensor, naive: torch.Tensor, weight: float) -> torch.Tensor:
    """The forecast with the seasonal naive forecast weighed in (both [B, H, C])."""
    if weight == 0.0:
        return network
    return weight * naive + (1.0 - weight) * network


class WeightLosses:
    """Running validation loss of each weight's mix, over batches of windows."""

    def __init__(self, loss: str):
        self.loss, self.total, self.count = loss, np.zeros(len(WEIGHTS)), 0

    def add(self, network: torch.Tensor, naive: torch.Tensor, target: torch.Tensor) -> None:
        """network, naive, target: [B, H, C] in the windows' scaled units."""
        network, naive, target = network.double(), naive.double(), target.double()
        for i, weight in enumerate(WEIGHTS):
            error = mix(network, naive, weight) - target
            per_value = error.abs() if self.loss == "mae" else error**2
            self.total[i] += float(per_value.sum())
        self.count += target.numel()

    def losses(self) -> dict[float, float]:
        return {w: float(t / max(1, self.count)) for w, t in zip(WEIGHTS, self.total, strict=True)}


def choose_weight(losses: dict[float, float]) -> float:
    """The weight with the lowest validation loss if it is below the network's own (weight
    0) by more than MARGIN of it, else 0."""
    best = min(losses, key=losses.__getitem__)
    return best if losses[best] < (1.0 - MARGIN) * losses[0.0] else 0.0
