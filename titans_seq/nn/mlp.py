"""SwiGLU feed-forward layer (the gated MLP of Transformer++ / LLaMA blocks)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def swiglu_hidden_dim(dim: int, mlp_ratio: float, multiple_of: int = 8) -> int:
    """Hidden width of a SwiGLU with the parameter count of a plain MLP of ratio `mlp_ratio`.

    A SwiGLU has three matrices instead of two, so its hidden width is 2/3 of
    `mlp_ratio * dim`, rounded up to a multiple of `multiple_of` (friendlier to kernels).
    """
    hidden = int(math.ceil(2 * mlp_ratio * dim / 3))
    return multiple_of * math.ceil(hidden / multiple_of)


class SwiGLU(nn.Module):
    """y = down(silu(gate(x)) * up(x)); x: [..., D] -> [..., D].

    `down_proj` is the residual output projection (Backbone scales it at init).
    """

    def __init__(self, dim: int, hidden_dim: int, bias: bool = False):
        super().__init__()
        if hidden_dim <= 0:
            raise ValueError(f"SwiGLU hidden_dim must be positive, got {hidden_dim}")
        self.gate_up_proj = nn.Linear(dim, 2 * hidden_dim, bias=bias)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=bias)
        nn.init.normal_(self.gate_up_proj.weight, std=dim**-0.5)
        nn.init.normal_(self.down_proj.weight, std=hidden_dim**-0.5)
        for linear in (self.gate_up_proj, self.down_proj):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)
