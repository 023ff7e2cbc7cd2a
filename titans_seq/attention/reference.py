"""Explicit-softmax attention: the executable specification the fast paths are tested against.

Materializes the full [B, H, T, P + K] score matrix, so it is only meant for tests and small
inputs. Argument conventions are those of `titans_seq.attention.causal_attention`.
"""

from __future__ import annotations

import torch

from .masks import attention_mask


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    prefix_k: torch.Tensor | None,
    prefix_v: torch.Tensor | None,
    *,
    position: int,
    window: int | None,
    segment_size: int | None,
    scale: float,
) -> torch.Tensor:
    """q [B, H, T, d], k/v [B, H, K, d|dv], prefix_k/v [B, H, P, d|dv] or None -> [B, H, T, dv]."""
    if prefix_k is not None:
        k = torch.cat((prefix_k, k), dim=2)
        v = torch.cat((prefix_v, v), dim=2)
    num_prefix = 0 if prefix_k is None else prefix_k.shape[2]
    mask = attention_mask(
        q.shape[2],
        k.shape[2] - num_prefix,
        position=position,
        num_prefix=num_prefix,
        window=window,
        segment_size=segment_size,
        device=q.device,
    )
    return softmax_attention(q, k, v, mask, scale)


def softmax_attention(q, k, v, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """The explicit softmax: q [B, H, T, d] over k/v [B, H, K, d|dv] where the boolean mask
    [T, K] is True -> [B, H, T, dv]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)
