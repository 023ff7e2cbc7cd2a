"""Pieces shared by the Titans hybrids (MAC, MAG, MAL): attention branch, gate, window state.

* `AttentionBranch`: multi-head attention over [always-visible prefix ‖ cached past ‖ new
  tokens] at absolute stream positions (RoPE), through `titans_seq.attention.causal_attention`,
  restricted to a sliding window (MAG, MAL: `attend_window`, with its bounded cache) or to
  fixed segments (MAC). It returns the per-head outputs [B, T, H, d] (no output projection:
  the hybrid owns that).
* `gated_combine`: the non-linear gate of MAG and MAC, norm_a(a) * SiLU(norm_m(m)).
* `WindowHybridState`: the state of MAG and MAL (memory state + the window's keys/values).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import causal_attention
from ..nn.norm import RMSNorm
from ..nn.rotary import RotaryEmbedding
from .attention import project_qkv
from .neural_memory import NeuralMemoryState
from .state import MixerState


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

    def attend_window(
        self,
        h: torch.Tensor,
        state: WindowHybridState | None,
        persistent: torch.Tensor | None,
        window: int,
        backend: str,
    ):
        """Sliding-window attention of h [B, T, in_dim] over [persistent ‖ the cached past ‖
        h] -> (per-head outputs [B, T, H, d], keys and values for the next call's cache)."""
        position = 0 if state is None else state.position
        q, k, v = self.project(h, position)
        if state is not None and state.keys is not None:
            k = torch.cat((state.keys.to(k.dtype), k), dim=2)
            v = torch.cat((state.values.to(v.dtype), v), dim=2)
        prefix_k = prefix_v = None
        if persistent is not None:
            prefix_k, prefix_v = self.project_prefix(persistent.to(h.dtype))
        a = self.attend(
            q,
            k,
            v,
            prefix_k,
            prefix_v,
            position=position,
            window=window,
            segment_size=None,
            backend=backend,
        )
        keys, values = window_cache(k, v, window)
        return a, keys, values


def window_cache(k: torch.Tensor, v: torch.Tensor, window: int):
    """Keys/values [B, H, S, d] -> the last window - 1 (all that future queries can see).

    Cloned, so that the state does not keep the whole [S] tensor alive.
    """
    keep = min(window - 1, k.shape[2])
    start = k.shape[2] - keep
    return k[:, :, start:].clone(), v[:, :, start:].clone()


@dataclasses.dataclass
class WindowHybridState(MixerState):
    """State of "mag" and "mal".

    Attributes:
        memory: the NeuralMemory's state (conv cache, weights, momentum, partial chunk);
            constant size.
        keys, values: [B, H, S, d] the attention keys (qk-norm and RoPE applied) and values
            of the last S = min(position, window - 1) stream tokens; bounded by the window.
        prefix: (MAL, layout "two_layers") the attention's prefix tokens [B, N_p, D], made
            from the memory's reads at the persistent positions when the stream started;
            None otherwise.
    """

    memory: NeuralMemoryState | None = None
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    prefix: torch.Tensor | None = None
