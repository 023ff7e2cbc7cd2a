"""The causal depthwise convolution for CPUs: oneDNN's depthwise convolution on the [B, T, C]
tensor as it lies in memory, with a hand-written backward.

x [B, T, C] (contiguous) is, viewed as [B, C, 1, T], a channels-last (NHWC) image of height
one, which is the layout oneDNN's depthwise kernels read without a copy. So the forward and
the input gradient (the same convolution of dy with the taps reversed) are one vectorised
pass each, where K shifted multiply-adds take K passes over x. The weight gradient is the
shifted form's (`torch_backend.weight_gradient`), faster here than oneDNN's own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .torch_backend import causal_conv_torch, weight_gradient


def causal_conv_onednn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor | None = None
) -> torch.Tensor:
    """As `causal_conv_reference`: x [B, T, C], weight [C, K], bias [C], cache [B, K-1, C]
    or None (zeros) -> y [B, T, C] in x's dtype."""
    if x.shape[1] == 0:  # oneDNN takes no empty images; the shifted form returns [B, 0, C]
        return causal_conv_torch(x, weight, bias, cache)
    if cache is None:
        return _DepthwiseNHWC.apply(x, weight, bias, True)
    return _DepthwiseNHWC.apply(torch.cat([cache, x], dim=1), weight, bias, False)


def _depthwise(x: torch.Tensor, taps: torch.Tensor, bias, pad: int) -> torch.Tensor:
    """out[t] = bias + sum_i taps[:, i] * x[t + i - pad] (zeros outside x), for t < T + 2 pad
    - K + 1: x [B, T, C], taps [C, K] -> [B, T + 2 pad - K + 1, C]. x is read, and out
    written, as channels-last [B, C, 1, T] images: the layout of [B, T, C] in memory."""
    C, K = taps.shape
    images = x.contiguous().permute(0, 2, 1).unsqueeze(2)
    out = F.conv2d(images, taps.view(C, 1, 1, K), bias, padding=(0, pad), groups=C)
    return out.squeeze(2).permute(0, 2, 1)


class _DepthwiseNHWC(torch.autograd.Function):
    """y[:, t] = bias + sum_j p[:, t + j] * weight[:, j], with p = inputs preceded by K - 1
    zeros (zero_start) or p = inputs (their first K - 1 rows are the cache).
    inputs [B, T_in, C], weight [C, K], bias [C] -> y [B, T, C], T = T_in (zero_start) or
    T_in - K + 1."""

    @staticmethod
    def forward(ctx, inputs, weight, bias, zero_start):
        ctx.save_for_backward(inputs, weight)
        ctx.zero_start = zero_start
        K = weight.shape[1]
        if not zero_start:
            return _depthwise(inputs, weight, bias, 0)
        # padding pads both ends: the K - 1 outputs past the end are dropped
        return _depthwise(inputs, weight, bias, K - 1)[:, : inputs.shape[1]]

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        inputs, weight = ctx.saved_tensors
        K = weight.shape[1]
        offset = K - 1 if ctx.zero_start else 0  # inputs[:, i] is p[:, i + offset]
        d_inputs = d_weight = d_bias = None
        if ctx.needs_input_grad[0]:
            # dp[s] = sum_j dy[s - j] weight[:, j]: dy convolved with the reversed taps, at
            # all T + K - 1 positions of p; the inputs are the last T_in of them
            d_inputs = _depthwise(dy, weight.flip(1), None, K - 1)[:, offset:]
        if ctx.needs_input_grad[1]:
            d_weight = weight_gradient(dy, inputs, K, offset)
        if ctx.needs_input_grad[2]:
            d_bias = dy.sum((0, 1))
        return d_inputs, d_weight, d_bias, None
