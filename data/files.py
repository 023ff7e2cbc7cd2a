"""Resolve a registered dataset to a local file: data dirs, then the cache, then download.

Lookup order (first hit wins):
1. every folder in `$TITANS_SEQ_DATA` (several may be joined with `os.pathsep`);
2. the user cache, `$TITANS_SEQ_CACHE`, else `$XDG_CACHE_HOME/titans_seq`, else
   `~/.cache/titans_seq`;
3. a download from the entry's URLs into the cache, checked against its md5.

In each folder the mirror path (`timeseries/ETTh1.csv.gz`), its plain `.csv` twin, the bare
file name at the top level and the entry's alternate layouts are all accepted.
Set `TITANS_SEQ_OFFLINE=1` to forbid downloads (tests and air-gapped machines).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.error import URLError

from .checksums import verify_md5
from .download import download_file, recorded_md5
from .errors import ChecksumError, DatasetNotFoundError
from .registry import DatasetEntry, get_dataset

DATA_ENV = "TITANS_SEQ_DATA"
CACHE_ENV = "TITANS_SEQ_CACHE"
OFFLINE_ENV = "TITANS_SEQ_OFFLINE"


def data_dirs() -> list[Path]:
    """The folders named by `$TITANS_SEQ_DATA`, in order (empty when unset)."""
    raw = os.environ.get(DATA_ENV, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def cache_dir() -> Path:
    """The user cache folder for downloads (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "titans_seq"


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _twin(relative: str) -> str:
    return relative[: -len(".gz")] if relative.endswith(".gz") else relative + ".gz"


def accepted_names(entry: DatasetEntry) -> list[str]:
    """Relative paths accepted inside a data folder, in the order they are tried."""
    names: list[str] = []
    for relative in (entry.file, *entry.alternate_files):
        for candidate in (relative, _twin(relative)):
            for variant in (candidate, Path(candidate).name):
                if variant not in names:
                    names.append(variant)
    return names


def find_local(entry: DatasetEntry) -> Path | None:
    """The first existing file for `entry` in the data folders, then the cache."""
    for root in (*data_dirs(), cache_dir()):
        for relative in accepted_names(entry):
            path = root / relative
            if path.is_file():
                return path
    return None


def download_target(entry: DatasetEntry, url: str) -> Path:
    """Where a download from `url` is stored: the mirror path in the cache, gzipped or not
    as the URL serves it (the md5 covers the uncompressed content either way)."""
    relative = (
        entry.file if entry.file.endswith(".gz") == url.endswith(".gz") else _twin(entry.file)
    )
    return cache_dir() / relative


def dataset_path(
    name: str | DatasetEntry,
    *,
    download: bool = True,
    verify: bool = True,
    progress: bool = True,
) -> Path:
    """Local path of the registered dataset `name`, downloading it into the cache if needed.

    Args:
        name: a registered name or alias (case-insensitive), or a `DatasetEntry`.
        download: allow a download when no local copy exists (also off when
            `$TITANS_SEQ_OFFLINE` is set).
        verify: check the md5 of a file found locally too (the default; downloads are
            always checked). A dataset without a published md5 is checked against the one
            recorded in `<file>.md5` when it was first downloaded. False skips the hashing
            (a fraction of a second for the large benchmark files).
        progress: show a tqdm progress bar while downloading.

    Raises:
        DatasetNotFoundError: no local copy and no successful download; the message lists
            the folders searched, the download errors and how to provide the file.
        ChecksumError: a download (or, with `verify`, a local file) has the wrong md5 or is
            a damaged gzip file.
    """
    entry = get_dataset(name)
    local = find_local(entry)
    if local is not None:
        # unpinned datasets: the md5 recorded when this copy was first downloaded; with
        # neither, there is nothing to compare with and nothing is hashed
        expected = entry.md5 or recorded_md5(local)
        if verify and expected:
            verify_md5(local, expected)
        return local

    failures: list[str] = []
    mismatch: ChecksumError | None = None
    if download and not offline():
        for url in entry.urls:
            try:
                target = download_target(entry, url)
                return download_file(url, target, md5=entry.md5, progress=progress)
            except ChecksumError as error:
                # a mirror may hold another version; try the next source, report if none fits
                mismatch = mismatch or error
                failures.append(f"{url}: md5 {error.actual} != {error.expected}")
            except (URLError, OSError, ValueError) as error:
                failures.append(f"{url}: {error}")
    if mismatch is not None:
        raise mismatch
    raise DatasetNotFoundError(_not_found_message(entry, download, failures))


def _not_found_message(entry: DatasetEntry, download: bool, failures: list[str]) -> str:
    folders = [f"${DATA_ENV} folder {d}" for d in data_dirs()] or [f"${DATA_ENV} (unset)"]
    folders.append(f"cache {cache_dir()}")
    lines = [
        f"dataset {entry.name!r} not found locally.",
        "Looked in: " + "; ".join(folders),
        "for any of: " + ", ".join(accepted_names(entry)),
    ]
    if not download:
        lines.append("Download was not allowed (download=False).")
    elif offline():
        lines.append(f"Download is disabled (${OFFLINE_ENV} is set).")
    elif failures:
        lines.append("Download failed: " + "; ".join(failures))
    else:
        lines.append("No download URL is registered for it.")
    source = entry.urls[0] if entry.urls else "its original source"
    plain = entry.file[: -len(".gz")] if entry.file.endswith(".gz") else entry.file
    lines.append(
        f"To provide it: fetch {source} and save it as {cache_dir() / plain} "
        f"(or gzipped, with '.gz' appended), or point ${DATA_ENV} at a folder holding "
        f"{plain} or {plain}.gz."
    )
    return "\n".join(lines)
