"""The causal depthwise convolution written from its definition: the specification the
fast forms are tested against (slow: one output position at a time)."""

from __future__ import annotations

import torch


def causal_conv_reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor | None = None
) -> torch.Tensor:
    """y[b, t, c] = bias[c] + sum_{j<K} weight[c, j] * p[b, t + j, c], with p = [cache; x] the
    inputs preceded by the K - 1 before them (zeros without a cache).

    x: [B, T, C]; weight: [C, K]; bias: [C]; cache: [B, K-1, C] or None -> y [B, T, C].
    """
    B, T, C = x.shape
    K = weight.shape[1]
    if cache is None:
        cache = x.new_zeros(B, K - 1, C)
    padded = torch.cat([cache, x], dim=1)  # [B, K-1+T, C]
    rows = [bias + (padded[:, t : t + K] * weight.t()).sum(1) for t in range(T)]
    return torch.stack(rows, dim=1) if rows else x.new_zeros(B, 0, C)
