"""md5 of a file's uncompressed content: a `.csv` and its gzipped copy hash the same."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from pathlib import Path

from .errors import ChecksumError

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


def is_gzipped(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name says)."""
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def content_md5(path: str | Path) -> str:
    """Hex md5 of the file's content, decompressed first when the file is gzip data.

    Hashing the uncompressed bytes lets one registry checksum cover the original download
    (plain CSV) and the compressed mirror copy alike.
    """
    digest = hashlib.md5(usedforsecurity=False)
    opener = gzip.open if is_gzipped(path) else open
    with opener(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5(path: str | Path, expected: str | None) -> str:
    """Raise `ChecksumError` unless the content md5 of `path` is `expected`; returns it.

    `expected=None` (no checksum known) only computes and returns the md5. A gzip file that
    cannot be decompressed to its end (truncated, damaged) raises `ChecksumError` too.
    """
    try:
        actual = content_md5(path)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ChecksumError(
            path, expected or "(none recorded)", f"unreadable gzip data ({error})"
        ) from None
    if expected is not None and actual != expected.lower():
        raise ChecksumError(path, expected, actual)
    return actual
