"""One token through the memory without the chunk machinery: the decode step.

Generating text feeds the memory one token per call. The chunk-parallel forms would build
decay matrices, chunk products and a sequential loop for a chunk of one; here the token's
inner gradient is written out directly. For every memory layer it is rank one,
u = delta h^T (the layer's back-propagated error times its input, both at the chunk's
weights W_(c)), so the step is

    S = eta S - theta * clip * delta h^T,     W = (1 - alpha) W + S,     y = f_W(q)

(W = (1 - alpha) W + alpha W_0 + S when the memory forgets toward its initial weights)

with a few small matmuls per layer. The reference (`reference.py`) defines the same
function token by token through autograd; `tests/ops/test_lmm_decode.py` compares them.
"""

from __future__ import annotations

import torch

from .anchor import anchor_weights
from .clip import clip_factor, rank_one_sq_norm
from .memory_mlp import activation_fn, inner_pass, mlp_apply
from .state import MemoryState, final_state, fresh_state, state_dtype


def lmm_memory_step(
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
    """`lmm_memory` for a single token (T = 1), with the same arguments.

    q, k, v: [B, 1, H, d]; theta/eta/alpha: [B, 1, H] (eta/alpha None: off); weights: tuple
    of [H, out, in]. Returns y [B, 1, H, d] in the dtype of q, and the state after the
    token. Differentiable by autograd (it is a few tensor operations).
    """
    if q.shape[1] != 1:
        raise ValueError(f"lmm_memory_step takes one token (T = 1), got T = {q.shape[1]}")
    B = q.shape[0]
    out_dtype, dtype = q.dtype, state_dtype(q)
    state = initial_state if initial_state is not None else fresh_state(weights, B, dtype)
    # a new chunk starts at offset 0: its gradients are taken at the current weights
    chunk_weights = state.weights if state.offset == 0 else state.chunk_weights
    act, dact = activation_fn(activation)

    def one(x):  # [B, 1, H, ...] -> [B, H, 1, ...] in the state's precision
        return None if x is None else x.to(dtype).transpose(1, 2)

    q, k, v, theta, eta, alpha = (one(x) for x in (q, k, v, theta, eta, alpha))
    # per layer: inputs h [B, H, 1, in] and errors delta [B, H, 1, out] at W_(c)
    inputs, _, deltas = inner_pass(chunk_weights, k, v, act, dact)
    lr = theta  # [B, H, 1]
    if inner_grad_clip is not None:
        lr = lr * clip_factor(rank_one_sq_norm(deltas, inputs), inner_grad_clip)
    anchor = anchor_weights(weights, dtype, forget_toward, alpha)
    new_w, new_s = [], []
    for i, (w, s, h, delta) in enumerate(zip(state.weights, state.momentum, inputs, deltas)):
        update = (lr.unsqueeze(-1) * delta).transpose(-1, -2) @ h  # [B, H, out, in]
        s = -update if eta is None else eta.unsqueeze(-1) * s - update
        if alpha is None:
            w = w + s
        else:
            a = alpha.unsqueeze(-1)  # [B, H, 1, 1]
            w = (1 - a) * w + s + (0 if anchor is None else a * anchor[i])
        new_w.append(w)
        new_s.append(s)
    y = mlp_apply(new_w, q[:, :, 0], activation)  # [B, H, d]
    y = y.unsqueeze(1).to(out_dtype)
    if not output_final_state:
        return y, None
    return y, final_state(new_w, new_s, chunk_weights, (state.offset + 1) % chunk_size)
