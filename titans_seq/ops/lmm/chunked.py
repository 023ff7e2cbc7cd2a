"""The "chunked" backend: the chunk-parallel ("dual") form of the memory under autograd.

Inside a chunk every token's gradient is taken at the same weights W_(c), so a chunk's
gradients come from one batched forward/backward of the memory MLP, and the per-token
weights are never materialised (decays.py, segment_step.py). This backend walks a call's
segments with `segment_step.forward_segment` and lets autograd differentiate it: the
obvious fast form, any device, any memory depth. It is also what an outer `torch.compile`
traces (the other CPU backends' hand-written autograd Function cannot be traced), and
what the Triton backend's `backward="torch"` recomputes under autograd.
"""

from __future__ import annotations

import torch

from ...tracing import concrete_size
from .anchor import absolute, anchor_weights, deviation
from .memory_mlp import activation_fn
from .segment_step import forward_segment, split_segments
from .state import MemoryState, final_state, fresh_state, segment_lengths, state_dtype


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
    forget_toward: str = "zero",
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
    def prep(x):
        return None if x is None else x.to(dtype).transpose(1, 2)

    # Python ints under a trace too (see `concrete_size`); the entry offset as well: a
    # stream's offset varies between calls, so Dynamo would make it symbolic
    T, offset = concrete_size(T), concrete_size(state.offset)
    lengths = segment_lengths(T, chunk_size, offset)
    segments = split_segments(*(prep(x) for x in (q, k, v, theta, eta, alpha)), lengths, chunk_size)
    # forgetting toward W_0: the walk carries deviations from it (segment_step.py)
    base = anchor_weights(weights, dtype, forget_toward, alpha)
    W, S = deviation(state.weights, base), None if initial_state is None else state.momentum
    Wg = deviation(state.chunk_weights, base) if offset else W
    ys = []
    for seg in segments:
        # S = None: a fresh stream's zero entry momentum, whose products are skipped
        y, W_next, S, _ = forward_segment(
            seg, W, S, Wg, act, dact, inner_grad_clip, False, trace=trace, base=base
        )
        ys.append(y)
        last_Wg, W = Wg, W_next
        Wg = W  # every later segment starts a chunk: its gradients are taken at its entry
    y = torch.cat(ys, dim=2).transpose(1, 2).to(out_dtype)
    if not output_final_state:
        return y, None
    W, last_Wg = absolute(W, base), absolute(last_Wg, base)
    return y, final_state(W, S, last_Wg, (offset + T) % chunk_size)
