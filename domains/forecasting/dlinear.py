"""DLinear baseline (Zeng et al. 2023): moving-average decomposition + two linear maps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DLinear(nn.Module):
    """x [B, L, C] -> [B, H, C]: trend = moving average (edge-replicated), seasonal = rest;
    each is mapped L -> H by a linear layer shared across channels (the paper's default)."""

    def __init__(self, lookback: int, horizon: int, kernel_size: int = 25):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
        self.lookback, self.horizon, self.kernel_size = lookback, horizon, kernel_size
        self.seasonal = nn.Linear(lookback, horizon)
        self.trend = nn.Linear(lookback, horizon)
        # start as "repeat the window mean", a sensible forecast before any training
        for layer in (self.seasonal, self.trend):
            nn.init.constant_(layer.weight, 1.0 / lookback)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[1] != self.lookback:
            raise ValueError(f"expected x of shape [B, {self.lookback}, C], got {tuple(x.shape)}")
        series = x.transpose(1, 2)  # [B, C, L]
        pad = self.kernel_size // 2
        padded = F.pad(series, (pad, pad), mode="replicate")
        trend = F.avg_pool1d(padded, self.kernel_size, stride=1)
        out = self.seasonal(series - trend) + self.trend(trend)
        return out.transpose(1, 2)
