"""Token streams: `TokenSplit` (1-D integer arrays, memory-mapped shards or in memory, with
the UTF-8 bytes they encode) and the prepared folders that hold them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .sources import META_FILE, META_FORMAT


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size <= 2**16:
        return np.dtype(np.uint16)
    if vocab_size <= 2**32:
        return np.dtype(np.uint32)
    raise ValueError(f"vocab_size {vocab_size} does not fit in 32-bit token ids")


def encode_documents(
    documents: Iterable[str], tokenizer, dtype: np.dtype | None = None
) -> tuple[np.ndarray, int, int]:
    """(token ids [N], UTF-8 bytes, documents) of the documents, joined by the tokenizer's
    `eos_id` when it has one (the EOS tokens carry no bytes)."""
    documents = list(documents)
    split = encode_split(documents, tokenizer, dtype)
    return split.arrays[0], split.num_bytes, len(documents)


def encode_split(documents: Iterable[str], tokenizer, dtype: np.dtype | None = None) -> TokenSplit:
    """A one-array `TokenSplit` of the documents, joined by the tokenizer's `eos_id` when it
    has one (the EOS tokens carry no bytes), with where each document starts: at its EOS
    separator, which then plays the part of a beginning-of-document token."""
    dtype = dtype or token_dtype(tokenizer.vocab_size)
    pieces: list[np.ndarray] = []
    starts: list[int] = []
    num_bytes = position = 0
    eos = getattr(tokenizer, "eos_id", None)
    for doc in documents:
        ids = encode_one(doc, tokenizer, dtype)
        if position > 0:
            starts.append(position)
            if eos is not None:
                ids = np.concatenate([np.asarray([eos], dtype=dtype), ids])
        elif not ids.size:
            continue  # an empty first document leaves no trace
        pieces.append(ids)
        position += ids.size
        num_bytes += len(doc.encode("utf-8"))
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    # an empty document (without EOS) starts where the next one does: one boundary there
    kept = sorted(set(p for p in starts if p < tokens.size))
    return TokenSplit([tokens], num_bytes, [np.asarray(kept, dtype=np.int64)])


def encode_one(text: str, tokenizer, dtype: np.dtype) -> np.ndarray:
    """One document's ids as an array of `dtype`; ids outside the vocabulary raise."""
    ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= tokenizer.vocab_size):
        raise ValueError(
            f"the tokenizer produced id {int(ids.max())} outside its vocabulary "
            f"({tokenizer.vocab_size})"
        )
    return ids.astype(dtype)


@dataclass
class TokenSplit:
    """One split of a tokenized corpus.

    Attributes:
        arrays: 1-D integer arrays (memory-mapped shards or in-memory); windows never cross
            from one array into the next (a shard boundary is a document boundary).
        num_bytes: UTF-8 bytes of the text these tokens encode (bits-per-byte's denominator).
        starts: per array, the sorted positions (> 0) where a further document starts (an
            array's start is always one); None when the document structure is unknown.
    """

    arrays: list[np.ndarray]
    num_bytes: int
    starts: list[np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.starts is not None and len(self.starts) != len(self.arrays):
            raise ValueError(
                f"a TokenSplit needs one starts array per token array, got {len(self.starts)} "
                f"for {len(self.arrays)}"
            )

    def document_starts(self, array: int, begin: int, end: int) -> np.ndarray:
        """Positions p with begin < p < end where a document starts in array `array`,
        relative to `begin` (empty when the structure is unknown)."""
        if self.starts is None:
            return np.zeros(0, dtype=np.int64)
        starts = self.starts[array]
        lo, hi = np.searchsorted(starts, [begin + 1, end])
        return np.asarray(starts[lo:hi], dtype=np.int64) - begin

    @property
    def num_tokens(self) -> int:
        return int(sum(a.shape[0] for a in self.arrays))

    @property
    def bytes_per_token(self) -> float:
        """Mean UTF-8 bytes per token: exactly 1 for byte-level tokens without EOS ids."""
        return self.num_bytes / max(self.num_tokens, 1)

    def split_tail(self, fraction: float) -> tuple[TokenSplit, TokenSplit]:
        """(head, tail) with the last `fraction` of the tokens in the tail (views, no copy);
        bytes are shared out in proportion to the tokens."""
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {fraction}")
        total = self.num_tokens
        cut = total - max(1, round(total * fraction))
        head, tail, head_starts, tail_starts, start = [], [], [], [], 0
        for i, array in enumerate(self.arrays):
            end = start + array.shape[0]
            if end <= cut:
                head.append(array)
                head_starts.append(self.document_starts(i, 0, array.shape[0]))
            elif start >= cut:
                tail.append(array)
                tail_starts.append(self.document_starts(i, 0, array.shape[0]))
            else:
                head.append(array[: cut - start])
                tail.append(array[cut - start :])
                head_starts.append(self.document_starts(i, 0, cut - start))
                tail_starts.append(self.document_starts(i, cut - start, array.shape[0]))
            start = end
        ratio = self.bytes_per_token
        head_bytes = round(cut * ratio)
        known = self.starts is not None
        return (
            TokenSplit(head, head_bytes, head_starts if known else None),
            TokenSplit(tail, self.num_bytes - head_bytes, tail_starts if known else None),
        )


def load_prepared(directory: str | Path) -> tuple[dict, dict[str, TokenSplit]]:
    """(meta, {split: TokenSplit}) of a folder written by `prepare`; shards are memory-mapped
    read-only, and their sizes are checked against the meta file."""
    directory = Path(directory)
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{directory} holds no {META_FILE}: not a prepared token folder")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != META_FORMAT:
        raise ValueError(f"{meta_path} is not a {META_FORMAT} meta file")
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    splits: dict[str, TokenSplit] = {}
    for name, info in meta["splits"].items():
        arrays, starts = [], []
        for shard in info["shards"]:
            path = directory / shard["file"]
            expected = shard["tokens"] * dtype.itemsize
            if not path.is_file() or path.stat().st_size != expected:
                raise ValueError(
                    f"shard {path} is missing or has the wrong size (expected {expected} bytes)"
                )
            if shard["tokens"]:
                array = np.memmap(path, dtype=dtype, mode="r", shape=(shard["tokens"],))
                arrays.append(array)
                starts.append(_shard_document_starts(directory, shard, array, meta))
        known = all(s is not None for s in starts)
        splits[name] = TokenSplit(arrays, int(info["bytes"]), starts if known else None)
    return meta, splits


def _shard_document_starts(directory: Path, shard: dict, array: np.ndarray, meta: dict):
    """Where the shard's documents start: its `starts` file (written by `prepare`), else
    the EOS separators of a folder prepared before those files existed, else None."""
    if "starts" in shard:
        path = directory / shard["starts"]
        starts = np.load(path, mmap_mode="r")
        if starts.ndim != 1 or (starts.size and (starts[0] <= 0 or starts[-1] >= array.size)):
            raise ValueError(f"{path} does not hold document starts of {shard['file']}")
        return starts
    if meta.get("eos_id") is not None:
        return np.flatnonzero(array == meta["eos_id"])
    return None
