"""The base of the mixers built around a `NeuralMemory`: "lmm", "mag", "mal" and "mac".

`MemoryMixer` owns what the four share: the head shape (`heads`, `head_dim`), the learned
persistent tokens (`num_persistent`), the memory with its options (`memory`, a
`MemoryConfig` or a mapping of its fields) and its `backend`, the state-signature prefix,
the FLOP count of the memory and the repr. `WindowHybrid` adds what MAG and MAL share: a
sliding-window attention branch (`window`, `rope_base`, `qk_norm`) and its
`attention_backend`.

A subclass creates its parameters in its own order, which fixes the initialisation at a
seed (saved models and published results depend on it): `make_memory`, `make_persistent`
and `AttentionBranch` are called where the subclass needs them.

Memory options given flat (`chunk_size=32`) are accepted where options are parsed
(`build_mixer`, recipes, saved models); a mixer class takes them under `memory=`.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from ..checks import check_int
from .base import SequenceMixer
from .checks import resolve_head_dim
from .hybrid_parts import AttentionBranch
from .memory_branch import AttentionBackend, MemoryBackend, check_backend, persistent_tokens
from .memory_config import MemoryConfig
from .neural_memory import NeuralMemory


class MemoryMixer(SequenceMixer):
    """A sequence mixer around a NeuralMemory. `__init__` checks and stores the shared shape
    options (dim D, heads H, per-head width d = head_dim or D / H, N_p = num_persistent);
    the subclass then builds its parts.

    `backend` ("auto", "reference", "chunked", "torch", "compiled", "triton") is read from
    and written to the memory; it never changes parameters or states.
    """

    backend = MemoryBackend()

    def __init__(self, dim: int, heads: int, head_dim: int | None, num_persistent: int):
        super().__init__(dim)
        self.heads, self.head_dim = heads, resolve_head_dim(dim, heads, head_dim)
        check_int("num_persistent", num_persistent, 0)
        self.num_persistent = num_persistent

    def make_memory(self, memory: MemoryConfig | Mapping | None, backend: str) -> NeuralMemory:
        """The mixer's NeuralMemory [B, T, D] -> reads [B, T, H, d] from `memory` (a
        MemoryConfig, a mapping of its fields, or None for the defaults)."""
        check_backend(backend)
        config = MemoryConfig.from_options(memory)
        return NeuralMemory(self.dim, self.heads, self.head_dim, config, backend=backend)

    def make_persistent(self) -> nn.Parameter | None:
        """The N_p learned persistent tokens [N_p, D] (N(0, 0.02^2)), or None when N_p = 0."""
        return persistent_tokens(self.num_persistent, self.dim)

    def shape_signature(self, kind: str, *options) -> tuple:
        """A state signature: the kind, the shape, the mixer's own `options`, the memory's."""
        shape = (self.dim, self.heads, self.head_dim)
        return (kind, *shape, *options, self.num_persistent, *self.memory.signature())

    def attention_flops(self, context: int) -> float:
        """Attention's score products per token for `context` visible keys: 12 H d each
        (QK^T and AV; the backward twice the forward)."""
        return 12.0 * self.heads * self.head_dim * context

    def flops_per_token(self, seq_len: int) -> float:
        """The memory's chunk products (see `NeuralMemory.flops_per_token`)."""
        return self.memory.flops_per_token(seq_len)

    def own_repr(self) -> str:
        """The subclass's own options for the repr ("" when none)."""
        return ""

    def extra_repr(self) -> str:
        m = self.memory
        own = self.own_repr()
        chosen = self.__dict__.get("attention_backend_choice")
        attention = "" if chosen is None else f", attention_backend={chosen!r}"
        return (
            f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, "
            + (f"{own}, " if own else "")
            + f"num_persistent={self.num_persistent}, chunk_size={m.chunk_size}, "
            f"memory_depth={m.memory_depth}, backend={m.backend!r}{attention}"
        )


class WindowHybrid(MemoryMixer):
    """MAG and MAL: the memory and a sliding-window attention branch over [persistent ‖ the
    last `window` stream tokens], built in this order (memory, attention, persistent tokens).

    attention_backend: "auto", "sdpa", "flex" or "reference" for the attention branch; None
    follows `backend` ("triton" -> "flex", the PyTorch memory backends -> "sdpa").
    """

    attention_backend = AttentionBackend()

    def __init__(
        self,
        dim: int,
        heads: int,
        head_dim: int | None,
        window: int,
        num_persistent: int,
        rope_base: float | None,
        qk_norm: bool,
        memory: MemoryConfig | Mapping | None,
        backend: str,
        attention_backend: str | None,
    ):
        super().__init__(dim, heads, head_dim, num_persistent)
        check_int("window", window, 1)
        self.window = window
        self.memory = self.make_memory(memory, backend)
        self.attention = AttentionBranch(dim, heads, self.head_dim, rope_base, qk_norm)
        self.persistent = self.make_persistent()
        self.attention_backend = attention_backend

    def flops_per_token(self, seq_len: int) -> float:
        """Attention over the window and the persistent prefix, and the memory's products."""
        context = min(seq_len, self.window) + self.num_persistent
        return self.attention_flops(context) + self.memory.flops_per_token(seq_len)
