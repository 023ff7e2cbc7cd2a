"""Reversible instance normalisation (RevIN, Kim et al. 2022)."""

from __future__ import annotations

import torch
from torch import nn


def window_moments(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-5):
    """Per-window mean and std of x [B, L, K] over its steps: (mean, std), each [B, 1, K].

    mask [B, L] (1 = observed, 0 = left padding): the statistics of the observed steps only.
    `eps` is added to the variance, so a constant window has a finite, positive std.
    """
    if mask is None:
        mean = x.mean(dim=1, keepdim=True)
        return mean, torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + eps)
    weight = mask.to(x.dtype).unsqueeze(-1)  # [B, L, 1]
    count = weight.sum(dim=1, keepdim=True).clamp_min(1.0)
    mean = (x * weight).sum(dim=1, keepdim=True) / count
    var = (((x - mean) ** 2) * weight).sum(dim=1, keepdim=True) / count
    return mean, torch.sqrt(var + eps)


def window_trend_level(x: torch.Tensor, mean: torch.Tensor, mask: torch.Tensor | None = None):
    """The least-squares line through each window of x [B, L, K], read at its last step:
    [B, 1, K] (`mean`: the window's mean [B, 1, K], as `window_moments` gives it).

    mask [B, L] (1 = observed): the line through the observed steps only. A window with one
    observed step has no slope, and its level is that step's value.
    """
    steps = torch.arange(x.shape[1], dtype=x.dtype, device=x.device).view(1, -1, 1)
    weight = (
        torch.ones_like(x[..., :1]) if mask is None else mask.to(x.dtype).unsqueeze(-1)
    )  # [B, L, 1]
    count = weight.sum(dim=1, keepdim=True).clamp_min(1.0)
    offset = steps - (weight * steps).sum(dim=1, keepdim=True) / count  # [B, L, 1]
    spread = (weight * offset.square()).sum(dim=1, keepdim=True)
    covariance = (weight * offset * (x - mean)).sum(dim=1, keepdim=True)
    slope = torch.where(spread > 0, covariance / spread.clamp_min(1e-12), 0.0)
    return mean + slope * offset[:, -1:, :]


CENTERS = ("mean", "last", "trend")


class RevIN(nn.Module):
    """Normalise each series of a window by its own level and std, and undo it on the
    forecast.

    x: [B, L, C]; `normalize` returns the normalised window and the statistics
    (level, std: [B, 1, C]) that `denormalize` needs for a forecast [B, H, C] (or
    [B, H, C, Q]). A constant window has std 0: `eps` keeps the division finite.

    center: the level a window is measured from, "mean" (RevIN's: the window's mean),
    "last" (the window's last value, as NLinear subtracts it) or "trend" (the window's
    least-squares line read at its last step). The network's zero output is then the
    window's mean, a persistence forecast, or the trend's level carried forward: on a
    series that returns to its mean the mean is the better starting point, on a slowly
    drifting one the last value, on a trending seasonal one the trend's level (a line
    through two or more seasons follows the level they ride on, where the last value sits
    on one phase of the season).
    """

    def __init__(
        self, num_channels: int, affine: bool = True, eps: float = 1e-5, center: str = "mean"
    ):
        super().__init__()
        if center not in CENTERS:
            raise ValueError(f"center must be one of {CENTERS}, got {center!r}")
        self.eps, self.center = eps, center
        self.weight = nn.Parameter(torch.ones(num_channels)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_channels)) if affine else None

    def normalize(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        """mask [B, L] (1 = observed, 0 = left padding): statistics over observed steps only
        (a left-padded window's last step is observed)."""
        level, std = (t.detach() for t in window_moments(x, mask, self.eps))
        if self.center == "last":
            level = x[:, -1:, :].detach()
        elif self.center == "trend":
            level = window_trend_level(x.detach(), level, mask)
        z = (x - level) / std
        if self.weight is not None:
            z = z * self.weight + self.bias
        return z, (level, std)

    def denormalize(self, y: torch.Tensor, stats) -> torch.Tensor:
        level, std = stats
        extra = y.dim() - level.dim()  # quantile forecasts carry a trailing axis
        if self.weight is not None:
            weight = self.weight.view(-1, *([1] * extra))
            bias = self.bias.view(-1, *([1] * extra))
            y = (y - bias) / (weight + self.eps**2)  # as in RevIN: keeps a zero weight finite
        level = level.view(*level.shape, *([1] * extra))
        std = std.view(*std.shape, *([1] * extra))
        return y * std + level
