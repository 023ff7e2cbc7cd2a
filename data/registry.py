"""The dataset registry: name -> where the file comes from, how to check it, how to split it.

An entry records the canonical public source(s) of a file, its path in the mirror layout
(`<subdir>/<file>`, optionally gzipped), the md5 of its *uncompressed* content (so a `.csv`
and a `.csv.gz` copy verify alike), the loader that reads it and the split protocol the
benchmark literature uses for it. Domains add their own entries with `register_dataset`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from titans_seq.errors import UnknownNameError, did_you_mean


@dataclass(frozen=True)
class DatasetEntry:
    """One registered dataset file.

    Attributes:
        name: canonical name (`list_datasets()` shows it; lookup is case-insensitive).
        file: path in the mirror / cache layout, e.g. "timeseries/ETTh1.csv.gz"; a plain
            ".csv" beside it (same name without ".gz") is accepted too.
        urls: canonical download sources, tried in order; the first is the original source.
        md5: md5 of the uncompressed content, or None where no trustworthy checksum is known
            (downloads are then kept unverified, with a warning that prints their md5).
        loader: reads the local file into the object the domain works with (a DataFrame for
            time series).
        protocol: name of the split protocol (see `titans_seq.data.splits`), or None.
        aliases: other accepted names (e.g. "electricity" for "ECL").
        alternate_files: other relative paths accepted in a data directory, e.g. the
            Time-Series-Library layout "ETT-small/ETTh1.csv".
        info: free-form facts (rows, columns, frequency, target, license) for docs and checks.
    """

    name: str
    file: str
    urls: tuple[str, ...]
    md5: str | None
    loader: Callable[..., Any] | None = None
    protocol: str | None = None
    aliases: tuple[str, ...] = ()
    alternate_files: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        if self.md5 is not None and (
            len(self.md5) != 32 or any(c not in "0123456789abcdef" for c in self.md5)
        ):
            raise ValueError(f"dataset {self.name!r}: md5 must be 32 lowercase hex digits")
        if not isinstance(self.urls, tuple):
            object.__setattr__(self, "urls", tuple(self.urls))

    def load(self, path, **options):
        """Read the local file at `path` with this entry's loader (options go to it)."""
        if self.loader is None:
            raise TypeError(f"dataset {self.name!r} has no loader; open {path} directly")
        return self.loader(path, **options)


# keyed by lower-case name and alias; values are shared entries
_REGISTRY: dict[str, DatasetEntry] = {}
_ORDER: list[str] = []


def register_dataset(entry: DatasetEntry, *, overwrite: bool = False) -> DatasetEntry:
    """Add `entry` under its name and aliases (case-insensitive). Returns the entry."""
    keys = [entry.name.lower(), *(a.lower() for a in entry.aliases)]
    for key in keys:
        existing = _REGISTRY.get(key)
        if existing is not None and existing.name != entry.name:
            raise ValueError(f"{key!r} already names dataset {existing.name!r}")
        if existing is not None and not overwrite:
            raise ValueError(f"dataset {entry.name!r} is already registered (overwrite=True)")
    for key in keys:
        _REGISTRY[key] = entry
    if entry.name not in _ORDER:
        _ORDER.append(entry.name)
    return entry


def get_dataset(name: str | DatasetEntry) -> DatasetEntry:
    """The entry registered as `name` (or one of its aliases); an entry passes through."""
    if isinstance(name, DatasetEntry):
        return name
    try:
        return _REGISTRY[str(name).lower()]
    except KeyError:
        known = [*_REGISTRY]
        raise UnknownNameError(
            f"unknown dataset {name!r}{did_you_mean(str(name).lower(), known)}; registered: "
            f"{', '.join(list_datasets())}"
        ) from None


def is_registered(name: str) -> bool:
    return str(name).lower() in _REGISTRY


def list_datasets() -> list[str]:
    """Canonical names of all registered datasets, in registration order."""
    return list(_ORDER)
