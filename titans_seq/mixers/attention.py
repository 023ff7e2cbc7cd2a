"""Attention baselines behind the mixer interface: full causal and sliding-window attention.

Both are Transformer++-style multi-head attention: a fused q/k/v projection, optional
qk-norm (RMSNorm over each head), rotary position embedding at absolute stream positions,
`titans_seq.attention.causal_attention`, and an output projection `out_proj` (the residual
output projection that `Backbone` scales at init).

Persistent tokens (`num_persistent` > 0) are learned key/value pairs per head that every
query sees, as in Titans' persistent memory. They are learned directly in key/value space
and carry no rotary position (they are not part of the stream); with qk-norm their keys are
normalized like all others.

Streaming state (`KVCacheState`): the keys (after qk-norm and RoPE) and values of past
tokens. "attention" keeps all of them (the cache grows with T); "swa" keeps only the last
window - 1, all that future queries can see, so its size is bounded.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..attention import causal_attention, resolve_backend
from ..nn.norm import RMSNorm
from ..nn.rotary import RotaryEmbedding
from .base import SequenceMixer
from .registry import register_mixer
from .state import MixerState


def project_qkv(layer: nn.Module, x: torch.Tensor, position: int):
    """x [B, T, in_dim] at stream positions position… -> q, k, v [B, H, T, d].

    `layer` holds `qkv_proj`, `heads`, `head_dim`, `q_norm`/`k_norm` (None = no qk-norm) and
    `rotary` (None = no RoPE): the attention mixers and the hybrids' attention branch.
    """
    B, T, _ = x.shape
    qkv = layer.qkv_proj(x).view(B, T, 3, layer.heads, layer.head_dim)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    if layer.q_norm is not None:
        q, k = layer.q_norm(q), layer.k_norm(k)
    if layer.rotary is not None:
        q, k = layer.rotary(q, position), layer.rotary(k, position)
    return q, k, v


@dataclasses.dataclass
class KVCacheState(MixerState):
    """State of the attention mixers.

    Attributes:
        keys: [B, H, S, d] keys of the last S stream tokens (qk-norm and RoPE applied).
        values: [B, H, S, d] their values.
    S = position for "attention"; S = min(position, window - 1) for "swa".
    """

    keys: torch.Tensor
    values: torch.Tensor


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class MultiHeadAttentionMixer(SequenceMixer):
    """Shared implementation of the "attention" and "swa" mixers; x [B, T, D] -> y [B, T, D].

    `window=None` means full causal attention with an unbounded cache.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        head_dim: int | None,
        window: int | None,
        num_persistent: int,
        qk_norm: bool,
        rope_base: float | None,
        bias: bool,
        backend: str,
    ):
        super().__init__(dim)
        _check_positive_int("heads", heads)
        if head_dim is None:
            if dim % heads:
                raise ValueError(
                    f"heads={heads} does not divide dim={dim}; pass head_dim explicitly or "
                    "choose heads dividing dim"
                )
            head_dim = dim // heads
        _check_positive_int("head_dim", head_dim)
        if window is not None:
            _check_positive_int("window", window)
        if isinstance(num_persistent, bool) or not isinstance(num_persistent, int):
            raise ValueError(
                f"num_persistent must be a non-negative integer, got {num_persistent!r}"
            )
        if num_persistent < 0:
            raise ValueError(f"num_persistent must be >= 0, got {num_persistent}")
        if rope_base is not None and head_dim % 2:
            raise ValueError(
                f"rotary embedding needs an even head_dim, got {head_dim}; "
                "change heads/head_dim or pass rope_base=None"
            )
        self.heads = heads
        self.head_dim = head_dim
        self.window = window
        self.num_persistent = num_persistent
        self.backend = backend
        resolve_backend(backend)  # fail at construction, not at the first forward

        inner = heads * head_dim
        self.qkv_proj = nn.Linear(dim, 3 * inner, bias=bias)
        self.out_proj = nn.Linear(inner, dim, bias=bias)
        self.q_norm = RMSNorm(head_dim) if qk_norm else None
        self.k_norm = RMSNorm(head_dim) if qk_norm else None
        self.rotary = RotaryEmbedding(head_dim, rope_base) if rope_base is not None else None
        if num_persistent:
            self.persistent_keys = nn.Parameter(torch.empty(heads, num_persistent, head_dim))
            self.persistent_values = nn.Parameter(torch.empty(heads, num_persistent, head_dim))
        else:
            self.persistent_keys = self.persistent_values = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Variance-preserving normal init; Backbone additionally scales out_proj by depth.
        nn.init.normal_(self.qkv_proj.weight, std=self.dim**-0.5)
        nn.init.normal_(self.out_proj.weight, std=(self.heads * self.head_dim) ** -0.5)
        for linear in (self.qkv_proj, self.out_proj):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)
        if self.persistent_keys is not None:
            # Small values: the prefix starts out as a near-neutral attention sink.
            nn.init.normal_(self.persistent_keys, std=0.02)
            nn.init.normal_(self.persistent_values, std=0.02)

    # -- SequenceMixer --------------------------------------------------------------------
    def signature(self) -> tuple:
        return (type(self).__name__, self.dim, self.heads, self.head_dim, self.window)

    def mix(self, x: torch.Tensor, state: KVCacheState | None) -> tuple[torch.Tensor, KVCacheState]:
        """x: [B, T, D] -> (y [B, T, D], KVCacheState)."""
        batch, num_new, _ = x.shape
        position = 0 if state is None else state.position
        q, k, v = self._project(x, position)
        if state is not None:
            k = torch.cat((state.keys.to(k.dtype), k), dim=2)
            v = torch.cat((state.values.to(v.dtype), v), dim=2)
        prefix_k, prefix_v = self._persistent_tokens(q.dtype)
        y = causal_attention(
            q,
            k,
            v,
            prefix_k=prefix_k,
            prefix_v=prefix_v,
            position=position,
            window=self.window,
            backend=self.backend,
        )
        y = self.out_proj(y.transpose(1, 2).reshape(batch, num_new, self.heads * self.head_dim))
        keys, values = self._cache(k, v)
        return y, KVCacheState(self.signature(), batch, position + num_new, keys, values)

    # -- pieces ---------------------------------------------------------------------------
    def _project(self, x: torch.Tensor, position: int):
        """x [B, T, D] -> q, k, v [B, H, T, d], with qk-norm and RoPE at stream positions."""
        return project_qkv(self, x, position)

    def _persistent_tokens(self, dtype: torch.dtype):
        """Prefix keys/values [1, H, P, d] (broadcast over the batch), or (None, None)."""
        if self.persistent_keys is None:
            return None, None
        keys = self.persistent_keys
        if self.k_norm is not None:
            keys = self.k_norm(keys)
        return keys.unsqueeze(0).to(dtype), self.persistent_values.unsqueeze(0).to(dtype)

    def _cache(self, k: torch.Tensor, v: torch.Tensor):
        """Keys/values [B, H, S + T, d] -> those future queries can still see."""
        if self.window is None:
            return k, v
        keep = min(self.window - 1, k.shape[2])
        start = k.shape[2] - keep
        # clone: a view would keep the whole [S + T] tensor alive and the state unbounded
        return k[:, :, start:].clone(), v[:, :, start:].clone()

    def flops_per_token(self, seq_len: int) -> float:
        """Attention scores: 12 H d per visible key (QK^T and AV forward 4 H d, backward
        twice that; the PaLM / nanoGPT convention, the causal mask not discounted)."""
        context = seq_len if self.window is None else min(seq_len, self.window)
        return 12.0 * self.heads * self.head_dim * (context + self.num_persistent)

    def extra_repr(self) -> str:
        parts = [f"dim={self.dim}", f"heads={self.heads}", f"head_dim={self.head_dim}"]
        if self.window is not None:
            parts.append(f"window={self.window}")
        if self.num_persistent:
            parts.append(f"num_persistent={self.num_persistent}")
        parts.append(f"qk_norm={self.q_norm is not None}")
        parts.append(f"rope={'off' if self.rotary is None else f'base {self.rotary.base:g}'}")
        if self.backend != "auto":
            parts.append(f"backend={self.backend!r}")
        return ", ".join(parts)


@register_mixer("attention")
class CausalSelfAttention(MultiHeadAttentionMixer):
    """Full causal multi-head attention (Transformer++): x [B, T, D] -> y [B, T, D].

    Args:
        dim: D.
        heads: number of heads H.
        head_dim: d per head (default D / H; heads must then divide D).
        qk_norm: RMSNorm q and k per head before RoPE (stabilizes training at scale).
        rope_base: rotary base, or None for no positional encoding.
        num_persistent: learned always-visible key/value tokens per head (0 = none).
        bias: biases in the q/k/v and output projections.
        backend: "auto", "sdpa"/"torch", "flex"/"triton" or "reference" (see
            `titans_seq.attention.causal_attention`); never changes the parameters.

    State: `KVCacheState` holding every past key/value (grows with T).
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        qk_norm: bool = False,
        rope_base: float | None = 10000.0,
        num_persistent: int = 0,
        bias: bool = False,
        backend: str = "auto",
    ):
        super().__init__(
            dim,
            heads=heads,
            head_dim=head_dim,
            window=None,
            num_persistent=num_persistent,
            qk_norm=qk_norm,
            rope_base=rope_base,
            bias=bias,
            backend=backend,
        )


@register_mixer("swa")
class SlidingWindowAttention(MultiHeadAttentionMixer):
    """Sliding-window causal attention: x [B, T, D] -> y [B, T, D].

    A token at stream position p attends to positions p - window + 1 … p, plus the
    `num_persistent` learned prefix tokens, which are always visible.

    Args:
        dim, heads, head_dim, qk_norm, rope_base, bias, backend: as for "attention".
        window: tokens each query sees, itself included (default 512; any positive value,
            also longer than the sequence).
        num_persistent: learned always-visible key/value tokens per head (0 = none).

    State: `KVCacheState` holding the last window - 1 keys/values (bounded size).
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        window: int = 512,
        num_persistent: int = 0,
        qk_norm: bool = False,
        rope_base: float | None = 10000.0,
        bias: bool = False,
        backend: str = "auto",
    ):
        if window is None:
            raise ValueError("swa needs a window (a positive integer); use 'attention' for none")
        super().__init__(
            dim,
            heads=heads,
            head_dim=head_dim,
            window=window,
            num_persistent=num_persistent,
            qk_norm=qk_norm,
            rope_base=rope_base,
            bias=bias,
            backend=backend,
        )


__all__ = [
    "CausalSelfAttention",
    "KVCacheState",
    "MultiHeadAttentionMixer",
    "SlidingWindowAttention",
]
