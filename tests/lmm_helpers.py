"""Inputs and error measures shared by the memory-op tests (reference, chunk-parallel,
compiled and Triton backends)."""

import torch
import torch.nn.functional as F


def make_inputs(
    B=2,
    T=16,
    H=2,
    d=4,
    depth=2,
    hidden=None,
    dtype=torch.float64,
    momentum=True,
    forgetting=True,
    requires_grad=False,
    seed=0,
    theta_max=0.3,
):
    """Random op inputs with gates in a range where the dynamics stay tame. The inner step
    that stays tame shrinks as the memory widens: with hidden 128 over 200 tokens the
    default theta_max 0.3 diverges (NaN in float64 too), so wide cases lower it."""
    g = torch.Generator().manual_seed(seed)
    hidden = hidden or d

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q = F.normalize(rnd(B, T, H, d), dim=-1)
    k = F.normalize(rnd(B, T, H, d), dim=-1)
    v = rnd(B, T, H, d)
    theta = theta_max * torch.rand(B, T, H, generator=g, dtype=torch.float64)
    eta = 0.9 * torch.rand(B, T, H, generator=g, dtype=torch.float64) if momentum else None
    alpha = 0.2 * torch.rand(B, T, H, generator=g, dtype=torch.float64) if forgetting else None
    widths = [d] + [hidden] * (depth - 1) + [d]
    weights = tuple(rnd(H, widths[i + 1], widths[i]) / widths[i] ** 0.5 for i in range(depth))
    tensors = [q, k, v, theta, eta, alpha, *weights]
    tensors = [None if t is None else t.to(dtype).requires_grad_(requires_grad) for t in tensors]
    return tensors[:6], tuple(tensors[6:])


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()
