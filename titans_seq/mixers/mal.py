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
from .hybrid_parts import WindowHybrid, WindowHybridState
from .registry import register_mixer


@register_mixer("mal")
class MemoryAsLayer(WindowHybrid):
    """Titans MAL: the neural memory, then sliding-window attention on its output.

    x [B, T, D] -> y [B, T, D] (see the module docstring for the exact composition).

    Args: as for "mag" (dim, heads, head_dim, window, num_persistent, the memory options
    chunk_size, memory_depth, memory_expansion, activation, conv_size, use_momentum,
    use_forgetting, theta_max, inner_grad_clip, damped_momentum, the attention options
    rope_base, qk_norm, and backend).

    State: `WindowHybridState` = memory state + the last window - 1 attention keys/values
    (bounded; does not grow with the stream).
    """

    kind = "mal"

    def _build_output(self, dim: int, inner: int) -> None:
        """The memory layer's gate and projections, and the output projection (inner = H * d)."""
        self.memory_norm = RMSNorm(self.head_dim)
        self.memory_gate = nn.Linear(dim, inner, bias=False)
        self.memory_out_proj = nn.Linear(inner, dim, bias=False)
        self.attention_input_norm = RMSNorm(dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)

    def mix(self, x: torch.Tensor, state: WindowHybridState | None):
        B, T, _ = x.shape
        position = 0 if state is None else state.position
        reads, memory = self._memory_reads(x, state)
        gated = self.memory_norm(reads.to(x.dtype)).reshape(B, T, -1) * F.silu(self.memory_gate(x))
        m = self.memory_out_proj(gated)
        a, keys, values = self._window_attention(self.attention_input_norm(x + m), state)
        y = m + self.out_proj(a.reshape(B, T, -1))
        return y, WindowHybridState(self.signature(), B, position + T, memory, keys, values)


__all__ = ["MemoryAsLayer"]
