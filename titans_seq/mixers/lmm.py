"""`lmm`: the Titans neural long-term memory alone, as a sequence mixer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import nn

from ..nn.norm import RMSNorm
from .memory_branch import gated_readout
from .memory_config import MemoryConfig
from .memory_mixer import MemoryMixer
from .neural_memory import NeuralMemoryState
from .registry import register_mixer
from .state import MixerState


@dataclasses.dataclass
class LMMState(MixerState):
    """memory: the NeuralMemory's state (conv cache, weights, momentum, chunk bookkeeping).
    Its size is constant in the stream length."""

    memory: NeuralMemoryState | None = None


@register_mixer("lmm")
class LMMMixer(MemoryMixer):
    """Titans LMM: x [B, T, D] -> y [B, T, D].

    N_p learned persistent tokens are prepended once, at the start of a stream (so they are
    absorbed by the memory like a learned prefix, and streaming equals one-shot); their
    outputs are dropped. The memory reads [B, T, H, d] go through a per-head RMSNorm, a
    SiLU gate computed from x, and an output projection.

    Options (all but `backend` fix the parameter shapes; `backend` only changes how the
    memory is computed, so a state dict loads across backends):
        head_dim: per-head width d (default dim // heads).
        num_persistent: persistent tokens N_p (0 = none).
        memory: the memory's options, a `MemoryConfig` or a mapping of its fields
            (chunk_size, depth, expansion, activation, conv_size, use_momentum,
            use_forgetting, theta_max, inner_grad_clip, damped_momentum, triton).
            `build_mixer` and recipes also take them flat (`chunk_size=32`,
            `memory_depth=1`).
        backend: "auto", "reference", "chunked", "torch", "compiled" or "triton".
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        num_persistent: int = 4,
        memory: MemoryConfig | Mapping | None = None,
        backend: str = "auto",
    ):
        super().__init__(dim, heads, head_dim, num_persistent)
        self.memory = self.make_memory(memory, backend)
        self.persistent = self.make_persistent()
        inner = self.heads * self.head_dim
        self.out_norm = RMSNorm(self.head_dim)
        self.out_gate = nn.Linear(dim, inner, bias=False)
        self.out_proj = nn.Linear(inner, dim, bias=False)

    def signature(self) -> tuple:
        return self.shape_signature("lmm")

    def mix(self, x: torch.Tensor, state: LMMState | None):
        B, T, _ = x.shape
        reads, memory = self.memory(x, None if state is None else state.memory, self.persistent)
        y = gated_readout(reads, x, self.out_norm, self.out_gate, self.out_proj)
        position = T if state is None else state.position + T
        return y, LMMState(self.signature(), B, position, memory)
