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

from collections.abc import Mapping

import torch
from torch import nn

from ..nn.norm import RMSNorm
from .hybrid_parts import WindowHybridState, gated_combine
from .memory_config import MemoryConfig
from .memory_mixer import WindowHybrid
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
        rope_base: rotary base of the attention branch (None = no positional encoding).
        qk_norm: RMSNorm of attention queries/keys per head.
        memory: the memory's options, a `MemoryConfig` or a mapping of its fields (as for
            "lmm"; `build_mixer` and recipes also take them flat).
        backend: "auto", "reference", "chunked", "torch", "compiled" or "triton": the
            implementation of the Titans memory; never changes the parameters.
        attention_backend: "auto", "sdpa", "flex" or "reference" for the attention branch;
            None (default) follows `backend` ("triton" -> "flex", the PyTorch memory
            backends -> "sdpa").

    State: `WindowHybridState` = memory state + the last window - 1 attention keys/values
    (bounded; does not grow with the stream).
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        window: int = 512,
        num_persistent: int = 4,
        rope_base: float | None = 10000.0,
        qk_norm: bool = False,
        memory: MemoryConfig | Mapping | None = None,
        backend: str = "auto",
        attention_backend: str | None = None,
    ):
        super().__init__(
            dim, heads, head_dim, window, num_persistent, rope_base, qk_norm, memory, backend,
            attention_backend,
        )  # fmt: skip
        head_dim, inner = self.head_dim, self.heads * self.head_dim
        self.attention_norm = RMSNorm(head_dim)
        self.memory_norm = RMSNorm(head_dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)

    def signature(self) -> tuple:
        return self.shape_signature("mag", self.window)

    def mix(self, x: torch.Tensor, state: WindowHybridState | None):
        B, T, _ = x.shape
        position = 0 if state is None else state.position
        a, keys, values = self.attention.attend_window(
            x, state, self.persistent, self.window, self.attention_backend
        )
        m, memory = self.memory(x, None if state is None else state.memory, self.persistent)
        y = self.out_proj(gated_combine(a, m.to(a.dtype), self.attention_norm, self.memory_norm))
        return y, WindowHybridState(self.signature(), B, position + T, memory, keys, values)

    def own_repr(self) -> str:
        return f"window={self.window}"


__all__ = ["MemoryAsGate", "WindowHybridState"]
