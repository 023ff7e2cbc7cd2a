"""An exponential moving average of the trained weights (`optim.ema_decay`), the weights a
run evaluates, keeps as its best and hands to an estimator.

Late in a run each optimizer step still moves the weights by the noise of its batch; their
average over the last ~1 / (1 - decay) steps sits nearer the minimum those steps circle
(Polyak averaging). The average is torch's `AveragedModel` over the bare module (not a
DDP wrapper: every process holds the same weights, so the same average), with a warmup:
step n averages at decay min(decay, (1 + n) / (10 + n)), so the first evaluations do not
read weights dominated by the initialisation.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

STATE_PREFIX = "module."  # AveragedModel's names for the averaged module's own


def _ema_with_warmup(decay: float):
    """`AveragedModel`'s multi_avg_fn: averaged <- averaged + (1 - d_n) (current - averaged)."""

    @torch.no_grad()
    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], num_averaged):
        n = int(num_averaged)
        weight = 1.0 - min(decay, (1.0 + n) / (10.0 + n))
        # torch groups the tensors by dtype: integer buffers (counters) are copied, not averaged
        if averaged and not averaged[0].is_floating_point():
            torch._foreach_copy_(averaged, current)
        else:
            torch._foreach_lerp_(averaged, current, weight)

    return update


class WeightAverage:
    """The average of `model`'s parameters and buffers over its optimizer steps.

    `update(model)` after every optimizer step; `module` is a copy of `model` holding the
    averaged weights (evaluate it, save its state dict); `state_dict()` / `load_state_dict`
    checkpoint it (tensors only: the averaged weights under their module names, plus the
    count of updates)."""

    def __init__(self, model: nn.Module, decay: float):
        self.averaged = AveragedModel(model, multi_avg_fn=_ema_with_warmup(decay), use_buffers=True)

    @property
    def module(self) -> nn.Module:
        return self.averaged.module

    def update(self, model: nn.Module) -> None:
        self.averaged.update_parameters(model)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.averaged.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.averaged.load_state_dict(state)
