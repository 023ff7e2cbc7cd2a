"""`lmm`: the Titans neural long-term memory alone, as a sequence mixer."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.norm import RMSNorm
from .base import SequenceMixer
from .hybrid_parts import prepend_persistent
from .neural_memory import NeuralMemory, NeuralMemoryState
from .registry import register_mixer
from .state import MixerState


@dataclasses.dataclass
class LMMState(MixerState):
    """memory: the NeuralMemory's state (conv cache, weights, momentum, chunk bookkeeping).
    Its size is constant in the stream length."""

    memory: NeuralMemoryState | None = None


@register_mixer("lmm")
class LMMMixer(SequenceMixer):
    """Titans LMM: x [B, T, D] -> y [B, T, D].

    N_p learned persistent tokens are prepended once, at the start of a stream (so they are
    absorbed by the memory like a learned prefix, and streaming equals one-shot); their
    outputs are dropped. The memory reads [B, T, H, d] go through a per-head RMSNorm, a
    SiLU gate computed from x, and an output projection.

    Options (all but `backend` fix the parameter shapes; `backend` only changes how the
    memory is computed, so a state dict loads across backends):
        head_dim: per-head width d (default dim // heads).
        chunk_size: tokens per inner mini-batch (default 16).
        memory_depth: layers of the memory MLP (1 = linear memory).
        memory_expansion: hidden width of the memory MLP as a multiple of d.
        activation: "silu" or "gelu" between memory layers.
        conv_size: depthwise causal conv kernel on q/k/v (0 or 1 = no conv).
        num_persistent: persistent tokens N_p (0 = none).
        use_momentum / use_forgetting: the paper's ablations.
        theta_max: upper bound of a token's total write theta_t / (1 - eta_t) (default None:
            1 / chunk_size, which keeps the step of a whole chunk stable).
        inner_grad_clip: safety bound on each token's inner-gradient norm ("auto", the
            default: 2 sqrt(head_dim), active on a few percent of writes; None = off).
        damped_momentum: theta_t = theta_max sigmoid(.) (1 - eta_t) (default) instead of
            theta_max sigmoid(.): a momentum near 1 then slows the memory instead of
            amplifying its writes.
        backend: "auto", "reference", "torch" or "triton".
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        chunk_size: int = 16,
        memory_depth: int = 2,
        memory_expansion: float = 1.0,
        activation: str = "silu",
        conv_size: int = 4,
        num_persistent: int = 4,
        use_momentum: bool = True,
        use_forgetting: bool = True,
        theta_max: float | None = None,
        inner_grad_clip: float | str | None = "auto",
        backend: str = "auto",
        damped_momentum: bool = True,
    ):
        super().__init__(dim)
        if num_persistent < 0:
            raise ValueError(f"num_persistent must be >= 0, got {num_persistent}")
        self.memory = NeuralMemory(
            dim,
            heads,
            head_dim,
            chunk_size=chunk_size,
            memory_depth=memory_depth,
            memory_expansion=memory_expansion,
            activation=activation,
            conv_size=conv_size,
            use_momentum=use_momentum,
            use_forgetting=use_forgetting,
            theta_max=theta_max,
            inner_grad_clip=inner_grad_clip,
            backend=backend,
            damped_momentum=damped_momentum,
        )
        self.heads, self.head_dim = self.memory.heads, self.memory.head_dim
        self.num_persistent = num_persistent
        self.persistent = (
            nn.Parameter(torch.randn(num_persistent, dim) * 0.02) if num_persistent else None
        )
        inner = self.heads * self.head_dim
        self.out_norm = RMSNorm(self.head_dim)
        self.out_gate = nn.Linear(dim, inner, bias=False)
        self.out_proj = nn.Linear(inner, dim, bias=False)

    @property
    def backend(self) -> str:
        return self.memory.backend

    @backend.setter
    def backend(self, value: str) -> None:
        self.memory.backend = value

    def signature(self) -> tuple:
        return (
            "lmm",
            self.dim,
            self.heads,
            self.head_dim,
            self.num_persistent,
            *self.memory.signature(),
        )

    def mix(self, x: torch.Tensor, state: LMMState | None):
        B, T, _ = x.shape
        x_mem = prepend_persistent(x, self.persistent, fresh=state is None)
        prefix = x_mem.shape[1] - T
        reads, memory = self.memory(x_mem, None if state is None else state.memory, prefix)
        reads = reads[:, prefix:]  # drop the persistent positions
        y = self.out_norm(reads).reshape(B, T, -1) * F.silu(self.out_gate(x))
        y = self.out_proj(y)
        position = T if state is None else state.position + T
        return y, LMMState(self.signature(), B, position, memory)

    def extra_repr(self) -> str:
        m = self.memory
        return (
            f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, "
            f"chunk_size={m.chunk_size}, memory_depth={m.memory_depth}, "
            f"num_persistent={self.num_persistent}, backend={m.backend!r}"
        )
