"""Exceptions raised by `titans_seq.data`, so callers can catch data problems precisely."""

from __future__ import annotations

from titans_seq.errors import DataError, UserError

__all__ = ["ChecksumError", "DataError", "DatasetNotFoundError"]


class DatasetNotFoundError(UserError, FileNotFoundError):
    """No local copy of a registered dataset was found and none could be downloaded."""


class ChecksumError(UserError, RuntimeError):
    """A file's content does not hash to the md5 recorded in the registry."""

    def __init__(
        self, path, expected: str, actual: str, source: str | None = None, removed: bool = False
    ):
        self.path, self.expected, self.actual, self.source = path, expected, actual, source
        origin = f" (downloaded from {source})" if source else ""
        fate = (
            "the download was deleted."
            if removed
            else "replace the file with an unmodified copy, or delete it to download it again."
        )
        super().__init__(
            f"checksum mismatch for {path}{origin}: expected md5 {expected}, got {actual}; "
            f"the file is corrupt, truncated or a different version; {fate}"
        )
