"""Depthwise causal 1-D convolution with a streaming cache, as a module."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.causal_conv import causal_depthwise_conv


class CausalDepthwiseConv1d(nn.Module):
    """y_t = sum_{j<K} w_j * x_{t-j} + b, per channel; the past comes from `cache`.

    x: [B, T, C] -> y: [B, T, C]; cache: [B, K-1, C] (the last K-1 inputs before x, zeros
    at the start of a stream). Returns (y, new cache). Runs the fused Triton kernels for
    CUDA tensors, oneDNN's depthwise convolution for CPU tensors and shifted multiply-adds
    elsewhere (`titans_seq.ops.causal_conv`).
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
        return causal_depthwise_conv(x, self.weight[:, 0], self.bias, cache)
