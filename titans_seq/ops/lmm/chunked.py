"""Chunk-parallel PyTorch form of the Titans memory (the "dual form"; any device, autograd).

Inside a chunk every token's gradient is taken at the same weights W_(c), so the chunk's
gradients are computed with one batched forward/backward of the memory MLP. The per-token
weights are never materialised: unrolling the two linear recurrences of the chunk,

    S_t = eta_t S_{t-1} - theta_t u_t,       W_t = a_t W_{t-1} + S_t,      a_t = 1 - alpha_t,

from the chunk's start values (W_s, S_s) gives, for every layer's weight matrix,

    W_t = A_t W_s + b_t S_s - sum_{r<=t} M[t, r] theta_r u_r,
    A_t = prod_{j<=t} a_j,     b_t = sum_{s<=t} Da[t, s] P_s,     M = Da @ De,
    Da[t, s] = prod_{s<j<=t} a_j,   De[s, r] = prod_{r<j<=s} eta_j,   P_s = prod_{j<=s} eta_j.

Each u_r of a layer is an outer product delta_r h_r^T (backpropagated error x layer input),
so applying W_t to a retrieval activation x_t needs only matmuls over the chunk:

    W_t x_t = A_t (W_s x_t) + b_t (S_s x_t) - sum_r M[t, r] theta_r (h_r . x_t) delta_r.

The decay products are formed from differences of cumulative log-gate sums (always <= 0,
so exp never overflows); the derivation is written out in docs/architecture.md.
"""

from __future__ import annotations

import torch

from ...tracing import concrete_size
from .clip import clip_factor, rank_one_sq_norm
from .memory_mlp import activation_fn
from .state import MemoryState, fresh_state, state_dtype

_LOG_FLOOR = 1e-30  # gates are clamped here before log: a gate of exactly 0 stays finite


def _segment_decays(gate: torch.Tensor | None, n: int, like: torch.Tensor):
    """Decay products of a multiplicative gate over chunks of n tokens.

    gate: [..., n] or None (gate == 1); `like` gives the leading dims, dtype and device.
    Returns (D [..., n, n] with D[t, s] = prod_{s<j<=t} gate_j for s <= t else 0,
    P [..., n] with P[t] = prod_{j<=t} gate_j).
    """
    causal = torch.ones(n, n, dtype=torch.bool, device=like.device).tril()
    lead = like.shape[:-1]
    if gate is None:
        D = causal.to(like.dtype).expand(*lead, n, n)
        return D, torch.ones(*lead, n, dtype=like.dtype, device=like.device)
    cum = torch.cumsum(torch.log(gate.clamp_min(_LOG_FLOOR)), dim=-1)  # [..., n]
    diff = cum[..., :, None] - cum[..., None, :]
    D = torch.exp(torch.where(causal, diff, torch.full_like(diff, float("-inf"))))
    return D, torch.exp(cum)


def _chunk_decays(alpha: torch.Tensor | None, eta: torch.Tensor | None, like: torch.Tensor):
    """Every decay coefficient of the unrolled recurrences for chunks of n = like.shape[-1].

    alpha, eta: [..., n] (or None); like: [..., n]. Returns (A [..., n], M [..., n, n],
    b [..., n] or None, De_last [..., n] or None, P_last [...] or None); see the module
    docstring. Independent of the memory weights, so it is computed for all full chunks at
    once before the sequential loop.
    """
    n = like.shape[-1]
    Da, A = _segment_decays(None if alpha is None else 1 - alpha, n, like)
    if eta is None:
        # no momentum: S_t = -theta_t u_t, the carried momentum never contributes
        return A, Da, None, None, None
    De, P = _segment_decays(eta, n, like)
    b = (Da @ P.unsqueeze(-1)).squeeze(-1)
    return A, Da @ De, b, De[..., -1, :], P[..., -1]


def _chunk_gradients(Wg, k, v, act, dact):
    """Forward/backward of the memory MLP at weights Wg for a chunk of tokens.

    Wg: tuple of [B, H, out, in]; k, v: [B, H, n, d]. Returns (inputs, deltas): per layer the
    input activations h [B, H, n, in] and errors delta [B, H, n, out], so that the gradient of
    sum ||f(k_r) - v_r||^2 w.r.t. layer l at token r is delta_l[r] h_l[r]^T.
    """
    inputs, pre = [], []
    h = k
    for i, w in enumerate(Wg):
        inputs.append(h)
        z = h @ w.transpose(-1, -2)
        if i < len(Wg) - 1:
            pre.append(z)
            h = act(z)
        else:
            out = z
    deltas = [None] * len(Wg)
    delta = 2.0 * (out - v)
    for i in range(len(Wg) - 1, -1, -1):
        deltas[i] = delta
        if i > 0:
            delta = (delta @ Wg[i]) * dact(pre[i - 1])
    return inputs, deltas


def _run_chunk(state: MemoryState, q, k, v, theta, decays, act, dact, inner_grad_clip, trace):
    """Absorb one chunk segment (all its tokens within one chunk) and retrieve.

    q, k, v: [B, H, n, d]; theta: [B, H, n]; decays: `_chunk_decays` of the segment's gates;
    trace: None, or a list that receives the segment's (inner loss, squared inner-gradient
    norm), each [B, H, n]. Returns (y [B, H, n, d], weights after the segment, momentum after
    the segment, the weights its gradients used).
    """
    Wg = state.chunk_weights if state.offset > 0 else state.weights
    Ws, Ss = state.weights, state.momentum

    inputs, deltas = _chunk_gradients(Wg, k, v, act, dact)
    lr = theta
    sq_norm = None
    if inner_grad_clip is not None or trace is not None:
        # each layer's gradient is rank one: ||u_r||^2 from the chunk's deltas and inputs
        sq_norm = rank_one_sq_norm(deltas, inputs)
    if trace is not None:
        # the last layer's delta is 2 (f(k) - v): the inner loss is a quarter of its square
        trace.append((deltas[-1].pow(2).sum(-1) / 4, sq_norm))
    if inner_grad_clip is not None:
        lr = lr * clip_factor(sq_norm, inner_grad_clip)

    A, M, b, De_last, P_last = decays
    M_lr = M * lr.unsqueeze(-2)  # M[t, r] theta_r

    # retrieval through the per-token weights, layer by layer
    act_x = q
    for i, (w_s, s_s, h, delta) in enumerate(zip(Ws, Ss, inputs, deltas)):
        z = A.unsqueeze(-1) * (act_x @ w_s.transpose(-1, -2))
        if b is not None:
            z = z + b.unsqueeze(-1) * (act_x @ s_s.transpose(-1, -2))
        z = z - (M_lr * (act_x @ h.transpose(-1, -2))) @ delta
        act_x = act(z) if i < len(Ws) - 1 else z
    y = act_x

    # state at the end of the segment
    A_last, b_last, M_last = A[..., -1], None if b is None else b[..., -1], M_lr[..., -1, :]
    new_W, new_S = [], []
    for w_s, s_s, h, delta in zip(Ws, Ss, inputs, deltas):
        update = (delta * M_last.unsqueeze(-1)).transpose(-1, -2) @ h  # sum_r c_r delta_r h_r^T
        w = A_last[..., None, None] * w_s - update
        if b_last is not None:
            w = w + b_last[..., None, None] * s_s
        new_W.append(w)
        if De_last is None:
            s = -(delta[..., -1:, :] * lr[..., -1:, None]).transpose(-1, -2) @ h[..., -1:, :]
        else:
            coef = De_last * lr  # prod_{r<j<=n-1} eta_j theta_r
            s = P_last[..., None, None] * s_s - (delta * coef.unsqueeze(-1)).transpose(-1, -2) @ h
        new_S.append(s)
    return y, tuple(new_W), tuple(new_S), Wg


def lmm_memory_chunked(
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
    trace: list | None = None,
) -> tuple[torch.Tensor, MemoryState | None]:
    """Same contract as `lmm_memory_reference`; q, k, v: [B, T, H, d] -> y [B, T, H, d].

    trace: None, or a list that receives (inner loss, squared inner-gradient norm) per chunk
    segment, each [B, H, n] (what `trace.lmm_memory_trace` assembles).
    """
    B, T, H, d = q.shape
    out_dtype, dtype = q.dtype, state_dtype(q)
    act, dact = activation_fn(activation)
    state = initial_state if initial_state is not None else fresh_state(weights, B, dtype)

    # [B, T, H, ...] -> [B, H, T, ...] once, in the state precision
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    theta = theta.to(dtype).transpose(1, 2)
    eta = None if eta is None else eta.to(dtype).transpose(1, 2)
    alpha = None if alpha is None else alpha.to(dtype).transpose(1, 2)

    # segment boundaries: the first one may finish a chunk that an earlier call started
    T = concrete_size(T)  # Python ints under a trace too (see `concrete_size`)
    bounds, start, offset = [], 0, state.offset
    while start < T:
        end = min(T, start + chunk_size - offset)
        bounds.append((start, end))
        start, offset = end, 0
    # the decays of all full chunks in one batched computation ([B, H, n_chunks, C] gates)
    full = [i for i, (a, b) in enumerate(bounds) if b - a == chunk_size]
    if full:
        first, last = bounds[full[0]][0], bounds[full[-1]][1]  # full chunks are consecutive
        grid = theta.new_empty(B, H, len(full), chunk_size)

        def as_grid(gate):
            return None if gate is None else gate[:, :, first:last].reshape(grid.shape)

        # unbind (one backward node) rather than indexing per chunk, whose backward would
        # zero-fill the whole batched tensor once per chunk
        per_chunk = [
            [None] * len(full) if x is None else x.unbind(2)
            for x in _chunk_decays(as_grid(alpha), as_grid(eta), grid)
        ]

    # split (whose backward is one concatenation) rather than slice per segment: a slice's
    # backward zero-fills the whole input once per segment, quadratic in T
    lengths = [b - a for a, b in bounds]

    def pieces(x):
        return [None] * len(bounds) if x is None else x.split(lengths, dim=2)

    ys = []
    segments = zip(pieces(q), pieces(k), pieces(v), pieces(theta), pieces(alpha), pieces(eta))
    for i, (q_i, k_i, v_i, theta_i, alpha_i, eta_i) in enumerate(segments):
        if full and full[0] <= i <= full[-1]:
            decays = tuple(x[i - full[0]] for x in per_chunk)
        else:
            decays = _chunk_decays(alpha_i, eta_i, theta_i)
        y, W, S, Wg = _run_chunk(
            state, q_i, k_i, v_i, theta_i, decays, act, dact, inner_grad_clip, trace
        )
        ys.append(y)
        offset = (state.offset + lengths[i]) % chunk_size
        state = MemoryState(W, S, Wg if offset else W, offset)

    y = torch.cat(ys, dim=2).transpose(1, 2).to(out_dtype)
    return y, (state if output_final_state else None)
