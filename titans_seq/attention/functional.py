"""`causal_attention`: the attention primitive shared by every attention-bearing mixer.

T new queries attend over [P always-visible prefix tokens ‖ cached past keys ‖ the T new
keys], causally at absolute stream positions, optionally restricted to a sliding window
and/or to fixed segments. See `titans_seq.attention.masks` for the exact visibility rule.
"""

from __future__ import annotations

import math

import torch

from .flex import flex_attention_path, flex_supported
from .masks import is_plain_causal
from .reference import reference_attention, softmax_attention
from .sdpa import sdpa_attention

BACKENDS = ("auto", "reference", "sdpa", "flex")
# The project-wide backend names used by the Titans mixers map onto the attention paths, so
# one `backend=` option can be passed to every layer of a mixed stack.
BACKEND_ALIASES = {"torch": "sdpa", "chunked": "sdpa", "compiled": "sdpa", "triton": "flex"}


def resolve_backend(backend: str) -> str:
    """Canonical attention backend name ("auto", "reference", "sdpa" or "flex")."""
    name = BACKEND_ALIASES.get(backend, backend)
    if name not in BACKENDS:
        accepted = ", ".join(repr(b) for b in (*BACKENDS, *BACKEND_ALIASES))
        raise ValueError(f"unknown attention backend {backend!r}; accepted: {accepted}")
    return name


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    prefix_k: torch.Tensor | None = None,
    prefix_v: torch.Tensor | None = None,
    position: int | None = None,
    window: int | None = None,
    segment_size: int | None = None,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Causal multi-head attention of T new queries over [prefix ‖ past ‖ new] keys.

    Args:
        q: [B, H, T, d] queries of the T new tokens.
        k, v: [B, H, K, d] / [B, H, K, dv] with K >= T: the K - T cached past keys/values
            followed by the T new ones (the last T rows belong to the queries).
        prefix_k, prefix_v: [B or 1, H, P, d] / [B or 1, H, P, dv] tokens every query sees
            (e.g. learned persistent memory), or None.
        position: stream position of the first query; the stream keys then sit at
            position + T - K … position + T - 1. Default K - T (the keys start the stream).
        window: a query at p sees stream keys p - window + 1 … p (plus the prefix); None =
            unbounded. Any length relative to T.
        segment_size: a query sees only stream keys of its own segment
            [s * segment_size, (s + 1) * segment_size) (plus the prefix); None = no segments.
        scale: score scale, default 1/sqrt(d).
        backend: "auto" (FlexAttention block masks on CUDA when the mask is not plain causal
            and T is long, otherwise SDPA), "sdpa" (alias "torch"), "flex" (alias
            "triton"), or "reference" (explicit softmax, for tests).

    Returns:
        [B, H, T, dv].
    """
    name = resolve_backend(backend)
    _check_shapes(q, k, v, prefix_k, prefix_v)
    num_queries, num_keys = q.shape[2], k.shape[2]
    if position is None:
        position = num_keys - num_queries
    _check_positions(position, num_queries, num_keys, window, segment_size)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if prefix_k is not None:
        batch, heads = q.shape[:2]
        prefix_k = prefix_k.expand(batch, heads, -1, -1)
        prefix_v = prefix_v.expand(batch, heads, -1, -1)

    if name == "auto":
        plain = is_plain_causal(
            num_queries,
            num_keys,
            position=position,
            num_prefix=0 if prefix_k is None else prefix_k.shape[2],
            window=window,
            segment_size=segment_size,
        )
        # plain causal: SDPA's is_causal kernels (FlashAttention on GPU) beat any block mask
        name = "sdpa" if plain or not flex_supported(q, v) else "flex"
    path = {"sdpa": sdpa_attention, "flex": flex_attention_path, "reference": reference_attention}
    return path[name](
        q,
        k,
        v,
        prefix_k,
        prefix_v,
        position=position,
        window=window,
        segment_size=segment_size,
        scale=scale,
    )


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    *,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Attention of q [B, H, T, d] over k, v [B, H, K, d|dv] under an explicit boolean
    visibility mask [T, K] (True: the query sees the key) -> [B, H, T, dv].

    For visibility rules `causal_attention` cannot state (MAC's per-token retrieved keys).
    backend: "reference" computes the explicit softmax; every other backend runs SDPA with
    the mask (a block mask for FlexAttention would be built anew for every call's mask).
    Every query must see at least one key.
    """
    name = resolve_backend(backend)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if name == "reference":
        return softmax_attention(q, k, v, mask, scale)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _check_shapes(q, k, v, prefix_k, prefix_v) -> None:
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"causal_attention: {label} must be a torch.Tensor, got {type(t)}")
        if t.dim() != 4:
            raise ValueError(
                f"causal_attention: {label} must be [B, H, L, d] (rank 4), got shape "
                f"{tuple(t.shape)}"
            )
        if not torch.is_floating_point(t):
            raise TypeError(f"causal_attention: {label} must be floating point, got {t.dtype}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(
            "causal_attention: q, k, v must share batch and head dimensions, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"causal_attention: q and k head dims differ ({q.shape[-1]} vs {k.shape[-1]})"
        )
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"causal_attention: k and v lengths differ ({k.shape[2]} vs {v.shape[2]})")
    if q.shape[2] == 0:
        raise ValueError("causal_attention: no queries (T = 0)")
    if k.shape[2] < q.shape[2]:
        raise ValueError(
            f"causal_attention: k has {k.shape[2]} rows but there are {q.shape[2]} queries; "
            "k must hold the past keys followed by one key per query"
        )
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise TypeError(
            f"causal_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})"
        )
    if (prefix_k is None) != (prefix_v is None):
        raise ValueError("causal_attention: pass both prefix_k and prefix_v, or neither")
    if prefix_k is None:
        return
    for label, t, ref in (("prefix_k", prefix_k, k), ("prefix_v", prefix_v, v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"causal_attention: {label} must be a rank-4 tensor [B or 1, H, P, d]")
        if t.shape[0] not in (1, q.shape[0]) or t.shape[1] != q.shape[1]:
            raise ValueError(
                f"causal_attention: {label} of shape {tuple(t.shape)} does not broadcast to "
                f"batch {q.shape[0]} and {q.shape[1]} heads"
            )
        if t.shape[-1] != ref.shape[-1]:
            raise ValueError(f"causal_attention: {label} head dim {t.shape[-1]} != {ref.shape[-1]}")
        if t.dtype != ref.dtype:
            raise TypeError(f"causal_attention: {label} dtype {t.dtype} != {ref.dtype}")
    if prefix_k.shape[2] != prefix_v.shape[2]:
        raise ValueError(
            f"causal_attention: prefix_k and prefix_v lengths differ "
            f"({prefix_k.shape[2]} vs {prefix_v.shape[2]})"
        )


def _check_positions(position, num_queries, num_keys, window, segment_size) -> None:
    # SymInt: under torch.compile(dynamic=True) the stream position derives from shapes
    if isinstance(position, bool) or not isinstance(position, (int, torch.SymInt)):
        raise TypeError(f"causal_attention: position must be an int, got {position!r}")
    if position + num_queries - num_keys < 0:
        raise ValueError(
            f"causal_attention: {num_keys - num_queries} past keys cannot precede stream "
            f"position {position} (keys would start before the stream)"
        )
    for label, value in (("window", window), ("segment_size", segment_size)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"causal_attention: {label} must be an int or None, got {value!r}")
        if value <= 0:
            raise ValueError(f"causal_attention: {label} must be positive, got {value}")
