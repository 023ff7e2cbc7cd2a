"""Fetch one URL to a local file: temp file + atomic rename, progress bar, md5 check."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from urllib.request import Request, urlopen

from tqdm.auto import tqdm

from .checksums import content_md5
from .errors import ChecksumError

_CHUNK = 1 << 16
USER_AGENT = "titans-seq-data/0.1 (python urllib)"


def download_file(
    url: str,
    dest: str | Path,
    *,
    md5: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download `url` to `dest` and return `dest`.

    The bytes go to a temporary file in `dest`'s folder, are checked, then renamed onto
    `dest` with `os.replace` (atomic on one filesystem), so an interrupted or concurrent
    download never leaves a partial file under the final name.

    Raises:
        ChecksumError: the content md5 differs from `md5`; the download is deleted.
        OSError / urllib.error.URLError: network failure or a truncated transfer.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            request = Request(url, headers={"User-Agent": USER_AGENT})
            with urlopen(request, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                received = 0
                with tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=dest.name,
                    disable=not progress,
                    leave=False,
                ) as bar:
                    while chunk := response.read(_CHUNK):
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
        if total is not None and received != total:
            raise OSError(f"truncated download from {url}: got {received} of {total} bytes")
        actual = content_md5(tmp)
        if md5 is not None and actual != md5.lower():
            raise ChecksumError(dest, md5, actual, source=url, removed=True)
        os.replace(tmp, dest)
        if md5 is None:
            record = record_first_download(dest, actual, url)
            warnings.warn(
                f"{dest.name} from {url} cannot be verified (no checksum is published); "
                f"its md5 is {actual}, recorded in {record} (later checks with verify=True "
                "compare against it; pin it in the dataset's registry entry to share it)",
                stacklevel=2,
            )
    finally:
        # on any failure (checksum, network, Ctrl-C) the partial file must not survive
        tmp.unlink(missing_ok=True)
    return dest


RECORD_SUFFIX = ".md5"


def first_download_record(dest: str | Path) -> Path:
    """Where the md5 of a file downloaded without a known checksum is recorded."""
    dest = Path(dest)
    return dest.with_name(dest.name + RECORD_SUFFIX)


def record_first_download(dest: Path, md5: str, url: str) -> Path:
    """Write `<dest>.md5` ("<md5>  <file name>  <url>", the md5sum layout plus the source),
    so the first download's checksum can be checked later and pinned."""
    record = first_download_record(dest)
    tmp = record.with_name(record.name + ".part")
    tmp.write_text(f"{md5}  {dest.name}  {url}\n")
    os.replace(tmp, record)
    return record


def recorded_md5(path: str | Path) -> str | None:
    """The md5 recorded by the first download of `path`, if any."""
    record = first_download_record(path)
    if not record.is_file():
        return None
    fields = record.read_text().split()
    return fields[0].lower() if fields else None
