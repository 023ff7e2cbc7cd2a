"""nanoGPT-style `prepare`: tokenize a corpus once into binary shards + a JSON meta file.

    prepare_text("tinyshakespeare", "byte", "data/shakespeare", val_fraction=0.1)
    prepare_documents({"train": docs, "val": val_docs}, tokenizer, "data/corpus")

Layout of a prepared folder (memory-mapped by `titans_seq.domains.lm.data.load_prepared`):

    train_000000.bin ...   token ids, little-endian uint16 (vocab <= 65536) or uint32
    train_000000.starts.npy ...  int64 positions (> 0) where a further document starts in
                           the shard (at its EOS separator when the tokenizer has one)
    val_000000.bin ...
    tokenizer/             the tokenizer's files (absent for the byte-level tokenizer)
    meta.json              format, tokenizer spec, vocab_size, eos_id, dtype and, per split,
                           its shards (file, starts file, tokens), token, byte and
                           document counts

Documents are joined by the tokenizer's `eos_id` when it has one; a shard boundary is always
a document boundary, so no training window straddles two unrelated texts. "bytes" is the
UTF-8 size of the text a split encodes (EOS tokens carry none): the denominator of
bits-per-byte for any tokenizer. The folder is written under a temporary name and renamed
into place at the end, so an interrupted run never leaves a half-written folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .sources import (
    HF_PREFIX,
    META_FILE,
    META_FORMAT,
    hf_documents,
    parse_hf_source,
    read_documents,
    split_documents_tail,
)
from .splits import encode_one, token_dtype

META_VERSION = 1
TOKENIZER_DIR = "tokenizer"
DEFAULT_SHARD_TOKENS = 100_000_000  # 200 MB of uint16 ids per shard, as nanoGPT's FineWeb


class _ShardWriter:
    """Appends documents' ids to `<split>_NNNNNN.bin` files of up to `shard_tokens` ids."""

    def __init__(self, directory: Path, split: str, dtype: np.dtype, shard_tokens: int):
        self.directory, self.split, self.dtype = directory, split, dtype
        self.shard_tokens = shard_tokens
        self.shards: list[dict] = []
        self.file = None
        self.tokens = self.bytes = self.documents = 0
        self.starts: list[int] = []  # document starts in the open shard

    def _open(self) -> None:
        name = f"{self.split}_{len(self.shards):06d}.bin"
        self.shards.append({"file": name, "tokens": 0})
        self.file = open(self.directory / name, "wb")

    def write(self, ids: np.ndarray, eos: int | None, num_bytes: int) -> None:
        current = self.shards[-1]["tokens"] if self.shards else 0
        if self.file is None or (current and current + ids.size > self.shard_tokens):
            self.close_shard()
            self._open()
        elif current:  # a further document inside the shard; a new shard starts fresh
            self.starts.append(current)
            if eos is not None:  # its separator, where it starts
                ids = np.concatenate([np.asarray([eos], dtype=self.dtype), ids])
        self.file.write(ids.astype(self.dtype.newbyteorder("<")).tobytes())
        self.shards[-1]["tokens"] += int(ids.size)
        self.tokens += int(ids.size)
        self.bytes += num_bytes
        self.documents += 1

    def close_shard(self) -> None:
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
            # where the shard's documents start (an empty document adds no position)
            shard = self.shards[-1]
            starts = sorted(set(p for p in self.starts if p < shard["tokens"]))
            shard["starts"] = shard["file"].removesuffix(".bin") + ".starts.npy"
            with open(self.directory / shard["starts"], "wb") as f:
                np.save(f, np.asarray(starts, dtype=np.int64))
                f.flush()
                os.fsync(f.fileno())
            self.starts = []

    def summary(self) -> dict:
        self.close_shard()
        return {
            "shards": self.shards,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "documents": self.documents,
        }


def _tokenizer_and_spec(tokenizer) -> tuple[object, str | None]:
    """(tokenizer object, spec string or None when its files must be saved)."""
    if isinstance(tokenizer, (str, Path)):
        from ..tokenizers import load_tokenizer

        spec = str(tokenizer)
        return load_tokenizer(spec), ("byte" if spec == "byte" else None)
    return tokenizer, ("byte" if type(tokenizer).__name__ == "ByteTokenizer" else None)


def prepare_documents(
    splits: Mapping[str, Iterable[str]],
    tokenizer,
    out_dir: str | Path,
    *,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    max_tokens: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    source: str | None = None,
    total_bytes: int | None = None,
) -> Path:
    """Tokenize the documents of every split into shards under `out_dir`; returns `out_dir`.

    Args:
        splits: split name ("train", "val") -> iterable of documents (strings); iterables
            are consumed once, so streams work.
        tokenizer: a spec for `load_tokenizer` ("byte", a tokenizer.json, a .model file, a
            saved folder) or a tokenizer object.
        shard_tokens: most ids per shard file.
        max_tokens: stop each split after the document that reaches this many ids.
        overwrite: replace an existing `out_dir` (else FileExistsError).
        source: a description of the corpus for the meta file.
        total_bytes: expected input size, for the progress bar's total.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} already exists (overwrite it with --overwrite)")
    if shard_tokens <= 0:
        raise ValueError(f"shard_tokens must be positive, got {shard_tokens}")
    tok, spec = _tokenizer_and_spec(tokenizer)
    dtype = token_dtype(tok.vocab_size)
    eos = getattr(tok, "eos_id", None)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        summaries = {}
        bar = tqdm(
            total=total_bytes,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc="prepare",
            disable=not progress,
        )
        with bar:
            for split, documents in splits.items():
                writer = _ShardWriter(tmp, split, dtype, shard_tokens)
                bar.set_postfix_str(split)
                for doc in documents:
                    if not isinstance(doc, str):
                        raise TypeError(f"documents must be strings, got {type(doc).__name__}")
                    num_bytes = len(doc.encode("utf-8"))
                    writer.write(encode_one(doc, tok, dtype), eos, num_bytes)
                    bar.update(num_bytes)
                    if max_tokens is not None and writer.tokens >= max_tokens:
                        break
                summaries[split] = writer.summary()
        if spec is None:
            tok.save(tmp / TOKENIZER_DIR)
        meta = {
            "format": META_FORMAT,
            "version": META_VERSION,
            "tokenizer": spec or TOKENIZER_DIR,
            "vocab_size": int(tok.vocab_size),
            "eos_id": eos,
            "dtype": dtype.name,
            "byteorder": "little",
            "source": source,
            "splits": summaries,
        }
        with open(tmp / META_FILE, "w") as f:
            f.write(json.dumps(meta, indent=1))
            f.flush()
            os.fsync(f.fileno())
        if out_dir.exists():  # overwrite: move the old folder aside, then drop it
            old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def prepare_text(
    source: str | Path,
    tokenizer,
    out_dir: str | Path,
    *,
    val: str | Path | None = None,
    val_fraction: float = 0.1,
    hf_split: str = "train",
    hf_text_field: str = "text",
    val_documents: int = 1000,
    max_tokens: int | None = None,
    **options,
) -> Path:
    """Prepare a text source (see `titans_seq.domains.lm.data`) into `out_dir`.

    Local text: the validation split is `val` when given, else the last `val_fraction` of
    the corpus (0 disables it). "hf:NAME[:CONFIG]" streams: the first `val_documents`
    documents form the validation split (unless `val` is given) and the training split
    stops after `max_tokens` ids.
    """
    source = str(source)
    if source.startswith(HF_PREFIX):
        name, config = parse_hf_source(source)
        stream = hf_documents(name, config, split=hf_split, text_field=hf_text_field)
        if val is not None:
            splits = {"train": stream, "val": read_documents(val)}
        else:
            splits = {"val": _take(stream, val_documents), "train": stream}
        return prepare_documents(
            splits, tokenizer, out_dir, source=source, max_tokens=max_tokens, **options
        )
    documents = read_documents(source)
    if val is not None:
        splits = {"train": documents, "val": read_documents(val)}
    elif val_fraction > 0:
        train_docs, val_docs = split_documents_tail(documents, val_fraction)
        splits = {"train": train_docs, "val": val_docs}
    else:
        splits = {"train": documents}
    total = sum(len(d.encode("utf-8")) for docs in splits.values() for d in docs)
    return prepare_documents(
        splits,
        tokenizer,
        out_dir,
        source=source,
        max_tokens=max_tokens,
        total_bytes=total,
        **options,
    )


def _take(iterator, n: int):
    """The next `n` items of a shared iterator (the rest stays in it)."""
    for _ in range(n):
        try:
            yield next(iterator)
        except StopIteration:
            return
