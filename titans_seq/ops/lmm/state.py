"""State of the memory op between calls (streaming)."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class MemoryState:
    """Per-stream memory after a prefix of the stream.

    Attributes (each a tuple with one tensor per memory layer, [B, H, out, in], float32 or
    float64):
        weights: W_t, the weights after the last absorbed token.
        momentum: S_t, the momentum ("surprise") after the last absorbed token.
        chunk_weights: W_(c), the weights that entered the current chunk; the gradients of
            the remaining tokens of a partially filled chunk are taken at these weights.
        offset: how many tokens of the current chunk are already absorbed (0 <= offset < C);
            chunk boundaries sit at absolute stream positions, so this makes streaming
            equal one-shot processing.
    """

    weights: tuple[torch.Tensor, ...]
    momentum: tuple[torch.Tensor, ...]
    chunk_weights: tuple[torch.Tensor, ...]
    offset: int

    @property
    def batch_size(self) -> int:
        return self.weights[0].shape[0]

    def detach(self) -> MemoryState:
        return MemoryState(
            weights=tuple(w.detach() for w in self.weights),
            momentum=tuple(s.detach() for s in self.momentum),
            chunk_weights=tuple(w.detach() for w in self.chunk_weights),
            offset=self.offset,
        )


def fresh_state(weights, batch_size: int, dtype: torch.dtype) -> MemoryState:
    """The state before the first token: W = W_0 (broadcast over the batch), S = 0."""
    w0 = tuple(w.to(dtype).unsqueeze(0).expand(batch_size, *w.shape) for w in weights)
    return MemoryState(
        weights=w0, momentum=tuple(torch.zeros_like(w) for w in w0), chunk_weights=w0, offset=0
    )


def state_dtype(x: torch.Tensor) -> torch.dtype:
    """Memory state precision: float64 for float64 inputs, float32 for everything else."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def final_state(weights, momentum, chunk_weights, offset: int) -> MemoryState:
    """The state a call leaves, ending `offset` tokens into a chunk (0 <= offset < C): at a
    chunk boundary the next chunk's gradients start from the current weights, so
    `chunk_weights` (those of the unfinished chunk) is kept only when offset > 0."""
    weights = tuple(weights)
    kept = tuple(chunk_weights) if offset else weights
    return MemoryState(weights, tuple(momentum), kept, offset)


# ---- chunk segments ----
# A call of T tokens entering `offset` tokens into a chunk of C is cut into segments: the
# first finishes the chunk in progress (C - offset tokens, or fewer when T is short), each
# later one is a whole chunk, and the last may be partial. Chunk boundaries thus sit at
# absolute stream positions, which makes streaming equal one-shot processing.


def num_segments(T: int, chunk_size: int, offset: int) -> int:
    """How many segments a call of T >= 1 tokens entered at `offset` is cut into."""
    first = min(T, chunk_size - offset)
    return 1 + -(-(T - first) // chunk_size)


def segment_bounds(T: int, chunk_size: int, offset: int, seg: int) -> tuple[int, int]:
    """Token range [t0, t1) of segment `seg` of a call entered at `offset`."""
    return max(seg * chunk_size - offset, 0), min((seg + 1) * chunk_size - offset, T)


def segments_span(T: int, chunk_size: int, offset: int, first: int, stop: int) -> tuple[int, int]:
    """Token range [t0, t1) of segments first .. stop - 1 of a call entered at `offset`."""
    return (
        segment_bounds(T, chunk_size, offset, first)[0],
        segment_bounds(T, chunk_size, offset, stop - 1)[1],
    )


def segment_lengths(T: int, chunk_size: int, offset: int) -> list[int]:
    """Tokens in each segment of a call of T tokens entered at `offset`."""
    bounds = (
        segment_bounds(T, chunk_size, offset, s) for s in range(num_segments(T, chunk_size, offset))
    )
    return [t1 - t0 for t0, t1 in bounds]
