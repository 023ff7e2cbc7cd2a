"""The memory model f_W: an MLP applied per (batch, head) with its own weights.

Weight convention (per head): depth 1: (W,) with W [d, d] and f(k) = W k; depth L >= 2:
(W_1 [h, d], W_2 [h, h], ..., W_L [d, h]) and f(k) = W_L act(... act(W_1 k)). Weights carry
arbitrary leading dims ([H, ...] for the learned initial weights, [B, H, ...] per stream).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ACTIVATIONS = ("silu", "gelu")


def activation_fn(name: str):
    """The non-linearity between memory layers and its derivative (for the analytic gradient)."""
    if name == "silu":

        def act(z):
            return F.silu(z)

        def dact(z):
            s = torch.sigmoid(z)
            return s * (1 + z * (1 - s))

    elif name == "gelu":
        # exact (erf) GELU: x * Phi(x); derivative Phi(x) + x * phi(x)
        def act(z):
            return F.gelu(z)

        def dact(z):
            cdf = 0.5 * (1 + torch.erf(z * 0.7071067811865476))
            pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
            return cdf + z * pdf

    else:
        raise ValueError(f"unknown memory activation {name!r}; choose one of {ACTIVATIONS}")
    return act, dact


def activation_second_derivative(name: str):
    """act''(z) of the memory activation (the adjoint of the inner backward needs it)."""
    if name == "silu":

        def ddact(z):
            s = torch.sigmoid(z)
            return s * (1 - s) * (2 + z * (1 - 2 * s))

    elif name == "gelu":

        def ddact(z):
            pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
            return pdf * (2 - z * z)

    else:
        raise ValueError(f"unknown memory activation {name!r}; choose one of {ACTIVATIONS}")
    return ddact


def inner_pass(weights, k: torch.Tensor, v: torch.Tensor, act, dact, dot=torch.matmul):
    """Forward and backward of the memory MLP at `weights` for a segment of tokens: what
    every token's inner gradient is made of.

    weights: tuple of [..., out, in]; k, v: [..., n, d]; act, dact: `activation_fn`; dot:
    the products' form (`operand_precision.operand_dot`).
    Returns (inputs, pre, deltas), per layer the input activations h [..., n, in], the
    pre-activations p [..., n, out] and the errors delta [..., n, out]: the gradient of
    ||f(k_r) - v_r||^2 w.r.t. layer l at token r is the rank-one delta_l[r] h_l[r]^T.
    """
    inputs, pre = [], []
    h = k
    for i, w in enumerate(weights):
        inputs.append(h)
        p = dot(h, w.transpose(-1, -2))
        pre.append(p)
        if i < len(weights) - 1:
            h = act(p)
    deltas = [None] * len(weights)
    delta = 2.0 * (pre[-1] - v)
    for i in range(len(weights) - 1, -1, -1):
        deltas[i] = delta
        if i > 0:
            delta = dot(delta, weights[i]) * dact(pre[i - 1])
    return inputs, pre, deltas


def mlp_apply(weights, x: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """f_W(x) for one token per weight set: weights [..., out, in], x [..., d] -> [..., d]."""
    act, _ = activation_fn(activation)
    h = x
    for i, w in enumerate(weights):
        h = torch.einsum("...ij,...j->...i", w, h)
        if i < len(weights) - 1:
            h = act(h)
    return h


def check_memory_weights(weights, num_heads: int, head_dim: int) -> tuple[int, int]:
    """Validate the initial weights of a memory; returns (depth, hidden width).

    weights: tuple of [H, out, in] tensors, chained d -> h -> ... -> h -> d.
    """
    if isinstance(weights, torch.Tensor):
        weights = (weights,)
    if not isinstance(weights, (tuple, list)) or len(weights) == 0:
        raise TypeError("weights must be a non-empty tuple of [H, out, in] tensors")
    depth = len(weights)
    hidden = weights[0].shape[-2] if depth > 1 else head_dim
    expected_in = head_dim
    for i, w in enumerate(weights):
        if not isinstance(w, torch.Tensor) or w.dim() != 3:
            raise ValueError(
                f"weights[{i}] must be a [H, out, in] tensor, got {getattr(w, 'shape', w)}"
            )
        out = head_dim if i == depth - 1 else hidden
        if tuple(w.shape) != (num_heads, out, expected_in):
            raise ValueError(
                f"weights[{i}] has shape {tuple(w.shape)}; expected "
                f"{(num_heads, out, expected_in)} for H={num_heads}, d={head_dim}, "
                f"depth={depth}, hidden={hidden}"
            )
        expected_in = out
    return depth, hidden
