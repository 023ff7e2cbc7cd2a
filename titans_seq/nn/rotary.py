"""Rotary position embedding (RoPE) at absolute stream positions.

Streaming needs the rotation of a token to depend only on its absolute position in the
stream, never on where a piece of the stream starts: a piece starting at stream position
`offset` rotates its t-th token by the angle of position `offset + t`. Cos/sin are computed
from scratch on every call (they are [T, d/2], negligible next to attention) so that no
buffer can be down-cast by `module.half()` and lose position precision.

Layout: x is [B, H, T, d] (heads before time, the layout SDPA consumes).
Convention: "rotate half" (GPT-NeoX / LLaMA): dimension i is paired with i + d/2.
"""

from __future__ import annotations

import torch
from torch import nn


def rotary_angles(
    num_positions: int,
    head_dim: int,
    *,
    offset: int = 0,
    base: float = 10000.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Rotation angles of positions offset … offset+num_positions-1: [num_positions, head_dim/2].

    Angle of position p, pair i: p * base^(-2i/head_dim).
    """
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=dtype) / head_dim
    inv_freq = base**-exponents
    positions = torch.arange(offset, offset + num_positions, device=device, dtype=dtype)
    return torch.outer(positions, inv_freq)


def apply_rotary(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate x [B, H, T, d] (d even) as if its tokens sat at stream positions offset … offset+T-1.

    Computed in float32 (float64 for float64 input) and returned in x's dtype.
    """
    head_dim = x.shape[-1]
    if head_dim % 2:
        raise ValueError(f"rotary embedding needs an even head dimension, got {head_dim}")
    if offset < 0:
        raise ValueError(f"rotary offset must be >= 0, got {offset}")
    compute_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = rotary_angles(
        x.shape[-2], head_dim, offset=offset, base=base, device=x.device, dtype=compute_dtype
    )
    cos, sin = angles.cos(), angles.sin()  # [T, d/2], broadcast over B and H
    xc = x.to(compute_dtype)
    first, second = xc[..., : head_dim // 2], xc[..., head_dim // 2 :]
    rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    return rotated.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE for one head size; `forward(x [B, H, T, d], offset) -> [B, H, T, d]`.

    Args:
        head_dim: d, must be even.
        base: the frequency base (10000 in the original RoPE; larger bases suit longer contexts).
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
            raise ValueError(f"rotary embedding needs a positive even head_dim, got {head_dim!r}")
        if not base > 1.0:
            raise ValueError(f"rotary base must be > 1, got {base!r}")
        self.head_dim = head_dim
        self.base = float(base)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if x.shape[-1] != self.head_dim:
            raise ValueError(
                f"RotaryEmbedding was built for head_dim={self.head_dim} but x has last "
                f"dimension {x.shape[-1]} (shape {tuple(x.shape)})"
            )
        return apply_rotary(x, offset=offset, base=self.base)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}"
