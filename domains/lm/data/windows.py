"""Training crops and validation windows over a `TokenSplit`: `RandomCrops` (seeded,
resumable) and `SequentialWindows` (every token scored exactly once)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from titans_seq.training.tasks.base import BatchDataset

from .splits import TokenSplit


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A counter-based hash (SplitMix64 finalizer): uint64 -> well-mixed uint64."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Windows(BatchDataset):
    """Shared lookup of `[seq_len + 1]` windows inside a `TokenSplit`'s arrays.

    With `documents=True` a batch also holds "doc_starts": bool [B, seq_len], True at the
    input positions where a further document of the split begins inside the window, so
    the model can start each document afresh (`cu_seqlens`, see `titans_seq.packing`)."""

    def __init__(self, split: TokenSplit, seq_len: int, what: str, documents: bool = True):
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        self.split = split
        self.seq_len = seq_len
        self.what = what
        self.documents = bool(documents) and split.starts is not None

    def _gather(self, array_ids: np.ndarray, starts: np.ndarray) -> dict[str, torch.Tensor]:
        out = np.empty((len(starts), self.seq_len + 1), dtype=np.int64)
        doc_starts = np.zeros((len(starts), self.seq_len), dtype=bool)
        for row, (a, s) in enumerate(zip(array_ids.tolist(), starts.tolist())):
            out[row] = self.split.arrays[a][s : s + self.seq_len + 1]
            if self.documents:
                doc_starts[row, self.split.document_starts(a, s, s + self.seq_len)] = True
        batch = {"tokens": torch.from_numpy(out)}
        if self.documents:
            batch["doc_starts"] = torch.from_numpy(doc_starts)
        return batch

    def _too_short(self) -> ValueError:
        longest = max((a.shape[0] for a in self.split.arrays), default=0)
        return ValueError(
            f"the {self.what} split has no window of seq_len + 1 = {self.seq_len + 1} tokens "
            f"(its longest shard has {longest}); use a shorter data.seq_len or more text"
        )


class RandomCrops(_Windows):
    """Training windows `tokens [seq_len + 1]` at pseudo-random offsets.

    Index i stands for one crop: when the split has at most `max_positions` valid offsets,
    index i *is* offset i (the sampler's shuffled epoch then visits every offset once in
    random order); beyond that, offsets are grouped into `len(self)` consecutive strides and
    index i takes the offset `i * stride + hash(seed, i) % stride`. A crop depends only on
    (seed, i), so a resumed run that replays the sampler's position sees the same crops.

    `get_batch(indices)` -> {"tokens": int64 [B, seq_len + 1]} (+ "doc_starts", see
    `_Windows`).
    """

    def __init__(
        self,
        split: TokenSplit,
        seq_len: int,
        seed: int = 0,
        max_positions: int = 1 << 22,
        documents: bool = True,
    ):
        super().__init__(split, seq_len, "training", documents)
        counts = np.array([max(0, a.shape[0] - seq_len) for a in split.arrays], dtype=np.int64)
        self.positions = int(counts.sum())
        if self.positions == 0:
            raise self._too_short()
        self.cumulative = np.cumsum(counts)
        self.seed = int(seed)
        self.stride = max(1, math.ceil(self.positions / max_positions))
        self.length = math.ceil(self.positions / self.stride)

    def __len__(self) -> int:
        return self.length

    def offsets(self, indices: Sequence[int]) -> np.ndarray:
        """Global crop offsets (in [0, positions)) of the given indices."""
        index = np.asarray(indices, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.length):
            raise IndexError(f"crop index out of range [0, {self.length})")
        if self.stride == 1:
            return index
        with np.errstate(over="ignore"):  # the seed's mixing multiply wraps by design
            salt = np.uint64(self.seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        jitter = (_splitmix64(index.astype(np.uint64) ^ salt) % np.uint64(self.stride)).astype(
            np.int64
        )
        return np.minimum(index * self.stride + jitter, self.positions - 1)

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        offsets = self.offsets(indices)
        array_ids = np.searchsorted(self.cumulative, offsets, side="right")
        before = np.concatenate([[0], self.cumulative])[array_ids]
        return self._gather(array_ids, offsets - before)


class SequentialWindows(_Windows):
    """Validation windows: window j of an array is tokens[j*seq_len : j*seq_len + seq_len+1],
    so consecutive windows share one token and every token after an array's first is
    predicted exactly once (the last < seq_len tokens of each array are left out).

    `get_batch(indices)` -> {"tokens": int64 [B, seq_len + 1], "bytes": float64 [B]} (+
    "doc_starts", see `_Windows`) where "bytes" is the UTF-8 bytes of the window's seq_len
    target tokens (seq_len * `split.bytes_per_token`; exact for byte-level tokens)."""

    def __init__(self, split: TokenSplit, seq_len: int, documents: bool = True):
        super().__init__(split, seq_len, "validation", documents)
        counts = np.array([max(0, (a.shape[0] - 1) // seq_len) for a in split.arrays])
        self.cumulative = np.cumsum(counts)
        self.length = int(counts.sum())
        if self.length == 0:
            raise self._too_short()
        self.bytes_per_window = seq_len * split.bytes_per_token

    def __len__(self) -> int:
        return self.length

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        index = np.asarray(indices, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.length):
            raise IndexError(f"window index out of range [0, {self.length})")
        array_ids = np.searchsorted(self.cumulative, index, side="right")
        before = np.concatenate([[0], self.cumulative])[array_ids]
        batch = self._gather(array_ids, (index - before) * self.seq_len)
        batch["bytes"] = torch.full((len(index),), self.bytes_per_window, dtype=torch.float64)
        return batch
