"""Token-by-token executable specification of the Titans long-term memory.

This is the ground truth every other backend is tested against: one token at a time, the
inner gradient taken by autograd (not by the hand-derived formulas of the fast paths).

Per head, for token t in chunk c (chunk boundaries at absolute stream positions):
    u_t = grad_W || f_W(k_t) - v_t ||^2  at W = W_(c), the weights entering chunk c
    (optionally u_t *= min(1, clip / ||u_t||))
    S_t = eta_t * S_{t-1} - theta_t * u_t           (momentum / "surprise"; S_{-1} = 0)
    W_t = (1 - alpha_t) * W_{t-1} + S_t             (forgetting toward zero, the paper's)
    W_t = (1 - alpha_t) * W_{t-1} + alpha_t W_0 + S_t   (forget_toward="initial": toward the
                                                     learned initial weights W_0)
    y_t = f_{W_t}(q_t)                              (retrieval after absorbing token t)
"""

from __future__ import annotations

import torch

from .anchor import anchor_weights
from .clip import clip_factor
from .memory_mlp import mlp_apply
from .state import MemoryState, final_state, fresh_state, state_dtype


def _inner_gradients(weights, k, v, activation):
    """grad_W sum_i (f_W(k)_i - v_i)^2 per (batch, head) via autograd. k, v: [B, H, d]."""
    outer_grad = torch.is_grad_enabled()
    with torch.enable_grad():
        # a fresh view per weight: the gradient is the partial derivative w.r.t. W alone,
        # even when k or v were themselves computed from these weights (as in MAC)
        ws = [w.view_as(w) if w.requires_grad else w.detach().requires_grad_() for w in weights]
        loss = (mlp_apply(ws, k, activation) - v).pow(2).sum()
        grads = torch.autograd.grad(loss, ws, create_graph=outer_grad)
    return grads if outer_grad else tuple(g.detach() for g in grads)


def lmm_memory_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights: tuple[torch.Tensor, ...],
    chunk_size: int = 16,
    initial_state: MemoryState | None = None,
    output_final_state: bool = False,
    activation: str = "silu",
    inner_grad_clip: float | None = None,
    forget_toward: str = "zero",
) -> tuple[torch.Tensor, MemoryState | None]:
    """q, k, v: [B, T, H, d]; theta/eta/alpha: [B, T, H] gate values (eta=None: no momentum,
    alpha=None: no forgetting); weights: tuple of [H, out, in], the initial weights W_0 (also
    the target of forgetting under forget_toward="initial"). Returns y [B, T, H, d]."""
    B, T, H, d = q.shape
    out_dtype, dtype = q.dtype, state_dtype(q)
    state = initial_state if initial_state is not None else fresh_state(weights, B, dtype)
    W, S, Wc, offset = (
        list(state.weights),
        list(state.momentum),
        list(state.chunk_weights),
        state.offset,
    )
    q, k, v, theta = q.to(dtype), k.to(dtype), v.to(dtype), theta.to(dtype)
    eta = None if eta is None else eta.to(dtype)
    alpha = None if alpha is None else alpha.to(dtype)

    anchor = anchor_weights(weights, dtype, forget_toward, alpha)
    ys = []
    for t in range(T):
        if offset == 0:
            Wc = list(W)  # a new chunk starts: its gradients are taken at the current weights
        grads = _inner_gradients(Wc, k[:, t], v[:, t], activation)
        lr = theta[:, t, :, None, None]  # [B, H, 1, 1]
        if inner_grad_clip is not None:
            sq_norm = sum(g.pow(2).sum(dim=(-2, -1)) for g in grads)  # [B, H]
            lr = lr * clip_factor(sq_norm, inner_grad_clip)[..., None, None]
        for i, g in enumerate(grads):
            S[i] = -lr * g if eta is None else eta[:, t, :, None, None] * S[i] - lr * g
            if alpha is None:
                W[i] = W[i] + S[i]
            else:
                a = alpha[:, t, :, None, None]
                W[i] = (1 - a) * W[i] + S[i] + (0 if anchor is None else a * anchor[i])
        ys.append(mlp_apply(W, q[:, t], activation))
        offset = (offset + 1) % chunk_size

    y = torch.stack(ys, dim=1).to(out_dtype)
    return y, (final_state(W, S, Wc, offset) if output_final_state else None)
