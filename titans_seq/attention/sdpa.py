"""Attention through `torch.nn.functional.scaled_dot_product_attention`.

Three cases:
  * the mask is plain causal (no prefix, no cache, window/segment not binding): SDPA with
    `is_causal=True`, which lets PyTorch pick FlashAttention / memory-efficient kernels;
  * a window or segment bounds how far back queries look and T is long: the queries are
    processed in blocks of `query_block`, each block attending only to the keys it can see,
    so cost and memory are O(T * (window + block)) instead of O(T^2);
  * otherwise: one SDPA call with an explicit boolean mask (exact on every device).
Argument conventions are those of `titans_seq.attention.causal_attention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import attention_mask, first_visible_position, is_plain_causal

DEFAULT_QUERY_BLOCK = 512


def sdpa_attention(
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
    query_block: int = DEFAULT_QUERY_BLOCK,
) -> torch.Tensor:
    """q [B, H, T, d], k/v [B, H, K, d|dv], prefix_k/v [B, H, P, d|dv] or None -> [B, H, T, dv]."""
    num_queries, num_keys = q.shape[2], k.shape[2]
    num_prefix = 0 if prefix_k is None else prefix_k.shape[2]
    if is_plain_causal(
        num_queries,
        num_keys,
        position=position,
        num_prefix=num_prefix,
        window=window,
        segment_size=segment_size,
    ):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

    bounded_lookback = window is not None or segment_size is not None
    if not bounded_lookback or num_queries <= query_block:
        return _masked_call(q, k, v, prefix_k, prefix_v, position, window, segment_size, scale)

    # Block the queries; the loop bounds depend only on shapes, so torch.compile unrolls it.
    key_start = position + num_queries - num_keys
    outputs = []
    for start in range(0, num_queries, query_block):
        stop = min(num_queries, start + query_block)
        lo = first_visible_position(position + start, window, segment_size) - key_start
        lo = max(0, lo)
        hi = num_keys - num_queries + stop  # the key of the block's last query, inclusive
        outputs.append(
            _masked_call(
                q[:, :, start:stop],
                k[:, :, lo:hi],
                v[:, :, lo:hi],
                prefix_k,
                prefix_v,
                position + start,
                window,
                segment_size,
                scale,
            )
        )
    return torch.cat(outputs, dim=2)


def _masked_call(q, k, v, prefix_k, prefix_v, position, window, segment_size, scale):
    """One SDPA call with an explicit mask; the last T keys of k are the queries' own."""
    num_prefix = 0 if prefix_k is None else prefix_k.shape[2]
    mask = attention_mask(
        q.shape[2],
        k.shape[2],
        position=position,
        num_prefix=num_prefix,
        window=window,
        segment_size=segment_size,
        device=q.device,
    )
    if prefix_k is not None:
        k = torch.cat((prefix_k, k), dim=2)
        v = torch.cat((prefix_v, v), dim=2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
