"""Language-model text sources: registered corpora, text files, folders, globs and
"hf:NAME[:CONFIG]" streams, read as lists of documents (see `titans_seq.domains.lm.data`)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

META_FILE = "meta.json"
META_FORMAT = "titans-seq-lm-tokens"
HF_PREFIX = "hf:"
TEXT_SUFFIXES = (".txt", ".txt.gz")


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
    """The documents of a text source: the registered corpus's (WikiText's articles; the
    whole text of the others), or one per file."""
    from titans_seq.data.text_sources import load_documents, read_text

    if isinstance(source, str) and not Path(source).exists() and _is_registered_text(source):
        return load_documents(source)
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
