"""RMSNorm over the last dimension."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """y = x / rms(x) * weight, over the last dimension.

    Computed in float32 for half/bfloat16/float32 inputs and in float64 for float64 inputs
    (so float64 comparisons between implementations stay exact); x: [..., D] -> [..., D],
    same dtype as x.
    """

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if elementwise_affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        compute = torch.promote_types(x.dtype, torch.float32)
        xc = x.to(compute)
        y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight.to(compute)
        return y.to(x.dtype)
