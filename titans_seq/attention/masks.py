"""Which keys a query may attend to, at absolute stream positions.

The key sequence of one attention call is laid out as

    [ P prefix tokens ‖ K stream keys ]

where the prefix (persistent/learned tokens) is visible to every query and has no stream
position, and the K stream keys are the past keys followed by the T new ones, so that they
cover stream positions `position + T - K` … `position + T - 1` and the T queries sit at
`position` … `position + T - 1` (the last T stream keys belong to the queries).

A query at stream position p sees a stream key at position j when all of:
    j <= p                                   causal
    p - j < window                           sliding window (if window is set)
    j // segment_size == p // segment_size   same segment (if segment_size is set)

`is_visible` is the single definition of this rule; the dense boolean masks (SDPA), the
FlexAttention mask_mod and the explicit-softmax reference all derive from it.
"""

from __future__ import annotations

import torch


def is_visible(
    query_pos: torch.Tensor,
    key_pos: torch.Tensor,
    window: int | None = None,
    segment_size: int | None = None,
) -> torch.Tensor:
    """Boolean tensor (broadcast of the two position tensors): may query_pos attend to key_pos.

    Only tensor operations on the positions, so that it can also serve as a FlexAttention
    mask_mod body (no Python branching on tensor values).
    """
    visible = key_pos <= query_pos
    if window is not None:
        visible = visible & (query_pos - key_pos < window)
    if segment_size is not None:
        same_segment = torch.div(query_pos, segment_size, rounding_mode="floor") == torch.div(
            key_pos, segment_size, rounding_mode="floor"
        )
        visible = visible & same_segment
    return visible


def first_visible_position(query_pos: int, window: int | None, segment_size: int | None) -> int:
    """Smallest stream position a query at query_pos can see (ignoring the prefix).

    Non-decreasing in query_pos, so for a block of queries the first query's value bounds
    the keys the whole block needs.
    """
    first = 0
    if window is not None:
        first = max(first, query_pos - window + 1)
    if segment_size is not None:
        first = max(first, (query_pos // segment_size) * segment_size)
    return first


def attention_mask(
    num_queries: int,
    num_keys: int,
    *,
    position: int,
    num_prefix: int = 0,
    window: int | None = None,
    segment_size: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Dense boolean mask [T, P + K], True = may attend (the SDPA convention).

    Args:
        num_queries: T, queries at stream positions position … position+T-1.
        num_keys: K >= T stream keys ending with the queries' own positions.
        position: stream position of the first query.
        num_prefix: P always-visible prefix tokens placed before the stream keys.
    """
    query_pos = torch.arange(position, position + num_queries, device=device)[:, None]
    key_start = position + num_queries - num_keys
    key_pos = torch.arange(key_start, key_start + num_keys, device=device)[None, :]
    stream = is_visible(query_pos, key_pos, window, segment_size)
    if num_prefix == 0:
        return stream
    prefix = torch.ones(num_queries, num_prefix, dtype=torch.bool, device=device)
    return torch.cat((prefix, stream), dim=1)


def is_plain_causal(
    num_queries: int,
    num_keys: int,
    *,
    position: int,
    num_prefix: int = 0,
    window: int | None = None,
    segment_size: int | None = None,
) -> bool:
    """True when the mask equals the lower-triangular causal mask of a T x T call.

    Then SDPA's `is_causal=True` fast path (FlashAttention / memory-efficient kernels, no
    mask tensor) gives the exact result.
    """
    if num_prefix or num_keys != num_queries:
        return False
    if window is not None and window < num_queries:
        return False
    if segment_size is not None:
        last = position + num_queries - 1
        if position // segment_size != last // segment_size:
            return False
    return True
