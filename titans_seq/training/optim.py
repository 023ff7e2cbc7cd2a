"""AdamW with decoupled weight decay on the right parameters, and the warmup + cosine schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import OptimConfig


def decay_split(model: nn.Module, no_decay: list[str]) -> tuple[list[str], list[str]]:
    """(names with weight decay, names without).

    Decay shrinks weights towards zero, which is right for matrices but wrong for norm gains
    (pulled towards 0 instead of 1), biases, and learned tokens (persistent memory, initial
    memory weights flagged by the model) whose scale is their content. So: every parameter
    with fewer than 2 dimensions, every name containing one of `no_decay`, and every
    parameter carrying the attribute `_no_weight_decay = True` is excluded.
    """
    decay, keep = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        excluded = (
            param.ndim < 2
            or any(pattern in name for pattern in no_decay)
            or getattr(param, "_no_weight_decay", False)
        )
        (keep if excluded else decay).append(name)
    return decay, keep


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW over two parameter groups: decayed and not decayed (see `decay_split`)."""
    params = dict(model.named_parameters())
    decay, keep = decay_split(model, cfg.no_decay)
    # "decay" marks the group, so that a resumed run can re-apply a changed weight_decay
    groups = [
        {"params": [params[n] for n in decay], "weight_decay": cfg.weight_decay, "decay": True},
        {"params": [params[n] for n in keep], "weight_decay": 0.0, "decay": False},
    ]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise ValueError("the model has no trainable parameters")
    # foreach=False keeps the update order identical on every process count and device,
    # which the exact-resume and DDP-equivalence guarantees rely on
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, foreach=False)


class WarmupCosine:
    """lr multiplier: linear warmup from ~0 to 1, then cosine down to `min_ratio` at `total`.

    A callable object rather than a lambda, so that `LambdaLR.state_dict()` records its
    parameters and a resumed run can check them.
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_ratio: float):
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_ratio = min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-optimizer-step schedule: `scheduler.step()` once after every `optimizer.step()`."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupCosine(cfg.warmup_steps, total_steps, cfg.min_lr_ratio)
    )
