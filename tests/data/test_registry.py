"""Dataset registry, local lookup order, checksums and the download path (served locally)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.server
import shutil
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import titans_seq.data as tsd
from titans_seq.data import registry
from titans_seq.data.files import accepted_names

MIRROR = tsd.data_dirs()[0] if tsd.data_dirs() else None
needs_mirror = pytest.mark.skipif(
    MIRROR is None or not (MIRROR / "timeseries").is_dir(),
    reason="the offline data mirror ($TITANS_SEQ_DATA) is not available",
)
MIRRORED = ["ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather"]


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Empty data dir and cache under tmp_path, downloads allowed. Returns (data, cache)."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    monkeypatch.setenv("TITANS_SEQ_DATA", str(data))
    monkeypatch.setenv("TITANS_SEQ_CACHE", str(cache))
    monkeypatch.delenv("TITANS_SEQ_OFFLINE", raising=False)
    return data, cache


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server(tmp_path):
    """A static HTTP server on 127.0.0.1 serving tmp_path/www; yields (root folder, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _point_entry(monkeypatch, name: str, **changes) -> tsd.DatasetEntry:
    """Replace the registered entry `name` for this test only (e.g. its URLs)."""
    entry = dataclasses.replace(tsd.get_dataset(name), **changes)
    for key in (entry.name.lower(), *(a.lower() for a in entry.aliases)):
        monkeypatch.setitem(registry._REGISTRY, key, entry)
    return entry


def _plain_copy(name: str, dest: Path) -> Path:
    """Decompress the mirror file of `name` to `dest` (the original CSV bytes)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(MIRROR / tsd.get_dataset(name).file, "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
    return dest


# ---------------------------------------------------------------- registry


def test_registry_lists_the_benchmarks_with_sources_and_protocols():
    names = tsd.list_datasets()
    for name in [*MIRRORED, "ECL", "Traffic", "Exchange", "ILI"]:
        assert name in names
        entry = tsd.get_dataset(name)
        assert entry.urls and all(u.startswith("https://") for u in entry.urls)
        assert entry.protocol in ("ett_hour", "ett_15min", "custom")
        assert entry.loader is not None
    assert tsd.get_dataset("ETTh1").urls[0] == (
        "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/ETTh1.csv"
    )
    assert tsd.get_dataset("ETTm2").protocol == "ett_15min"
    assert tsd.get_dataset("weather").protocol == "custom"
    # no published checksum of these benchmark copies: recorded as unknown
    for name in ("ECL", "Traffic", "Exchange", "ILI"):
        assert tsd.get_dataset(name).md5 is None, name


def test_lookup_is_case_insensitive_and_knows_aliases():
    assert tsd.get_dataset("etth1") is tsd.get_dataset("ETTh1")
    assert tsd.get_dataset("electricity").name == "ECL"
    assert tsd.get_dataset("illness").name == "ILI"
    assert tsd.get_dataset("exchange_rate").name == "Exchange"
    with pytest.raises(KeyError, match="registered: ETTh1"):
        tsd.get_dataset("no-such-set")


def test_register_dataset_rejects_clashes_and_bad_checksums(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_ORDER", list(registry._ORDER))
    entry = tsd.DatasetEntry(name="toy", file="misc/toy.csv", urls=(), md5=None)
    tsd.register_dataset(entry)
    assert "toy" in tsd.list_datasets()
    with pytest.raises(ValueError, match="already registered"):
        tsd.register_dataset(entry)
    tsd.register_dataset(entry, overwrite=True)
    with pytest.raises(ValueError, match="already names dataset 'ECL'"):
        tsd.register_dataset(
            tsd.DatasetEntry(name="other", file="x.csv", urls=(), md5=None, aliases=("ecl",))
        )
    with pytest.raises(ValueError, match="md5"):
        tsd.DatasetEntry(name="bad", file="x.csv", urls=(), md5="not-a-hash")
    with pytest.raises(TypeError, match="no loader"):
        entry.load("misc/toy.csv")


# ---------------------------------------------------------------- mirror + checksums


@needs_mirror
@pytest.mark.parametrize("name", MIRRORED)
def test_mirror_files_match_the_registry_md5(name):
    path = tsd.dataset_path(name, download=False)
    assert path == MIRROR / tsd.get_dataset(name).file
    assert tsd.content_md5(path) == tsd.get_dataset(name).md5
    assert tsd.dataset_path(name, download=False, verify=True) == path


@needs_mirror
def test_plain_and_gzipped_copies_hash_alike(tmp_path):
    plain = _plain_copy("ETTh1", tmp_path / "ETTh1.csv")
    assert tsd.content_md5(plain) == tsd.content_md5(MIRROR / "timeseries/ETTh1.csv.gz")


# ---------------------------------------------------------------- local lookup order


def test_accepted_names_cover_mirror_plain_flat_and_tslib_layouts():
    names = accepted_names(tsd.get_dataset("ETTh1"))
    for relative in ("timeseries/ETTh1.csv.gz", "timeseries/ETTh1.csv", "ETTh1.csv",
                     "ETT-small/ETTh1.csv"):  # fmt: skip
        assert relative in names
    assert names[0] == "timeseries/ETTh1.csv.gz"


@needs_mirror
def test_plain_csv_in_data_dir_and_tslib_layout_are_found(isolated, monkeypatch):
    data, _ = isolated
    plain = _plain_copy("ETTh1", data / "timeseries" / "ETTh1.csv")
    assert tsd.dataset_path("ETTh1", download=False) == plain
    tslib = _plain_copy("ETTm1", data / "ETT-small" / "ETTm1.csv")
    assert tsd.dataset_path("ETTm1", download=False, verify=True) == tslib


# the first rows of the published files, as Time-Series-Library's bundle lays them out
_PUBLISHED_HEADS = {
    "Exchange": (
        "exchange_rate/exchange_rate.csv",
        "date,0,1,2,3,4,5,6,OT\n"
        "1990/1/1 0:00,0.7855,1.611,0.861698,0.634196,0.211242,0.006838,0.525486,0.593\n"
        "1990/1/2 0:00,0.7818,1.61,0.861104,0.633513,0.211242,0.006863,0.523972,0.594\n"
        "1990/1/3 0:00,0.7867,1.629,0.86103,0.648508,0.211242,0.00654,0.530933,0.597\n",
        pd.Timedelta("1D"),
    ),
    "ILI": (
        "illness/national_illness.csv",
        "date,% WEIGHTED ILI,%UNWEIGHTED ILI,AGE 0-4,AGE 5-24,ILITOTAL,NUM. OF PROVIDERS,OT\n"
        "2002-01-01 00:00:00,1.22262,1.16668,582,805,2060,754,176569\n"
        "2002-01-08 00:00:00,1.33344,1.2165,683,872,2267,785,186355\n"
        "2002-01-15 00:00:00,1.31929,1.13057,642,878,2176,831,192469\n",
        pd.Timedelta("7D"),
    ),
}


@pytest.mark.parametrize("name", sorted(_PUBLISHED_HEADS))
def test_exchange_and_ili_read_their_published_layout(isolated, name):
    data, _ = isolated
    relative, text, step = _PUBLISHED_HEADS[name]
    (data / relative).parent.mkdir(parents=True)
    (data / relative).write_text(text)
    frame = tsd.load_timeseries(name, download=False)
    columns = text.splitlines()[0].split(",")[1:]
    assert list(frame.columns) == columns and frame.columns[-1] == "OT"
    assert frame.shape == (3, len(columns)) and frame.dtypes.eq(np.float64).all()
    assert (frame.index[1:] - frame.index[:-1] == step).all()
    assert frame.iloc[0, 0] == float(text.splitlines()[1].split(",")[1])


def test_data_dirs_come_before_the_cache_and_are_searched_in_order(isolated, monkeypatch):
    data, cache = isolated
    second = data.parent / "second"
    for root in (second, cache):
        (root / "timeseries").mkdir(parents=True)
        (root / "timeseries" / "traffic.csv").write_text("date,OT\n")
    monkeypatch.setenv("TITANS_SEQ_DATA", f"{data}:{second}")
    assert tsd.data_dirs() == [data, second]
    assert tsd.dataset_path("Traffic", download=False) == second / "timeseries/traffic.csv"
    (second / "timeseries" / "traffic.csv").unlink()
    assert tsd.dataset_path("Traffic", download=False) == cache / "timeseries/traffic.csv"


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("TITANS_SEQ_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tsd.cache_dir() == tmp_path / "titans_seq"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tsd.cache_dir() == Path.home() / ".cache" / "titans_seq"
    monkeypatch.setenv("TITANS_SEQ_CACHE", str(tmp_path / "c"))
    assert tsd.cache_dir() == tmp_path / "c"


def test_verify_flags_a_corrupt_local_file_without_deleting_it(isolated):
    data, _ = isolated
    bad = data / "ETTh2.csv"
    bad.write_text("date,OT\n2016-07-01 00:00:00,1.0\n")
    assert tsd.dataset_path("ETTh2", download=False, verify=False) == bad  # the opt-out
    with pytest.raises(tsd.ChecksumError) as info:
        tsd.dataset_path("ETTh2", download=False)  # verified by default
    message = str(info.value)
    assert str(bad) in message and tsd.get_dataset("ETTh2").md5 in message
    assert info.value.actual == tsd.content_md5(bad)
    assert bad.exists()  # a user's file is never deleted


def test_a_truncated_and_edited_mirror_file_is_refused_on_load(isolated):
    """A gzip copy cut short, its first value changed: the load says which file is bad
    instead of returning the rows it could read."""
    import gzip

    if MIRROR is None:
        pytest.skip("needs the data mirror ($TITANS_SEQ_DATA)")
    data, _ = isolated
    good = gzip.decompress((MIRROR / "timeseries" / "ETTh1.csv.gz").read_bytes())
    lines = good.decode().splitlines(keepends=True)
    first = lines[1].split(",")
    first[1] = str(float(first[1]) + 1.0)
    lines[1] = ",".join(first)
    damaged = gzip.compress("".join(lines[:5001]).encode())
    (data / "ETTh1.csv.gz").write_bytes(damaged[: len(damaged) - 100])  # truncated too
    with pytest.raises(tsd.ChecksumError, match="ETTh1.csv.gz"):
        tsd.load_timeseries("ETTh1", download=False)
    (data / "ETTh1.csv.gz").write_bytes(damaged)  # whole gzip, edited content
    with pytest.raises(tsd.ChecksumError, match="checksum mismatch"):
        tsd.load_timeseries("ETTh1", download=False)
    assert len(tsd.load_timeseries("ETTh1", download=False, verify=False)) == 5000


def test_offline_without_a_local_file_says_where_it_looked(isolated, monkeypatch):
    data, cache = isolated
    monkeypatch.setenv("TITANS_SEQ_OFFLINE", "1")
    with pytest.raises(tsd.DatasetNotFoundError) as info:
        tsd.dataset_path("ECL")
    message = str(info.value)
    assert str(data) in message and str(cache) in message
    assert "timeseries/electricity.csv.gz" in message and "electricity/electricity.csv" in message
    assert "TITANS_SEQ_OFFLINE" in message
    assert "huggingface.co/datasets/thuml/Time-Series-Library" in message  # how to get it
    monkeypatch.delenv("TITANS_SEQ_OFFLINE")
    with pytest.raises(FileNotFoundError, match="download=False"):
        tsd.dataset_path("ECL", download=False)


# ---------------------------------------------------------------- downloads (local server)


@needs_mirror
def test_download_verifies_md5_and_lands_atomically_in_the_cache(isolated, server, monkeypatch):
    _, cache = isolated
    root, base = server
    _plain_copy("ETTh1", root / "ETTh1.csv")
    _point_entry(monkeypatch, "ETTh1", urls=(f"{base}/ETTh1.csv",))
    path = tsd.dataset_path("ETTh1", progress=False)
    assert path == cache / "timeseries" / "ETTh1.csv"
    assert tsd.content_md5(path) == tsd.get_dataset("ETTh1").md5
    assert sorted(p.name for p in path.parent.iterdir()) == ["ETTh1.csv"]  # no .part left
    (root / "ETTh1.csv").unlink()  # the second call is served from the cache
    assert tsd.dataset_path("ETTh1", progress=False) == path
    frame = tsd.load_timeseries("ETTh1")
    assert frame.shape == (17420, 7)


def test_checksum_mismatch_raises_and_deletes_the_download(isolated, server, monkeypatch):
    _, cache = isolated
    root, base = server
    (root / "ETTh1.csv").write_text("date,OT\n2016-07-01 00:00:00,1.0\n")
    entry = _point_entry(monkeypatch, "ETTh1", urls=(f"{base}/ETTh1.csv",))
    with pytest.raises(tsd.ChecksumError) as info:
        tsd.dataset_path("ETTh1", progress=False)
    error = info.value
    assert error.expected == entry.md5 and error.actual == tsd.content_md5(root / "ETTh1.csv")
    message = str(error)
    assert "ETTh1.csv" in message and entry.md5 in message and error.actual in message
    assert f"{base}/ETTh1.csv" in message and "deleted" in message
    folder = cache / "timeseries"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_download_falls_back_to_the_next_source(isolated, server, monkeypatch):
    root, base = server
    body = "date,0,OT\n2016-07-01 00:00:00,1.0,2.0\n"
    (root / "traffic.csv").write_text(body)
    md5 = hashlib.md5(body.encode()).hexdigest()
    _point_entry(
        monkeypatch, "Traffic", md5=md5, urls=(f"{base}/missing.csv", f"{base}/traffic.csv")
    )
    path = tsd.dataset_path("Traffic", progress=False)
    assert path.read_text() == body


def test_download_without_a_checksum_warns_with_the_md5(isolated, server, monkeypatch):
    root, base = server
    body = b"date,0,OT\n2016-07-01 00:00:00,1.0,2.0\n"
    (root / "electricity.csv.gz").write_bytes(gzip.compress(body))
    _point_entry(monkeypatch, "ECL", urls=(f"{base}/electricity.csv.gz",))
    md5 = hashlib.md5(body).hexdigest()
    with pytest.warns(UserWarning, match=md5):
        path = tsd.dataset_path("electricity", progress=False)
    assert path.name == "electricity.csv.gz"  # kept gzipped as served
    # the first download's md5 is recorded beside it, and verify=True checks against it
    record = path.with_name(path.name + ".md5")
    assert record.read_text().split()[:2] == [md5, "electricity.csv.gz"]
    assert tsd.dataset_path("electricity", verify=True) == path
    path.write_bytes(gzip.compress(body + b"2016-07-01 01:00:00,1.0,3.0\n"))
    with pytest.raises(tsd.ChecksumError):
        tsd.dataset_path("electricity", verify=True)


def test_unreachable_source_reports_the_error(isolated, monkeypatch):
    # port 9 on loopback ("discard") is closed in practice: connection refused at once
    _point_entry(monkeypatch, "Traffic", urls=("http://127.0.0.1:9/traffic.csv",))
    with pytest.raises(tsd.DatasetNotFoundError, match=r"Download failed: http://127\.0\.0\.1:9"):
        tsd.dataset_path("Traffic", progress=False)
