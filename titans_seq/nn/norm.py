"""Norms over the last dimension: RMSNorm, and the l2 normalisation of the memory's keys and
queries. Each has a composite form (`*_reference`, what autograd differentiates and
`torch.compile` traces) and, for eager calls, the same function with a hand-written
backward: a few passes over x where autograd of the composite form takes a dozen or more."""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable


class RMSNorm(nn.Module):
    """y = x / rms(x) * weight, over the last dimension.

    Computed in float32 for half/bfloat16/float32 inputs and in float64 for float64 inputs
    (so float64 comparisons between implementations stay exact); x: [..., D] -> [..., D],
    same dtype as x.

    Eager calls run a hand-written backward (`rms_norm`): some eight passes over x where
    autograd of the composite form takes about twenty, and a norm sits before every mixer
    and channel mixer. Under `torch.compile` the composite form (`rms_norm_reference`) is
    traced, which the compiler fuses itself.
    """

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if elementwise_affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return rms_norm_reference(x, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """The composite form, differentiated by autograd: x [..., D], weight [D] or None."""
    compute = torch.promote_types(x.dtype, torch.float32)
    xc = x.to(compute)
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(compute)
    return y.to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """As `rms_norm_reference`, with a hand-written backward: x [..., D], weight [D] or None."""
    return _RMSNormFunction.apply(x, weight, eps)


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        compute = torch.promote_types(x.dtype, torch.float32)
        xc = x.to(compute)
        D = x.shape[-1]
        # 1 / rms [..., 1]: the norm is one pass over x, without a squared copy
        inv_rms = torch.rsqrt(
            torch.linalg.vector_norm(xc, dim=-1, keepdim=True).square_().div_(D).add_(eps)
        )
        y = xc * inv_rms
        if weight is not None:
            y.mul_(weight.to(compute))
        ctx.save_for_backward(x, weight, inv_rms)
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        # with x_hat = x / rms and g = dy * weight:
        #   dx = (g - x_hat mean(g x_hat)) / rms,   dweight = sum over rows of dy x_hat
        x, weight, inv_rms = ctx.saved_tensors
        compute = inv_rms.dtype
        D = x.shape[-1]
        dyc = dy.to(compute)
        x_hat = x.to(compute) * inv_rms
        g = dyc * weight.to(compute) if weight is not None else dyc
        dx = d_weight = None
        if ctx.needs_input_grad[0]:
            mean_g_x_hat = torch.linalg.vecdot(g, x_hat, dim=-1).unsqueeze(-1).div_(D)
            dx = torch.addcmul(g, x_hat, mean_g_x_hat, value=-1).mul_(inv_rms).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            d_weight = (dyc * x_hat).reshape(-1, D).sum(0).to(weight.dtype)
        return dx, d_weight, None


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / max(||x||, eps) over the last dim, in x's dtype (as F.normalize). x: [..., d].

    Computed in float32 for 16-bit inputs: eps^2 = 1e-12 is zero in float16. A vector
    shorter than eps (the zero query or key of a padded token) passes with no gradient:
    the function's slope there is 1/eps, a million-fold gain that means nothing for
    padding and overflows float16 gradients (and any loss scale).
    """
    if torch.compiler.is_compiling():
        return l2_normalize_reference(x, eps)
    return _L2NormalizeFunction.apply(x, eps)


def l2_normalize_reference(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The composite form of `l2_normalize`, differentiated by autograd. x: [..., d]."""
    compute = torch.promote_types(x.dtype, torch.float32)
    xc = x.to(compute)
    squared = xc.pow(2).sum(-1, keepdim=True)
    short = squared < eps * eps
    xc = torch.where(short, xc.detach(), xc)
    return (xc * torch.rsqrt(squared.clamp_min(eps * eps))).to(x.dtype)


class _L2NormalizeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        compute = torch.promote_types(x.dtype, torch.float32)
        xc = x.to(compute)
        squared = torch.linalg.vector_norm(xc, dim=-1, keepdim=True).square_()
        inv_norm = torch.rsqrt(squared.clamp_min(eps * eps))  # [..., 1]
        y = xc * inv_norm
        # the backward's row factor: 1 / ||x||, and 0 for a vector shorter than eps
        ctx.save_for_backward(y, inv_norm.masked_fill_(squared < eps * eps, 0.0))
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        # with y = x / ||x||:  dx = (dy - y (dy . y)) / ||x||
        y, row_factor = ctx.saved_tensors
        g = dy.to(y.dtype)
        along = torch.linalg.vecdot(g, y, dim=-1).unsqueeze(-1)
        return torch.addcmul(g, y, along, value=-1).mul_(row_factor).to(dy.dtype), None
