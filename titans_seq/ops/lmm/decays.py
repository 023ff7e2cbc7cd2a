"""The decay products of a chunk segment's gates, and their adjoint.

Inside a segment of n tokens the two linear recurrences of the memory,

    S_t = eta_t S_{t-1} - theta_t u_t,       W_t = a_t W_{t-1} + S_t,      a_t = 1 - alpha_t,

unroll from the segment's entry values (W_s, S_s) to

    W_t = A_t W_s + b_t S_s - sum_{r<=t} M[t, r] theta_r u_r,
    A_t = prod_{j<=t} a_j,     b_t = sum_{s<=t} Da[t, s] P_s,     M = Da @ De,
    Da[t, s] = prod_{s<j<=t} a_j,   De[s, r] = prod_{r<j<=s} eta_j,   P_s = prod_{j<=s} eta_j.

None of these depend on the memory weights, so every backend computes them for all full
chunks at once before its sequential walk. The products are formed from differences of
cumulative log-gate sums (always <= 0, so exp never overflows); docs/derivation.md writes
the derivation out.
"""

from __future__ import annotations

import dataclasses

import torch

LOG_FLOOR = 1e-30  # gates are clamped here before log: a gate of exactly 0 stays finite


def gate_products(gate: torch.Tensor | None, n: int, like: torch.Tensor):
    """Decay products of a multiplicative gate over segments of n tokens.

    gate: [..., n] or None (gate == 1); `like` gives the leading dims, dtype and device.
    Returns (D [..., n, n] with D[t, s] = prod_{s<j<=t} gate_j for s <= t else 0,
    P [..., n] with P[t] = prod_{j<=t} gate_j).
    """
    causal = torch.ones(n, n, dtype=torch.bool, device=like.device).tril()
    lead = like.shape[:-1]
    if gate is None:
        D = causal.to(like.dtype).expand(*lead, n, n)
        return D, torch.ones(*lead, n, dtype=like.dtype, device=like.device)
    cum = torch.cumsum(torch.log(gate.clamp_min(LOG_FLOOR)), dim=-1)  # [..., n]
    diff = cum[..., :, None] - cum[..., None, :]
    D = torch.exp(torch.where(causal, diff, torch.full_like(diff, float("-inf"))))
    return D, torch.exp(cum)


@dataclasses.dataclass
class Decays:
    """Decay products of one segment's gates ([..., n] and [..., n, n])."""

    Da: torch.Tensor  # prod_{s<j<=t} a_j (lower triangular), a = 1 - alpha
    A: torch.Tensor  # prod_{j<=t} a_j
    De: torch.Tensor | None  # prod_{r<j<=s} eta_j (None without momentum)
    P: torch.Tensor | None  # prod_{j<=s} eta_j
    M: torch.Tensor  # Da @ De (Da without momentum)
    b: torch.Tensor | None  # Da @ P


def segment_decays(alpha: torch.Tensor | None, eta: torch.Tensor | None, like) -> Decays:
    """Every decay product of a segment: alpha, eta [..., n] (None: off); like [..., n]
    gives the shape, dtype and device."""
    n = like.shape[-1]
    Da, A = gate_products(None if alpha is None else 1 - alpha, n, like)
    if eta is None:
        # no momentum: S_t = -theta_t u_t, the carried momentum never contributes
        return Decays(Da, A, None, None, Da, None)
    De, P = gate_products(eta, n, like)
    return Decays(Da, A, De, P, Da @ De, (Da @ P.unsqueeze(-1)).squeeze(-1))


def decays_backward(dec: Decays, alpha, eta, dA, dM, db, dP, dDe):
    """Gradients of alpha and eta ([..., n]) from those of A, M, b, P and De."""
    dalpha = deta = None
    if dec.De is not None:
        dDa = dM @ dec.De.transpose(-1, -2) + db.unsqueeze(-1) * dec.P.unsqueeze(-2)
        dDe = dDe + dec.Da.transpose(-1, -2) @ dM
        dP = dP + (dec.Da * db.unsqueeze(-1)).sum(-2)
        Y = dDe * dec.De
        dcum = Y.sum(-1) - Y.sum(-2) + dP * dec.P
        dlog = dcum.flip(-1).cumsum(-1).flip(-1)  # reverse cumulative sum
        deta = torch.where(eta > LOG_FLOOR, dlog / eta, torch.zeros_like(eta))
    else:
        dDa = dM
    if alpha is not None:
        X = dDa * dec.Da
        dcum = X.sum(-1) - X.sum(-2) + dA * dec.A
        dlog = dcum.flip(-1).cumsum(-1).flip(-1)
        keep = 1 - alpha
        dalpha = torch.where(keep > LOG_FLOOR, -dlog / keep, torch.zeros_like(keep))
    return dalpha, deta
