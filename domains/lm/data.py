"""Language-model data: text sources, token splits, training crops and validation windows.

Sources (`data.train` / `data.val` of the `lm` task, `titans-seq prepare-text SOURCE`):
  * a registered corpus: "tinyshakespeare", "wikitext2-valid", "wikitext2-test"
    (`titans_seq.data`: $TITANS_SEQ_DATA, the cache, else a checksum-verified download);
  * a text file (plain or .gz), a folder of `*.txt` / `*.txt.gz` files, or a glob
    ("corpus/**/*.txt"); every file is one document;
  * a folder written by `prepare` (pre-tokenized shards + `meta.json`, memory-mapped);
  * "hf:NAME[:CONFIG]" streams a Hugging Face dataset (`datasets` installed and online), e.g.
    "hf:HuggingFaceFW/fineweb-edu:sample-10BT"; only `prepare` reads those.

Token streams are held as a `TokenSplit`: a list of 1-D integer arrays (memory-mapped shards
or in-memory arrays) with the number of UTF-8 bytes of text they encode, which is what
bits-per-byte divides by. Training draws `RandomCrops` ([seq_len + 1] windows at seeded
pseudo-random offsets: reproducible, and resumable because a crop depends only on its index);
validation reads `SequentialWindows` (consecutive windows whose predicted tokens do not
overlap, so every token of the split is scored exactly once).
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from titans_seq.training.tasks.base import BatchDataset

META_FILE = "meta.json"
META_FORMAT = "titans-seq-lm-tokens"
HF_PREFIX = "hf:"
TEXT_SUFFIXES = (".txt", ".txt.gz")


# --------------------------------------------------------------------------------- sources
def is_prepared_dir(source: str | Path) -> bool:
    """True when `source` is a folder written by `prepare` (it holds `meta.json`)."""
    return Path(source).is_dir() and (Path(source) / META_FILE).is_file()


def _is_registered_text(name: str) -> bool:
    import titans_seq.data as tsd
    from titans_seq.data.registry import is_registered

    return is_registered(name) and tsd.get_dataset(name).info.get("kind") == "text"


def text_files(source: str | Path) -> list[Path]:
    """The text files named by a path, a folder (its `*.txt[.gz]`, recursively) or a glob.

    Raises FileNotFoundError naming the source when nothing matches."""
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(TEXT_SUFFIXES))
        if not files:
            raise FileNotFoundError(f"text folder {path} holds no *.txt or *.txt.gz file")
        return files
    if glob.has_magic(text):
        files = sorted(Path(p) for p in glob.glob(os.path.expanduser(text), recursive=True))
        files = [p for p in files if p.is_file()]
        if not files:
            raise FileNotFoundError(f"the glob {text!r} matches no file")
        return files
    from titans_seq.data.text_sources import list_text_datasets

    raise FileNotFoundError(
        f"text source {text!r} is not a registered corpus ({', '.join(list_text_datasets())}), "
        "an existing file or folder, a glob, or a folder written by `titans-seq prepare-text`"
    )


def read_documents(source: str | Path) -> list[str]:
    """The documents of a text source: the registered corpus, or one per file."""
    from titans_seq.data.text_sources import load_text, read_text

    if isinstance(source, str) and not Path(source).exists() and _is_registered_text(source):
        return [load_text(source)]
    return [read_text(p) for p in text_files(source)]


def split_documents_tail(documents: Sequence[str], fraction: float) -> tuple[list[str], list[str]]:
    """(head, tail): the last `fraction` of the corpus's UTF-8 bytes go to the tail.

    Whole documents move to the tail from the end; the document on the boundary is cut at a
    character boundary, so head + tail is exactly the corpus and nothing overlaps.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {fraction}")
    sizes = [len(d.encode("utf-8")) for d in documents]
    total = sum(sizes)
    if total == 0:
        raise ValueError("the text corpus is empty")
    want = max(1, round(total * fraction))
    head, tail = list(documents), []
    while head and want > 0:
        doc = head.pop()
        size = sizes[len(head)]
        if size <= want:
            tail.insert(0, doc)
            want -= size
            continue
        # cut this document: keep its first part in the head, the last `want` bytes (rounded
        # to a character) in the tail
        raw = doc.encode("utf-8")
        cut = len(raw) - want
        while cut > 0 and (raw[cut] & 0xC0) == 0x80:  # not inside a multi-byte character
            cut -= 1
        head.append(raw[:cut].decode("utf-8"))
        tail.insert(0, raw[cut:].decode("utf-8"))
        want = 0
    head = [d for d in head if d]
    if not head:
        raise ValueError(f"val_fraction={fraction} leaves no training text")
    return head, tail


def hf_documents(
    name: str,
    config: str | None = None,
    split: str = "train",
    text_field: str = "text",
) -> Iterator[str]:
    """Stream the `text_field` of a Hugging Face dataset (`datasets.load_dataset(...,
    streaming=True)`), one document at a time.

    Raises RuntimeError with what to do when `datasets` is missing, when downloads are
    disabled ($TITANS_SEQ_OFFLINE, $HF_DATASETS_OFFLINE, $HF_HUB_OFFLINE) or when the stream
    cannot be opened (no network)."""
    try:
        import datasets
    except ImportError:
        raise RuntimeError(
            f"streaming {name!r} needs the Hugging Face `datasets` package: pip install "
            "datasets (or prepare a local text corpus instead)"
        ) from None
    for env in ("TITANS_SEQ_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(env, "").strip().lower() in ("1", "true", "yes", "on"):
            raise RuntimeError(
                f"cannot stream the Hugging Face dataset {name!r}: ${env} is set (offline). "
                "Prepare a local text corpus instead, or unset it on a machine with network."
            )
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
        rows = iter(stream)
        first = next(rows, None)
    except Exception as err:  # the hub client raises many types (connection, HTTP, ...)
        raise RuntimeError(
            f"cannot stream the Hugging Face dataset {name!r} (config {config!r}, split "
            f"{split!r}): {type(err).__name__}: {err}. Is this machine online?"
        ) from err
    if first is None:
        return
    for row in _chain_first(first, rows):
        if text_field not in row:
            raise KeyError(
                f"Hugging Face dataset {name!r} has no field {text_field!r}; fields: {sorted(row)}"
            )
        yield row[text_field]


def _chain_first(first, rest: Iterator) -> Iterator:
    yield first
    yield from rest


def parse_hf_source(source: str) -> tuple[str, str | None]:
    """ "hf:NAME[:CONFIG]" -> (NAME, CONFIG or None)."""
    body = source[len(HF_PREFIX) :]
    name, _, config = body.partition(":")
    if not name:
        raise ValueError(f"Hugging Face source {source!r} must look like hf:NAME[:CONFIG]")
    return name, config or None


# ---------------------------------------------------------------------------- token splits
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


# -------------------------------------------------------------------------------- datasets
def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A counter-based hash (SplitMix64 finalizer): uint64 -> well-mixed uint64."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Windows(BatchDataset):
    """Shared lookup of `[seq_len + 1]` windows inside a `TokenSplit`'s arrays."""

    def __init__(self, split: TokenSplit, seq_len: int, what: str):
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        self.split = split
        self.seq_len = seq_len
        self.what = what

    def _gather(self, array_ids: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        out = np.empty((len(starts), self.seq_len + 1), dtype=np.int64)
        for row, (a, s) in enumerate(zip(array_ids.tolist(), starts.tolist())):
            out[row] = self.split.arrays[a][s : s + self.seq_len + 1]
        return torch.from_numpy(out)

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

    `get_batch(indices)` -> {"tokens": int64 [B, seq_len + 1]}.
    """

    def __init__(
        self, split: TokenSplit, seq_len: int, seed: int = 0, max_positions: int = 1 << 22
    ):
        super().__init__(split, seq_len, "training")
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
        return {"tokens": self._gather(array_ids, offsets - before)}


class SequentialWindows(_Windows):
    """Validation windows: window j of an array is tokens[j*seq_len : j*seq_len + seq_len+1],
    so consecutive windows share one token and every token after an array's first is
    predicted exactly once (the last < seq_len tokens of each array are left out).

    `get_batch(indices)` -> {"tokens": int64 [B, seq_len + 1], "bytes": float64 [B]} where
    "bytes" is the UTF-8 bytes of the window's seq_len target tokens (seq_len *
    `split.bytes_per_token`; exact for byte-level tokens)."""

    def __init__(self, split: TokenSplit, seq_len: int):
        super().__init__(split, seq_len, "validation")
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
        tokens = self._gather(array_ids, (index - before) * self.seq_len)
        nbytes = torch.full((len(index),), self.bytes_per_window, dtype=torch.float64)
        return {"tokens": tokens, "bytes": nbytes}


# ---------------------------------------------------------------------- splits for training
def load_splits(
    train: str | Path,
    val: str | Path | None,
    val_fraction: float,
    tokenizer,
) -> tuple[TokenSplit, TokenSplit]:
    """(train, validation) token splits of the `lm` task's data sources.

    `train` is a text source or a prepared folder. The validation split is, in order: the
    `val` source when given (text, or a prepared folder's "val" split, else its "train"); a
    prepared folder's own "val" split; else the last `val_fraction` of the training corpus
    (cut before tokenizing for text, from the token stream for prepared shards).
    """
    if is_prepared_dir(train):
        _, splits = load_prepared(train)
        train_split = splits["train"]
        if val is not None:
            return train_split, _load_val(val, tokenizer)
        if "val" in splits and splits["val"].num_tokens:
            return train_split, splits["val"]
        return train_split.split_tail(val_fraction)
    if str(train).startswith(HF_PREFIX):
        raise ValueError(
            f"data.train={str(train)!r}: stream Hugging Face data into shards first with "
            "`titans-seq prepare-text` and train on the prepared folder"
        )
    documents = read_documents(train)
    if val is not None:
        val_split = _load_val(val, tokenizer)
    else:
        documents, val_documents = split_documents_tail(documents, val_fraction)
        val_tokens, val_bytes, _ = encode_documents(val_documents, tokenizer)
        val_split = TokenSplit([val_tokens], val_bytes)
    tokens, num_bytes, _ = encode_documents(documents, tokenizer)
    return TokenSplit([tokens], num_bytes), val_split


def _load_val(val: str | Path, tokenizer) -> TokenSplit:
    if is_prepared_dir(val):
        meta, splits = load_prepared(val)
        if meta["vocab_size"] != tokenizer.vocab_size:
            raise ValueError(
                f"data.val folder {val} was prepared with vocab_size {meta['vocab_size']}, "
                f"the training data uses {tokenizer.vocab_size}"
            )
        return splits["val"] if splits.get("val") and splits["val"].num_tokens else splits["train"]
    tokens, num_bytes, _ = encode_documents(read_documents(val), tokenizer)
    return TokenSplit([tokens], num_bytes)
