"""Attention through FlexAttention block masks (sparse: blocks outside the window are skipped).

On CUDA the compiled `flex_attention` generates fused Triton kernels; this is what the
`"auto"` backend uses there for windowed/prefixed/segmented attention. On other devices it
runs PyTorch's unfused eager implementation, which is only useful for testing the mask
logic (the `"auto"` backend never chooses this path off CUDA).
Argument conventions are those of `titans_seq.attention.causal_attention`.
"""

from __future__ import annotations

import functools
import warnings

import torch

from .masks import is_visible

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    FLEX_AVAILABLE = True
except ImportError:  # torch < 2.5
    create_block_mask = flex_attention = None
    FLEX_AVAILABLE = False

# Below this many queries a block mask is not worth building (e.g. token-by-token decoding):
# the SDPA path with an explicit mask is as fast.
FLEX_MIN_QUERIES = 128
FLEX_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def flex_supported(q: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the `"auto"` backend should take the FlexAttention path for these inputs.

    Conservative: CUDA only, long enough, and the head sizes the fused kernels handle.
    """
    head_dims = (q.shape[-1], v.shape[-1])
    return (
        FLEX_AVAILABLE
        and q.is_cuda
        and q.dtype in FLEX_DTYPES
        and q.shape[2] >= FLEX_MIN_QUERIES
        and all(d >= 16 and d & (d - 1) == 0 for d in head_dims)
    )


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=64)
def _block_mask(
    num_queries: int,
    num_keys: int,
    num_prefix: int,
    position: int,
    window: int | None,
    segment_size: int | None,
    device: str,
):
    key_start = position + num_queries - num_keys

    def mask_mod(batch, head, q_idx, kv_idx):
        query_pos = q_idx + position
        key_pos = kv_idx - num_prefix + key_start
        return (kv_idx < num_prefix) | is_visible(query_pos, key_pos, window, segment_size)

    return create_block_mask(
        mask_mod, None, None, num_queries, num_prefix + num_keys, device=device
    )


def flex_attention_path(
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
    if not FLEX_AVAILABLE:
        raise RuntimeError(
            "the 'flex' attention backend needs torch.nn.attention.flex_attention (torch >= 2.5)"
        )
    num_queries, num_keys = q.shape[2], k.shape[2]
    num_prefix = 0 if prefix_k is None else prefix_k.shape[2]
    if segment_size is None:
        # Without segments only relative positions matter: one cached mask serves every
        # offset of the stream.
        position = num_keys - num_queries
    else:
        # Shifting every position by whole segments keeps each test (causal order, window,
        # same segment: floor division shifts by exactly that many segments), so all
        # segments of a stream share one mask. Each distinct mask is also a recompilation
        # of the compiled kernel (its mask_mod closes over the position), and past
        # Dynamo's recompile limit the calls fall back to unfused attention: a MAC layer at
        # 16 segments a sequence ran most of its segments that way.
        position %= segment_size
    block_mask = _block_mask(
        num_queries, num_keys, num_prefix, position, window, segment_size, str(q.device)
    )
    if prefix_k is not None:
        k = torch.cat((prefix_k, k), dim=2)
        v = torch.cat((prefix_v, v), dim=2)
    if q.is_cuda:
        return _compiled_flex_attention()(q, k, v, block_mask=block_mask, scale=scale)
    with warnings.catch_warnings():
        # the unfused off-CUDA path is deliberate (tests of the mask logic only)
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=block_mask, scale=scale)
