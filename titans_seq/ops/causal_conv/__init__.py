"""Causal depthwise 1-D convolution over [B, T, C] with a streaming cache.

    y, new_cache = causal_depthwise_conv(x, weight, bias, cache=None, backend="auto")

Backends compute the same function:

* "reference": one output position at a time, the specification;
* "torch": K shifted multiply-adds with a hand-written backward (any device);
* "traceable": the same multiply-adds in plain differentiable operations (any device);
* "onednn": oneDNN's depthwise convolution on the tensor as it lies in memory, with a
  hand-written backward (CPU; about twice as fast as "torch" there);
* "triton": one forward and one backward kernel (CUDA; CPU only under the Triton
  interpreter, TRITON_INTERPRET=1), fp32 accumulation;
* "auto": "triton" for CUDA tensors of float32, float16 or bfloat16 when triton imports,
  "onednn" for CPU tensors when PyTorch has oneDNN, else "torch"; under a user's
  `torch.compile`, "traceable", which the compiler fuses into the kernels around it.
"""

from __future__ import annotations

import functools

import torch

from .onednn_backend import causal_conv_onednn
from .reference import causal_conv_reference
from .torch_backend import causal_conv_torch, causal_conv_traceable

BACKENDS = ("auto", "reference", "torch", "traceable", "onednn", "triton")
_BACKEND_FUNCTIONS = {
    "reference": causal_conv_reference,
    "torch": causal_conv_torch,
    "traceable": causal_conv_traceable,
    "onednn": causal_conv_onednn,
}
_TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def _triton_conv():
    """The Triton form, or None when triton does not import."""
    try:
        from .triton_kernels import causal_conv_triton
    except ImportError:
        return None
    return causal_conv_triton


def causal_depthwise_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    cache: torch.Tensor | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """y[b, t, c] = bias[c] + sum_{j<K} weight[c, j] * p[b, t + j, c] with p = [cache; x].

    x: [B, T, C]; weight: [C, K]; bias: [C]; cache: [B, K-1, C], the K - 1 inputs before x
    (None: zeros, the start of a stream). Weight, bias and cache are cast to x's dtype.
    Returns y [B, T, C] and the new cache [B, K-1, C] (the last K - 1 rows of p).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if x.dim() != 3 or weight.dim() != 2 or weight.shape[0] != x.shape[2]:
        raise ValueError(
            f"expected x [B, T, C] and weight [C, K], got {tuple(x.shape)} and "
            f"{tuple(weight.shape)}"
        )
    B, T, C = x.shape
    K = weight.shape[1]
    if cache is not None:
        if cache.shape != (B, K - 1, C):
            raise ValueError(
                f"cache must be [B, K-1, C] = {(B, K - 1, C)}, got {tuple(cache.shape)}"
            )
        cache = cache.to(x.dtype)
    weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    y = _conv_function(backend, x)(x, weight, bias, cache)
    start = cache if cache is not None else x.new_zeros(B, K - 1, C)
    tail = torch.cat([start, x[:, max(0, T - (K - 1)) :]], dim=1)  # [B, K-1 + min(T, K-1), C]
    return y, tail[:, tail.shape[1] - (K - 1) :]


def _conv_function(backend: str, x: torch.Tensor):
    """The function that computes `backend` for x."""
    if backend == "auto":
        backend = "traceable" if torch.compiler.is_compiling() else _auto_backend(x)
    if backend == "triton":
        conv = _triton_conv()
        if conv is None:
            raise RuntimeError("backend='triton' needs the triton package")
        return conv
    if backend == "onednn" and x.device.type != "cpu":
        raise ValueError(f"backend='onednn' takes CPU tensors, got {x.device.type}")
    return _BACKEND_FUNCTIONS[backend]


def _auto_backend(x: torch.Tensor) -> str:
    if x.is_cuda and x.dtype in _TRITON_DTYPES and _triton_conv() is not None:
        return "triton"
    if x.device.type == "cpu" and torch.backends.mkldnn.is_available():
        return "onednn"
    return "torch"
