"""Registry entries of the small text corpora (tinyshakespeare, WikiText-2 valid/test).

The URLs are the canonical raw files: tinyshakespeare as published in karpathy/char-rnn,
WikiText-2 (Merity et al. 2016, tokenized, `<unk>` kept) as shipped in pytorch/examples'
word-language-model example. The md5 is of the uncompressed text, the same as the copies in
the offline mirror (`text/*.txt.gz`). WikiText-2's train split is not registered: it is not
mirrored, and the language-model recipes read any local text a user brings.

    text = load_text("tinyshakespeare")      # str, 1115394 characters
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from .checksums import is_gzipped
from .errors import DataError
from .registry import DatasetEntry, get_dataset, register_dataset

CHAR_RNN = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare"
PYTORCH_EXAMPLES = (
    "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2"
)


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole content of a text file (plain or gzip, whatever its name says). UTF-8
    text may start with a byte-order mark (as Windows editors write it); it is dropped."""
    opener = gzip.open if is_gzipped(path) else open
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        with opener(path, "rt", encoding=codec, newline="") as f:
            return f.read()
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path}: not {encoding} text (it holds the byte {error.object[error.start]:#04x}); "
            "convert it first, e.g. `iconv -f latin1 -t utf-8`"
        ) from None


def load_text(name: str, *, download: bool = True, verify: bool = True) -> str:
    """The text of the registered corpus `name` (looked up like every dataset: the data
    folders, the cache, else a download), checked against its md5 unless `verify=False`."""
    from .files import dataset_path

    entry = get_dataset(name)
    if entry.info.get("kind") != "text":
        raise ValueError(f"dataset {entry.name!r} is not a text corpus")
    return entry.load(dataset_path(entry, download=download, verify=verify))


# a WikiText article starts at its top-level heading line, " = Title = " (sections are
# " = = Section = = ")
_WIKITEXT_ARTICLE = re.compile(r"^ = [^=].* = $", re.MULTILINE)


def wikitext_articles(text: str) -> list[str]:
    """WikiText split into its articles, each from its title heading to the next one
    (whatever precedes the first heading, the corpus's leading blank line, goes with the
    first article); `"".join(articles) == text`."""
    cuts = [m.start() for m in _WIKITEXT_ARTICLE.finditer(text)][1:]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]


def load_documents(name: str, *, download: bool = True) -> list[str]:
    """The registered corpus `name` as a list of documents: WikiText's articles, or the
    whole text as one document (tinyshakespeare)."""
    text = load_text(name, download=download)
    splitter = get_dataset(name).info.get("documents")
    return wikitext_articles(text) if splitter == "wikitext_articles" else [text]


def list_text_datasets() -> list[str]:
    """Names of the registered text corpora."""
    from .registry import list_datasets

    return [n for n in list_datasets() if get_dataset(n).info.get("kind") == "text"]


register_dataset(
    DatasetEntry(
        name="tinyshakespeare",
        file="text/tinyshakespeare.txt.gz",
        urls=(f"{CHAR_RNN}/input.txt",),
        md5="6fb458f1232090904fb40fe944165e91",
        loader=read_text,
        aliases=("tiny_shakespeare", "shakespeare"),
        alternate_files=("tinyshakespeare/input.txt",),
        info={
            "kind": "text",
            "bytes": 1115394,
            "lines": 40000,
            "license": "public domain (Shakespeare's works)",
            "reference": "Karpathy, char-rnn (2015)",
        },
    )
)

for _split, _md5, _bytes, _lines in (
    ("valid", "d756d22ab2310e7e60c094bea5c5a8eb", 1121681, 3760),
    ("test", "781c9418ab9414bd09e4aad825aae752", 1256449, 4358),
):
    register_dataset(
        DatasetEntry(
            name=f"wikitext2-{_split}",
            file=f"text/wikitext-2.{_split}.txt.gz",
            urls=(f"{PYTORCH_EXAMPLES}/{_split}.txt",),
            md5=_md5,
            loader=read_text,
            aliases=(f"wikitext-2-{_split}",),
            alternate_files=(f"wikitext-2/{_split}.txt",),
            info={
                "kind": "text",
                "documents": "wikitext_articles",
                "bytes": _bytes,
                "lines": _lines,
                "license": "CC BY-SA 3.0",
                "reference": "Merity et al., Pointer Sentinel Mixture Models, 2016",
            },
        )
    )
