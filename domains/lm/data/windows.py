"""Training crops and validation windows over a `TokenSplit`: `RandomCrops` (seeded,
resumable), `SequentialWindows` (every token scored exactly once) and `DocumentSpans`
(documents cut into streams for training with the state carried)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from titans_seq.training.streams import IGNORE_INDEX
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


def strided_offsets(
    indices: Sequence[int], length: int, stride: int, positions: int, seed: int
) -> np.ndarray:
    """Offsets in [0, positions) of indices in [0, length): index i takes the offset
    `i * stride + hash(seed, i) % stride` (i itself when stride is 1)."""
    index = np.asarray(indices, dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= length):
        raise IndexError(f"crop index out of range [0, {length})")
    if stride == 1:
        return index
    with np.errstate(over="ignore"):  # the seed's mixing multiply wraps by design
        salt = np.uint64(seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
    jitter = (_splitmix64(index.astype(np.uint64) ^ salt) % np.uint64(stride)).astype(np.int64)
    return np.minimum(index * stride + jitter, positions - 1)


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
        return strided_offsets(indices, self.length, self.stride, self.positions, self.seed)

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


class DocumentSpans(BatchDataset):
    """Training streams for carried-state training: every document cut into consecutive
    spans of up to `span` predicted tokens, none crossing a document boundary.

    Index i is one span: tokens [begin, end) of one array, predicting end - begin - 1
    tokens (the last span of a document is shorter). `stream_batch(indices, length)` ->
    {"inputs": int64 [B, length], "targets": int64 [B, length]}: the first `length`
    predictions of each span, targets `IGNORE_INDEX` (and inputs 0) past the span's end,
    so no stream reads into the next document and a stream always starts at a span start.
    Without document boundaries (`documents=False`, or a split that has none) each array
    is one document.
    """

    def __init__(self, split: TokenSplit, span: int, documents: bool = True):
        if isinstance(span, bool) or not isinstance(span, int) or span <= 0:
            raise ValueError(f"span must be a positive integer, got {span!r}")
        self.split, self.span = split, span
        arrays, begins, ends = [], [], []
        for a, array in enumerate(split.arrays):
            bounds = [0, array.shape[0]]
            if documents and split.starts is not None:
                bounds[1:1] = [int(p) for p in split.document_starts(a, 0, array.shape[0])]
            for start, stop in zip(bounds[:-1], bounds[1:]):
                if stop - start < 2:
                    continue  # nothing to predict
                first = np.arange(start, stop - 1, span, dtype=np.int64)
                begins.append(first)
                ends.append(np.minimum(first + span + 1, stop))
                arrays.append(np.full(first.shape, a, dtype=np.int64))
        if not begins:
            raise ValueError("the training split has no document of two or more tokens")
        self.arrays = np.concatenate(arrays)
        self.begins = np.concatenate(begins)
        self.ends = np.concatenate(ends)

    def __len__(self) -> int:
        return int(self.begins.shape[0])

    def example_lengths(self) -> torch.Tensor:
        # predicted tokens per span: the sampler batches spans of similar lengths together
        return torch.from_numpy(self.ends - self.begins - 1)

    def stream_batch(self, indices: Sequence[int], length: int) -> dict[str, torch.Tensor]:
        index = np.asarray(indices, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"span index out of range [0, {len(self)})")
        return _stream_rows(
            self.split, self.arrays[index], self.begins[index], self.ends[index], length
        )

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """Whole spans (`stream_batch` at the span length)."""
        return self.stream_batch(indices, self.span)


class RandomStreams(BatchDataset):
    """Training streams for carried-state training that start anywhere: index i is a stream
    of up to `span` predictions from a pseudo-random position of the split (chosen as
    `RandomCrops` chooses its crops: every position once per epoch when there are at most
    `max_positions`), running to the end of its document at the latest.

    `stream_batch(indices, length)` is `DocumentSpans.stream_batch`'s: {"inputs": [B,
    length], "targets": [B, length]}, targets `IGNORE_INDEX` past the document's end. A
    stream depends only on (seed, i), so a resumed run reads the same streams.
    """

    def __init__(
        self,
        split: TokenSplit,
        span: int,
        seed: int = 0,
        max_positions: int = 1 << 22,
        documents: bool = True,
    ):
        if isinstance(span, bool) or not isinstance(span, int) or span <= 0:
            raise ValueError(f"span must be a positive integer, got {span!r}")
        self.split, self.span, self.seed = split, span, int(seed)
        self.documents = bool(documents) and split.starts is not None
        # a stream may start at any token but an array's last (it would predict nothing)
        counts = np.array([max(0, a.shape[0] - 1) for a in split.arrays], dtype=np.int64)
        self.positions = int(counts.sum())
        if self.positions == 0:
            raise ValueError("the training split has no document of two or more tokens")
        self.cumulative = np.cumsum(counts)
        self.stride = max(1, math.ceil(self.positions / max_positions))
        self.length = math.ceil(self.positions / self.stride)

    def __len__(self) -> int:
        return self.length

    def bounds(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(array, begin, end) of each stream: tokens [begin, end) of that array."""
        offsets = strided_offsets(indices, self.length, self.stride, self.positions, self.seed)
        arrays = np.searchsorted(self.cumulative, offsets, side="right")
        begins = offsets - np.concatenate([[0], self.cumulative])[arrays]
        # where each stream's document ends: the array's end, or the next document's start
        # (vectorised per array: example_lengths reads every position at start-up)
        stops = np.array([a.shape[0] for a in self.split.arrays], dtype=np.int64)[arrays]
        if self.documents:
            for a in np.unique(arrays).tolist():
                rows = np.flatnonzero(arrays == a)
                starts = np.asarray(self.split.starts[a], dtype=np.int64)
                after = np.searchsorted(starts, begins[rows], side="right")
                inside = after < len(starts)
                stops[rows[inside]] = starts[after[inside]]
        # a position that is its document's last token predicts the next document's first
        # one from itself only: the stream then holds that one prediction
        ends = np.minimum(begins + self.span + 1, np.maximum(stops, begins + 2))
        return arrays, begins, ends

    def example_lengths(self) -> torch.Tensor:
        # predicted tokens per stream: the sampler batches streams of similar lengths
        arrays, begins, ends = self.bounds(range(self.length))
        return torch.from_numpy(ends - begins - 1)

    def stream_batch(self, indices: Sequence[int], length: int) -> dict[str, torch.Tensor]:
        arrays, begins, ends = self.bounds(indices)
        return _stream_rows(self.split, arrays, begins, ends, length)

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """Whole streams (`stream_batch` at the span length)."""
        return self.stream_batch(indices, self.span)


def _stream_rows(
    split: TokenSplit, arrays: np.ndarray, begins: np.ndarray, ends: np.ndarray, length: int
) -> dict[str, torch.Tensor]:
    """{"inputs", "targets"} [B, length] of tokens [begin, end) of each array: the first
    `length` predictions, padded past the end (inputs 0, targets IGNORE_INDEX)."""
    inputs = np.zeros((len(begins), length), dtype=np.int64)
    targets = np.full((len(begins), length), IGNORE_INDEX, dtype=np.int64)
    for row, (a, begin, end) in enumerate(zip(arrays.tolist(), begins.tolist(), ends.tolist())):
        end = min(end, begin + length + 1)
        tokens = split.arrays[a][begin:end]
        inputs[row, : end - begin - 1] = tokens[:-1]
        targets[row, : end - begin - 1] = tokens[1:]
    return {"inputs": torch.from_numpy(inputs), "targets": torch.from_numpy(targets)}
