"""The mean forecast of several networks trained from different seeds."""

from __future__ import annotations

import torch
from torch import nn


class ForecastEnsemble(nn.Module):
    """forward(...) -> the mean of the members' outputs ([B, H, C], or [B, H, C, Q] with
    quantiles: each level averaged over the members, which keeps the levels in order when
    each member's are). Every member takes the same inputs (window, covariates, history)."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
        self.members = nn.ModuleList(members)

    def forward(self, *args, **kwargs) -> torch.Tensor:
        return torch.stack([member(*args, **kwargs) for member in self.members]).mean(0)


def one_model(members: list[nn.Module]) -> nn.Module:
    """The forecaster of `members`: the network itself when there is one, else their mean."""
    return members[0] if len(members) == 1 else ForecastEnsemble(members)
