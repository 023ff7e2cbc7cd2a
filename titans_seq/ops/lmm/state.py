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
