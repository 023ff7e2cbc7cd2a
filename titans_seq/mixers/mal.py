"""`mal`: Titans memory as a layer (paper section 4.3): memory first, then sliding-window
attention on its output.

    m = memory_out_proj( RMSNorm(NeuralMemory([persistent ‖ x])) * SiLU(memory_gate(x)) )
                                               (the "lmm" path; persistent outputs dropped)
    h = x + m                                  (the memory layer's residual stream)
    y = m + out_proj( SWA(RMSNorm(h)) )        (window `window`, persistent prefix visible)

so x + y = h + SWA(RMSNorm(h)): the mixer is exactly a memory layer followed by a pre-norm
sliding-window attention layer, both residual, as the paper stacks them; inside a
`Backbone` block the outer residual and pre-norm supply the memory layer's. The N_p learned
persistent tokens [N_p, D] are absorbed by the memory at the start of the stream and are the
always-visible prefix of the attention (through its key/value projection).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.norm import RMSNorm
from .base import SequenceMixer
from .hybrid_parts import (
    WindowHybridState,
    build_window_hybrid,
    hybrid_repr,
    window_hybrid_signature,
)
from .memory_branch import MemoryBackend
from .memory_config import MemoryConfig
from .registry import register_mixer


@register_mixer("mal")
class MemoryAsLayer(SequenceMixer):
    """Titans MAL: the neural memory, then sliding-window attention on its output.

    x [B, T, D] -> y [B, T, D] (see the module docstring for the exact composition).

    Args: as for "mag" (dim, heads, head_dim, window, num_persistent, rope_base, qk_norm,
    memory, backend).

    State: `WindowHybridState` = memory state + the last window - 1 attention keys/values
    (bounded; does not grow with the stream).
    """

    backend = MemoryBackend()

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        window: int = 512,
        num_persistent: int = 4,
        rope_base: float | None = 10000.0,
        qk_norm: bool = False,
        memory: MemoryConfig | None = None,
        backend: str = "auto",
        **memory_options,
    ):
        super().__init__(dim)
        build_window_hybrid(
            self,
            dim,
            heads,
            head_dim,
            window,
            num_persistent,
            rope_base,
            qk_norm,
            memory,
            backend,
            memory_options,
        )
        head_dim, inner = self.head_dim, self.heads * self.head_dim
        # the memory layer's read-out (as in "lmm"), then the attention layer's pre-norm
        self.memory_norm = RMSNorm(head_dim)
        self.memory_gate = nn.Linear(dim, inner, bias=False)
        self.memory_out_proj = nn.Linear(inner, dim, bias=False)
        self.attention_input_norm = RMSNorm(dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)

    def signature(self) -> tuple:
        return window_hybrid_signature(self, "mal")

    def mix(self, x: torch.Tensor, state: WindowHybridState | None):
        B, T, _ = x.shape
        position = 0 if state is None else state.position
        reads, memory = self.memory(x, None if state is None else state.memory, self.persistent)
        gated = self.memory_norm(reads.to(x.dtype)).reshape(B, T, -1) * F.silu(self.memory_gate(x))
        m = self.memory_out_proj(gated)
        a, keys, values = self.attention.attend_window(
            self.attention_input_norm(x + m), state, self.persistent, self.window, self.backend
        )
        y = m + self.out_proj(a.reshape(B, T, -1))
        return y, WindowHybridState(self.signature(), B, position + T, memory, keys, values)

    def flops_per_token(self, seq_len: int) -> float:
        """Attention scores (12 H d per visible key: QK^T and AV, backward twice the forward)
        and the memory's chunk products."""
        context = min(seq_len, self.window) + self.num_persistent
        return 12.0 * self.heads * self.head_dim * context + self.memory.flops_per_token(seq_len)

    def extra_repr(self) -> str:
        return hybrid_repr(self, f"window={self.window}")


__all__ = ["MemoryAsLayer"]
