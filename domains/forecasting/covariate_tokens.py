"""Covariates as patch tokens for the Simba-style forecaster.

Three kinds, in neuralforecast's terms:

* past covariates [B, L, Kp] (historical exogenous, and future exogenous over the lookback)
  and the observed mask [B, L]: patched like the target and added to its patch tokens;
  like the target (RevIN), the exogenous columns are normalised by their own mean and std
  over the window's observed steps, so a covariate's level shift between training and
  test years does not move the forecast (calendar features are left as they are);
* future covariates over the horizon [B, H, Kf]: patched without overlap into
  ceil(H / patch_len) tokens appended after the history tokens, so the causal mixer reads
  them after the whole lookback and the head reads all tokens;
* static covariates [B, Ks]: one vector added to every token.

The past and static projections start at zero: the history tokens begin as those of the
same model without covariates, and training learns how much each input adds.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from .revin import window_moments


@dataclasses.dataclass(frozen=True)
class CovariateShape:
    """How many covariates of each kind a model reads, and whether it reads a mask."""

    hist: int = 0  # historical exogenous columns
    futr: int = 0  # future exogenous columns (read over the lookback and the horizon)
    calendar: int = 0  # calendar features (future covariates that need no scaling)
    static: int = 0
    observed_mask: bool = False  # windows of short series, left-padded

    @property
    def past(self) -> int:
        """Columns of the past input: hist, futr, calendar."""
        return self.hist + self.futr + self.calendar

    @property
    def future(self) -> int:
        """Columns of the future input: futr, calendar."""
        return self.futr + self.calendar

    @property
    def any(self) -> bool:
        return bool(self.past or self.static or self.observed_mask)


NO_COVARIATES = CovariateShape()


def patch_rows(x: torch.Tensor, patch_len: int, stride: int, pad: int) -> torch.Tensor:
    """x [B, T, K] -> [B, N, K * patch_len]: each feature patched along time, the end padded
    by repeating the last row `pad` times."""
    if pad:
        x = torch.cat([x, x[:, -1:].expand(-1, pad, -1)], dim=1)
    patches = x.transpose(1, 2).unfold(2, patch_len, stride)  # [B, K, N, P]
    return patches.permute(0, 2, 1, 3).flatten(2)


def _zero_linear(fan_in: int, dim: int) -> nn.Linear:
    layer = nn.Linear(fan_in, dim)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class CovariateTokens(nn.Module):
    """The covariates' contribution to the token sequence of a [B, L, C] window."""

    def __init__(self, shape: CovariateShape, dim: int, patch_len: int, stride: int, horizon: int):
        super().__init__()
        self.shape, self.patch_len, self.stride = shape, patch_len, stride
        past_features = shape.past + int(shape.observed_mask)
        self.past = _zero_linear(past_features * patch_len, dim) if past_features else None
        self.static = _zero_linear(shape.static, dim) if shape.static else None
        self.num_future_tokens = math.ceil(horizon / patch_len) if shape.future else 0
        if shape.future:
            self.future = nn.Linear(shape.future * patch_len, dim)
            self.future_position = nn.Parameter(torch.randn(self.num_future_tokens, dim) * 0.02)
        self.horizon = horizon

    def normalized(self, past, future, mask):
        """(past, future) with the exogenous columns (hist, futr) normalised per window by
        their mean and std over the observed lookback steps; futr's horizon values by the
        statistics of its lookback values."""
        scaled = self.shape.hist + self.shape.futr
        if not scaled:
            return past, future
        values = past[..., :scaled]
        mean, std = window_moments(values, mask)
        past = torch.cat([(values - mean) / std, past[..., scaled:]], dim=-1)
        if self.shape.futr and future is not None:
            futr = slice(self.shape.hist, scaled)
            ahead = (future[..., : self.shape.futr] - mean[..., futr]) / std[..., futr]
            future = torch.cat([ahead, future[..., self.shape.futr :]], dim=-1)
        return past, future

    def past_tokens(self, past, mask, batch: int, length: int):
        """[B, N, D] added to the history tokens of past [B, L, Kp] and mask [B, L] (None
        when the model reads neither)."""
        if self.past is None:
            return None
        parts = []
        if self.shape.past:
            parts.append(past)
        if self.shape.observed_mask:
            if mask is None:
                mask = torch.ones(batch, length, device=self.past.weight.device)
            parts.append(mask.to(self.past.weight.dtype).unsqueeze(-1))
        rows = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        return self.past(patch_rows(rows, self.patch_len, self.stride, self.stride))

    def future_tokens(self, future: torch.Tensor) -> torch.Tensor:
        """future [B, H, Kf] -> [B, ceil(H / patch_len), D]."""
        pad = self.num_future_tokens * self.patch_len - future.shape[1]
        patches = patch_rows(future, self.patch_len, self.patch_len, pad)
        return self.future(patches) + self.future_position

    def static_vector(self, static: torch.Tensor) -> torch.Tensor:
        """static [B, Ks] -> [B, 1, D]."""
        return self.static(static).unsqueeze(1)

    def check(self, batch: int, length: int, past, future, static, mask) -> None:
        """ValueError naming the input that is absent or has the wrong shape."""
        expected = {
            "past": (past, (batch, length, self.shape.past) if self.shape.past else None),
            "future": (
                future,
                (batch, self.horizon, self.shape.future) if self.shape.future else None,
            ),
            "static": (static, (batch, self.shape.static) if self.shape.static else None),
        }
        for name, (value, shape) in expected.items():
            if shape is None and value is not None:
                raise ValueError(
                    f"this model was built without {name} covariates; pass {name}=None"
                )
            if shape is not None and (value is None or tuple(value.shape) != shape):
                got = None if value is None else tuple(value.shape)
                raise ValueError(f"expected {name} covariates of shape {list(shape)}, got {got}")
        if mask is not None and tuple(mask.shape) != (batch, length):
            raise ValueError(f"expected mask of shape [{batch}, {length}], got {tuple(mask.shape)}")
