"""`mag`: Titans memory as a gate (paper section 4.2).

Two branches on the same input x [B, T, D], combined by a non-linear gate:

    attention branch: sliding-window attention over [N_p persistent tokens ‖ the last
                      `window` stream tokens]  -> a [B, T, H, d]
    memory branch:    the neural memory (NeuralMemory) over [N_p persistent tokens ‖ x]
                      (persistent tokens absorbed once, at the start of the stream; their
                      outputs dropped)          -> m [B, T, H, d]
    y = out_proj( RMSNorm(a) * SiLU(RMSNorm(m)) )

The persistent tokens are one learned set [N_p, D] shared by the two branches (the paper's
x~ = [p ‖ x] feeds both): the attention sees them through its key/value projection as an
always-visible prefix, the memory absorbs them like a learned prefix of the stream.
"""

from __future__ import annotations

import torch
from torch import nn

from ..nn.norm import RMSNorm
from .hybrid_parts import WindowHybrid, WindowHybridState, gated_combine
from .registry import register_mixer


@register_mixer("mag")
class MemoryAsGate(WindowHybrid):
    """Titans MAG: sliding-window attention and the neural memory in parallel, gated.

    x [B, T, D] -> y [B, T, D] with
        a = SWA([persistent ‖ x])      (window `window`, persistent prefix always visible)
        m = NeuralMemory([persistent ‖ x])
        y = out_proj( RMSNorm(a) * SiLU(RMSNorm(m)) )     (per head, learned norm scales)

    Args:
        dim, heads, head_dim: width D, heads H, per-head width d (default D / H).
        window: tokens each query sees in the attention branch, itself included (default
            512; any positive value, also longer than the sequence).
        num_persistent: N_p learned persistent tokens (0 = none).
        chunk_size, memory_depth, memory_expansion, activation, conv_size, use_momentum,
            use_forgetting, theta_max, inner_grad_clip, damped_momentum: the memory's options
            (as for "lmm").
        rope_base: rotary base of the attention branch (None = no positional encoding).
        qk_norm: RMSNorm of attention queries/keys per head.
        backend: "auto", "reference" or "torch": the implementation of the Titans memory
            (also passed to the attention primitive); never changes the parameters.

    State: `WindowHybridState` = memory state + the last window - 1 attention keys/values
    (bounded; does not grow with the stream).
    """

    kind = "mag"

    def _build_output(self, dim: int, inner: int) -> None:
        """The gate's norms and the output projection (inner = H * d)."""
        self.attention_norm = RMSNorm(self.head_dim)
        self.memory_norm = RMSNorm(self.head_dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)

    def mix(self, x: torch.Tensor, state: WindowHybridState | None):
        B, T, _ = x.shape
        position = 0 if state is None else state.position
        a, keys, values = self._window_attention(x, state)
        m, memory = self._memory_reads(x, state)
        y = self.out_proj(gated_combine(a, m.to(a.dtype), self.attention_norm, self.memory_norm))
        return y, WindowHybridState(self.signature(), B, position + T, memory, keys, values)


__all__ = ["MemoryAsGate", "WindowHybridState"]
