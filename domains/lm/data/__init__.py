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

from pathlib import Path

from .sources import (  # noqa: F401  (the data API in one place)
    HF_PREFIX,
    META_FILE,
    META_FORMAT,
    TEXT_SUFFIXES,
    hf_documents,
    is_prepared_dir,
    parse_hf_source,
    read_documents,
    split_documents_tail,
    text_files,
)
from .splits import (  # noqa: F401
    TokenSplit,
    encode_documents,
    encode_one,
    encode_split,
    load_prepared,
    token_dtype,
)
from .windows import DocumentSpans, RandomCrops, RandomStreams, SequentialWindows  # noqa: F401


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
            return train_split, load_source_split(val, tokenizer)
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
        val_split = load_source_split(val, tokenizer)
    else:
        documents, val_documents = split_documents_tail(documents, val_fraction)
        val_split = encode_split(val_documents, tokenizer)
    return encode_split(documents, tokenizer), val_split


def load_source_split(val: str | Path, tokenizer) -> TokenSplit:
    """The tokens of one source, for validation or evaluation: a prepared folder's val
    split (its train split when it has none; the vocabulary must match), else the text
    source's documents tokenized, with where each starts."""
    if is_prepared_dir(val):
        meta, splits = load_prepared(val)
        if meta["vocab_size"] != tokenizer.vocab_size:
            raise ValueError(
                f"data.val folder {val} was prepared with vocab_size {meta['vocab_size']}, "
                f"the training data uses {tokenizer.vocab_size}"
            )
        return splits["val"] if splits.get("val") and splits["val"].num_tokens else splits["train"]
    return encode_split(read_documents(val), tokenizer)
