"""The per-token inner-gradient clip, written once for every PyTorch backend.

The clip scales token t's learning rate by min(1, clip / ||u_t||). Written naively as
`clip / sqrt(sq).clamp_min(eps)` its derivative is NaN at ||u_t|| = 0 (the derivative of
sqrt at 0 is infinite, times a zero upstream gradient), which a zero input row (padding, a
zero-padded series) produces. Here the square root is only ever taken where the clip is
active (||u_t|| > clip > 0), so the factor and its gradient are finite for every finite or
infinite ||u_t||^2: the derivative is 0 where the clip is inactive, as it should be.
"""

from __future__ import annotations

import torch


def clip_factor(sq_norm: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, clip / sqrt(sq_norm)) elementwise, with finite gradients everywhere.

    sq_norm: [...] squared inner-gradient norms (>= 0); clip > 0. Returns [...] in (0, 1]
    (0 only for an infinite norm).
    """
    active = sq_norm > clip * clip
    safe = torch.where(active, sq_norm, torch.ones_like(sq_norm))
    return torch.where(active, clip * torch.rsqrt(safe), torch.ones_like(sq_norm))


def rank_one_sq_norm(deltas, inputs) -> torch.Tensor:
    """||u_r||^2 = sum_l ||delta_l[r]||^2 ||h_l[r]||^2 for per-layer rank-one gradients
    delta_l[r] h_l[r]^T. deltas, inputs: per layer [..., n, out] and [..., n, in] -> [..., n]."""
    return sum(d.pow(2).sum(-1) * h.pow(2).sum(-1) for d, h in zip(deltas, inputs))
