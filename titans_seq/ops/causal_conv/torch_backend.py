"""The causal depthwise convolution as K shifted multiply-adds with a hand-written
backward: the form for CPUs (and any device without Triton)."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def causal_conv_torch(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor | None = None
) -> torch.Tensor:
    """As `causal_conv_reference`: x [B, T, C], weight [C, K], bias [C], cache [B, K-1, C]
    or None -> y [B, T, C], computed in x's dtype."""
    B, _, C = x.shape
    K = weight.shape[1]
    if cache is None:
        cache = x.new_zeros(B, K - 1, C)
    padded = torch.cat([cache, x], dim=1)  # [B, K-1+T, C]
    return _ShiftedMultiplyAdd.apply(padded, weight, bias)


def causal_conv_traceable(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor | None = None
) -> torch.Tensor:
    """`causal_conv_torch` in plain differentiable operations: what "auto" takes under a
    user's `torch.compile`, which fuses the K multiply-adds (and their gradient) into the
    kernels around them; a hand-written autograd Function or a kernel launch would be a
    node the compiler cannot see into. Same arguments and result."""
    B, T, C = x.shape
    K = weight.shape[1]
    if cache is None:
        cache = x.new_zeros(B, K - 1, C)
    padded = torch.cat([cache, x], dim=1)  # [B, K-1+T, C]
    y = bias + padded[:, :T] * weight[:, 0]
    for j in range(1, K):
        y = y + padded[:, j : j + T] * weight[:, j]
    return y


class _ShiftedMultiplyAdd(torch.autograd.Function):
    """y[:, t] = bias + sum_j padded[:, t + j] * weight[:, j] for t < T = len - K + 1.

    For the small kernels used here this is several times faster than a grouped
    convolution on CPU. The hand-written backward accumulates the input gradient in one
    buffer; under autograd every shifted slice would allocate, zero and add a full-size
    gradient of its own. padded [B, K-1+T, C], weight [C, K], bias [C] -> y [B, T, C].
    """

    @staticmethod
    def forward(ctx, padded, weight, bias):
        K = weight.shape[1]
        T = padded.shape[1] - K + 1
        y = torch.addcmul(bias, padded[:, :T], weight[:, 0])
        for j in range(1, K):
            y.addcmul_(padded[:, j : j + T], weight[:, j])
        ctx.save_for_backward(padded, weight)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        padded, weight = ctx.saved_tensors
        K = weight.shape[1]
        T = dy.shape[1]
        dpadded = dweight = dbias = None
        if ctx.needs_input_grad[0]:
            dpadded = torch.zeros_like(padded)
            for j in range(K):
                dpadded[:, j : j + T].addcmul_(dy, weight[:, j])
        if ctx.needs_input_grad[1]:
            dweight = weight_gradient(dy, padded, K, offset=0)
        if ctx.needs_input_grad[2]:
            dbias = dy.sum((0, 1))
        return dpadded, dweight, dbias


def weight_gradient(dy: torch.Tensor, inputs: torch.Tensor, K: int, offset: int) -> torch.Tensor:
    """d weight[:, j] = sum_{b, t} dy[b, t] p[b, t + j], for inputs[:, i] = p[:, i + offset]
    and p zero before the inputs (offset = K - 1: a stream's start without a cache).
    dy [B, T, C], inputs [B, T_in, C] -> [C, K]. K multiply-and-sum passes: at the memory's
    sizes faster than a convolution's weight gradient (oneDNN's included)."""
    T = dy.shape[1]
    columns = []
    for j in range(K):
        lo = max(0, offset - j)  # the first t whose p[t + j] is an input
        if lo >= T:
            columns.append(dy.new_zeros(dy.shape[2]))
            continue
        start = lo + j - offset
        columns.append((dy[:, lo:] * inputs[:, start : start + T - lo]).sum((0, 1)))
    return torch.stack(columns, dim=1)
