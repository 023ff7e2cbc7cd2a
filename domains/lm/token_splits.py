"""Token streams: `TokenSplit` (1-D integer arrays, memory-mapped shards or in memory, with
the UTF-8 bytes they encode) and the prepared folders that hold them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .text_sources import META_FILE, META_FORMAT


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
    dtype = dtype or token_dtype(tokenizer.vocab_size)
    pieces: list[np.ndarray] = []
    num_bytes = num_docs = 0
    eos = getattr(tokenizer, "eos_id", None)
    for doc in documents:
        ids = encode_one(doc, tokenizer, dtype)
        if eos is not None and num_docs > 0:
            pieces.append(np.asarray([eos], dtype=dtype))
        pieces.append(ids)
        num_bytes += len(doc.encode("utf-8"))
        num_docs += 1
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    return tokens, num_bytes, num_docs


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
    """

    arrays: list[np.ndarray]
    num_bytes: int

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
        head, tail, start = [], [], 0
        for array in self.arrays:
            end = start + array.shape[0]
            if end <= cut:
                head.append(array)
            elif start >= cut:
                tail.append(array)
            else:
                head.append(array[: cut - start])
                tail.append(array[cut - start :])
            start = end
        ratio = self.bytes_per_token
        head_bytes = round(cut * ratio)
        return TokenSplit(head, head_bytes), TokenSplit(tail, self.num_bytes - head_bytes)


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
        arrays = []
        for shard in info["shards"]:
            path = directory / shard["file"]
            expected = shard["tokens"] * dtype.itemsize
            if not path.is_file() or path.stat().st_size != expected:
                raise ValueError(
                    f"shard {path} is missing or has the wrong size (expected {expected} bytes)"
                )
            if shard["tokens"]:
                arrays.append(np.memmap(path, dtype=dtype, mode="r", shape=(shard["tokens"],)))
        splits[name] = TokenSplit(arrays, int(info["bytes"]))
    return meta, splits
