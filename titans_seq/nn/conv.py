"""Depthwise causal 1-D convolution with a streaming cache."""

from __future__ import annotations

import torch
from torch import nn


class CausalDepthwiseConv1d(nn.Module):
    """y_t = sum_{j<K} w_j * x_{t-j} + b, per channel; the past comes from `cache`.

    x: [B, T, C] -> y: [B, T, C]; cache: [B, K-1, C] (the last K-1 inputs before x, zeros
    at the start of a stream). Returns (y, new cache).
    """

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size))
        self.bias = nn.Parameter(torch.zeros(channels))
        # identity-like start: most weight on the current token, so the layer starts as a
        # gentle smoother rather than a random filter
        with torch.no_grad():
            self.weight.normal_(0.0, 0.1 / kernel_size**0.5)
            self.weight[:, 0, -1] += 1.0

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None):
        B, T, C = x.shape
        K = self.kernel_size
        if cache is None:
            cache = x.new_zeros(B, K - 1, C)
        padded = torch.cat([cache.to(x.dtype), x], dim=1)  # [B, K-1+T, C]
        # K shifted multiply-adds (cross-correlation, as F.conv1d): for the small kernels used
        # here this is several times faster than a grouped convolution on CPU, backward included
        weight = self.weight.to(x.dtype)[:, 0]  # [C, K]
        y = self.bias.to(x.dtype) + padded[:, :T] * weight[:, 0]
        for j in range(1, K):
            y = y + padded[:, j : j + T] * weight[:, j]
        new_cache = padded[:, padded.shape[1] - (K - 1) :]
        return y, new_cache
