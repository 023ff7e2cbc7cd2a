"""`mal`: Titans memory as a layer (paper section 4.3, eq. 29-31): memory first, then
sliding-window attention on its output. Two layouts (`layout`):

"two_layers" (the default: the paper's stacking) and "one_block", which was the default
before models saved in LM format 4 (forecaster 5, DNA classifier and pretrained backbone 4;
older saves load with it). In the ablation of `benchmarks/studies/hybrid_variants.py` at today's
memory defaults "two_layers" is ahead on associative recall and passkey retrieval at every
length, inside the training length and beyond it.

"one_block", for input x (inside a `Backbone`, x = RMSNorm(s) of the block's residual
stream s):

    m = memory_out_proj( RMSNorm(NeuralMemory([persistent ‖ x])) * SiLU(memory_gate(x)) )
                                               (the "lmm" path; persistent outputs dropped)
    y = m + out_proj( SWA(RMSNorm(x + m)) )    (window `window`, persistent prefix visible)

Standing alone this is a memory layer followed by a pre-norm sliding-window attention layer,
both residual: x + y = h + SWA(RMSNorm(h)) with h = x + m. Inside a block it departs from
the paper's two layers in two places: the attention reads RMSNorm(RMSNorm(s) + m), the
normalised stream plus m, where two stacked layers would give RMSNorm(s + m); and its
always-visible prefix is the raw persistent tokens, not the memory layer's outputs there.

"two_layers" (`owns_pre_norm`, so a block hands over s itself):

    m = memory_out_proj( RMSNorm(NeuralMemory([persistent ‖ n])) * SiLU(memory_gate(n)) ),
        n = RMSNorm(s)                         (memory layer, own pre-norm)
    h = s + m                                  (its residual stream)
    y = m + out_proj( SWA(RMSNorm(h)) )        (pre-norm SWA layer over h)

so s + y = h + SWA(RMSNorm(h)) exactly, and the attention's prefix is the memory layer's
stream at the persistent positions, RMSNorm(p + m_p) (eq. 29-31: the attention reads
M([p ‖ x]), persistent positions included). m_p comes from the memory's reads at the
persistent positions when the stream starts; the state keeps the prefix for later calls.

In both, the N_p learned persistent tokens [N_p, D] are absorbed by the memory at the start
of the stream, and the prefix stays visible to every query (as in MAG; a sliding window over
the paper's sequence would hide it after `window` tokens).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..checks import check_choice
from ..nn.norm import RMSNorm
from .hybrid_parts import WindowHybridState
from .memory_branch import gated_readout
from .memory_config import MemoryConfig
from .memory_mixer import WindowHybrid
from .registry import register_mixer

LAYOUTS = ("one_block", "two_layers")


@register_mixer("mal")
class MemoryAsLayer(WindowHybrid):
    """Titans MAL: the neural memory, then sliding-window attention on its output.

    x [B, T, D] -> y [B, T, D] (see the module docstring for the exact composition).

    Args: as for "mag" (dim, heads, head_dim, window, num_persistent, rope_base, qk_norm,
    memory, backend, attention_backend), and
        layout: "two_layers" (the default: the paper's memory layer, then a pre-norm SWA
            layer on the residual stream) or "one_block" (both in one block; see the
            module docstring).

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
        layout: str = "two_layers",
        memory: MemoryConfig | Mapping | None = None,
        backend: str = "auto",
        attention_backend: str | None = None,
    ):
        check_choice("layout", layout, LAYOUTS)
        super().__init__(
            dim, heads, head_dim, window, num_persistent, rope_base, qk_norm, memory, backend,
            attention_backend,
        )  # fmt: skip
        head_dim, inner = self.head_dim, self.heads * self.head_dim
        # the memory layer's read-out (as in "lmm"), then the attention layer's pre-norm
        self.memory_norm = RMSNorm(head_dim)
        self.memory_gate = nn.Linear(dim, inner, bias=False)
        self.memory_out_proj = nn.Linear(inner, dim, bias=False)
        self.attention_input_norm = RMSNorm(dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)
        self.layout = layout
        self.owns_pre_norm = layout == "two_layers"
        # the memory layer's own pre-norm: the block hands over its raw stream
        self.memory_input_norm = RMSNorm(dim) if self.owns_pre_norm else None

    def signature(self) -> tuple:
        return self.shape_signature("mal", self.window, self.layout)

    def _memory_layer(self, n: torch.Tensor, reads: torch.Tensor) -> torch.Tensor:
        """The memory layer's output [B, T, D] from its input n [B, T, D] and the memory's
        reads [B, T, H, d] (the "lmm" read-out: norm, SiLU gate, projection)."""
        norm, gate, proj = self.memory_norm, self.memory_gate, self.memory_out_proj
        return gated_readout(reads.to(n.dtype), n, norm, gate, proj)

    def _two_layers_prefix(self, reads: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """ "two_layers" at the stream start: the attention prefix RMSNorm(p + m_p) [B, N_p,
        D] from the memory's reads at the persistent positions, reads [B, N_p, H, d], in the
        dtype and batch of the memory layer's input `like` [B, T, D]."""
        p = self.persistent.to(like.dtype).unsqueeze(0).expand(like.shape[0], -1, -1)
        return self.attention_input_norm(p + self._memory_layer(p, reads))

    def mix(self, x: torch.Tensor, state: WindowHybridState | None):
        B, T, _ = x.shape
        position = 0 if state is None else state.position
        if self.layout == "one_block":
            reads, memory = self.memory(x, None if state is None else state.memory, self.persistent)
            m, prefix, keep = self._memory_layer(x, reads), self.persistent, None
        else:  # the memory layer normalises the raw stream; its prefix is kept in the state
            n = self.memory_input_norm(x)
            fresh = state is None and self.persistent is not None
            reads, memory = self.memory(
                n, None if state is None else state.memory, self.persistent, fresh
            )
            if fresh:
                N_p = self.persistent.shape[0]
                keep = self._two_layers_prefix(reads[:, :N_p], n)
                reads = reads[:, N_p:]
            else:
                keep = None if state is None else state.prefix
            m, prefix = self._memory_layer(n, reads), keep
        a, keys, values = self.attention.attend_window(
            self.attention_input_norm(x + m), state, prefix, self.window, self.attention_backend
        )
        y = m + self.out_proj(a.reshape(B, T, -1))
        return y, WindowHybridState(self.signature(), B, position + T, memory, keys, values, keep)

    def own_repr(self) -> str:
        return f"window={self.window}, layout={self.layout!r}"


__all__ = ["MemoryAsLayer"]
