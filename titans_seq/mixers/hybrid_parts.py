"""Pieces shared by the Titans hybrids (MAC, MAG, MAL): attention branch, gate, MAG/MAL base.

* `AttentionBranch`: multi-head attention over [always-visible prefix ‖ cached past ‖ new
  tokens] at absolute stream positions (RoPE), through `titans_seq.attention.causal_attention`,
  restricted to a sliding window (MAG, MAL) or to fixed segments (MAC). It returns the
  per-head outputs [B, T, H, d] (no output projection: the hybrid owns that).
* `gated_combine`: the non-linear gate of MAG and MAC, norm_a(a) * SiLU(norm_m(m)).
* option checks with clear `ValueError`s;
* `WindowHybrid` / `WindowHybridState`: the construction and state shared by MAG and MAL
  (persistent tokens, NeuralMemory, windowed attention with its bounded cache).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import causal_attention
from ..attention import resolve_backend as resolve_attention_backend
from ..nn.norm import RMSNorm
from ..nn.rotary import RotaryEmbedding
from ..ops.lmm import resolve_backend as resolve_memory_backend
from .attention import project_qkv
from .base import SequenceMixer
from .neural_memory import NeuralMemory, NeuralMemoryState
from .state import MixerState


def check_int(name: str, value, minimum: int) -> None:
    """ValueError unless `value` is an int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {value!r}")


def resolve_head_dim(dim: int, heads: int, head_dim: int | None) -> int:
    check_int("heads", heads, 1)
    if head_dim is None:
        if dim % heads:
            raise ValueError(
                f"heads={heads} does not divide dim={dim}; pass head_dim explicitly or choose "
                "heads dividing dim"
            )
        return dim // heads
    check_int("head_dim", head_dim, 1)
    return head_dim


def check_backend(backend: str) -> None:
    """The backend must be valid for both the memory op and the attention primitive."""
    if not isinstance(backend, str):
        raise ValueError(f"backend must be a string, got {backend!r}")
    resolve_memory_backend(backend, torch.device("cpu"))  # ValueError listing the choices
    resolve_attention_backend(backend)


def gated_combine(a: torch.Tensor, m: torch.Tensor, norm_a: nn.Module, norm_m: nn.Module):
    """The hybrids' non-linear gate: norm_a(a) * SiLU(norm_m(m)), per head.

    a, m: [B, T, H, d] (attention branch, memory branch) -> [B, T, H * d]. Both norms carry
    learned per-channel scales (the paper's "learnable vector-valued weights").
    """
    B, T = a.shape[:2]
    return (norm_a(a) * F.silu(norm_m(m))).reshape(B, T, -1)


class AttentionBranch(nn.Module):
    """Multi-head causal attention, per-head outputs, with a prefix and a streaming cache.

    q, k, v = Linear(x) per head, optional qk-norm, RoPE at absolute stream positions on the
    stream tokens. Prefix tokens (persistent tokens, retrieved memory tokens) are given in
    the input space [.., N, in_dim]; they go through the same key/value projection (and
    k-norm) but get no rotation: they have no stream position and every query sees them.
    """

    def __init__(
        self,
        in_dim: int,
        heads: int,
        head_dim: int,
        rope_base: float | None,
        qk_norm: bool,
    ):
        super().__init__()
        if rope_base is not None and head_dim % 2:
            raise ValueError(
                f"rotary embedding needs an even head_dim, got {head_dim}; change heads/head_dim "
                "or pass rope_base=None"
            )
        self.heads, self.head_dim = heads, head_dim
        self.qkv_proj = nn.Linear(in_dim, 3 * heads * head_dim, bias=False)
        self.q_norm = RMSNorm(head_dim) if qk_norm else None
        self.k_norm = RMSNorm(head_dim) if qk_norm else None
        self.rotary = RotaryEmbedding(head_dim, rope_base) if rope_base is not None else None
        nn.init.normal_(self.qkv_proj.weight, std=in_dim**-0.5)

    def project(self, x: torch.Tensor, position: int):
        """x [B, T, in_dim] at stream positions position… -> q, k, v [B, H, T, d]."""
        return project_qkv(self, x, position)

    def project_prefix(self, tokens: torch.Tensor):
        """tokens [N, in_dim] or [B, N, in_dim] -> keys, values [1 or B, H, N, d] (no RoPE)."""
        if tokens.dim() == 2:
            tokens = tokens.unsqueeze(0)
        B, N, _ = tokens.shape
        kv = self.qkv_proj(tokens).view(B, N, 3, self.heads, self.head_dim)[:, :, 1:]
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return k, v

    def attend(self, q, k, v, prefix_k, prefix_v, *, position, window, segment_size, backend):
        """-> [B, T, H, d]; k/v hold the cached past followed by the T new tokens."""
        y = causal_attention(
            q,
            k,
            v,
            prefix_k=prefix_k,
            prefix_v=prefix_v,
            position=position,
            window=window,
            segment_size=segment_size,
            backend=backend,
        )
        return y.transpose(1, 2)


def window_cache(k: torch.Tensor, v: torch.Tensor, window: int):
    """Keys/values [B, H, S, d] -> the last window - 1 (all that future queries can see).

    Cloned, so that the state does not keep the whole [S] tensor alive.
    """
    keep = min(window - 1, k.shape[2])
    start = k.shape[2] - keep
    return k[:, :, start:].clone(), v[:, :, start:].clone()


def prepend_persistent(x: torch.Tensor, persistent: torch.Tensor | None, fresh: bool):
    """At the start of a stream (fresh), prepend the persistent tokens [N_p, D] to x [B, T, D]."""
    if not fresh or persistent is None:
        return x
    prefix = persistent.to(x.dtype).unsqueeze(0).expand(x.shape[0], -1, -1)
    return torch.cat([prefix, x], dim=1)


@dataclasses.dataclass
class WindowHybridState(MixerState):
    """State of "mag" and "mal".

    Attributes:
        memory: the NeuralMemory's state (conv cache, weights, momentum, partial chunk);
            constant size.
        keys, values: [B, H, S, d] the attention keys (qk-norm and RoPE applied) and values
            of the last S = min(position, window - 1) stream tokens; bounded by the window.
    """

    memory: NeuralMemoryState | None = None
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None


class WindowHybrid(SequenceMixer):
    """Common construction of "mag" and "mal": persistent tokens, memory, attention branch.

    The constructor (options and defaults documented on the two variants) is shared; each
    variant adds its output modules in `_build_output`."""

    kind = ""

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        window: int = 512,
        num_persistent: int = 4,
        chunk_size: int = 16,
        memory_depth: int = 2,
        memory_expansion: float = 1.0,
        activation: str = "silu",
        conv_size: int = 4,
        use_momentum: bool = True,
        use_forgetting: bool = True,
        theta_max: float | None = None,
        inner_grad_clip: float | str | None = "auto",
        damped_momentum: bool = True,
        rope_base: float | None = 10000.0,
        qk_norm: bool = False,
        backend: str = "auto",
    ):
        super().__init__(dim)
        head_dim = resolve_head_dim(dim, heads, head_dim)
        check_int("window", window, 1)
        check_int("num_persistent", num_persistent, 0)
        check_backend(backend)
        self.heads, self.head_dim = heads, head_dim
        self.window, self.num_persistent = window, num_persistent
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
            damped_momentum=damped_momentum,
            backend=backend,
        )
        self.attention = AttentionBranch(dim, heads, head_dim, rope_base, qk_norm)
        self.persistent = (
            nn.Parameter(torch.randn(num_persistent, dim) * 0.02) if num_persistent else None
        )
        self._backend = backend
        self._build_output(dim, heads * head_dim)

    def _build_output(self, dim: int, inner: int) -> None:
        """The variant's own modules after the shared ones (inner = H * d)."""
        raise NotImplementedError

    @property
    def backend(self) -> str:
        """Implementation of the Titans memory (and the attention path): "auto",
        "reference" or "torch"; never changes parameters or states."""
        return self._backend

    @backend.setter
    def backend(self, value: str) -> None:
        check_backend(value)
        self._backend = value
        self.memory.backend = value

    def signature(self) -> tuple:
        return (
            self.kind,
            self.dim,
            self.heads,
            self.head_dim,
            self.window,
            self.num_persistent,
            *self.memory.signature(),
        )

    def _memory_reads(self, x: torch.Tensor, state: WindowHybridState | None):
        """x [B, T, D] -> (memory reads [B, T, H, d], new memory state)."""
        x_mem = prepend_persistent(x, self.persistent, fresh=state is None)
        prefix = x_mem.shape[1] - x.shape[1]
        reads, memory = self.memory(x_mem, None if state is None else state.memory, prefix)
        return reads[:, prefix:], memory

    def _window_attention(self, h: torch.Tensor, state: WindowHybridState | None):
        """h [B, T, D] -> (per-head attention outputs [B, T, H, d], new keys, new values)."""
        position = 0 if state is None else state.position
        q, k, v = self.attention.project(h, position)
        if state is not None and state.keys is not None:
            k = torch.cat((state.keys.to(k.dtype), k), dim=2)
            v = torch.cat((state.values.to(v.dtype), v), dim=2)
        prefix_k = prefix_v = None
        if self.persistent is not None:
            prefix_k, prefix_v = self.attention.project_prefix(self.persistent.to(h.dtype))
        a = self.attention.attend(
            q,
            k,
            v,
            prefix_k,
            prefix_v,
            position=position,
            window=self.window,
            segment_size=None,
            backend=self._backend,
        )
        keys, values = window_cache(k, v, self.window)
        return a, keys, values

    def extra_repr(self) -> str:
        m = self.memory
        return (
            f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, "
            f"window={self.window}, num_persistent={self.num_persistent}, "
            f"chunk_size={m.chunk_size}, memory_depth={m.memory_depth}, backend={self._backend!r}"
        )
