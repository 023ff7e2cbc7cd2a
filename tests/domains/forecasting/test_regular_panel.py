"""The one-pass reader of a long frame's regular series gives exactly what reading the
series one by one gives, and leaves every series it cannot vouch for to that reader."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from titans_seq.data import DataError
from titans_seq.domains.forecasting import regular_panel, series_input
from titans_seq.domains.forecasting.series_input import ExogLists, long_series


def _one_by_one(uids, stamps, columns):
    codes, names = pd.factorize(uids.to_numpy(), sort=True)
    return {}, regular_panel._positions_by_series(codes, names)


def _series(uid, ds, y, **covariates):
    return pd.DataFrame({"unique_id": uid, "ds": ds, "y": y, **covariates})


def _odd_panel(rng) -> pd.DataFrame:
    """Series of every kind the reader meets: regular ones at several frequencies and
    weekdays, ones with a gap, a NaN, a calendar step, too few rows; rows shuffled."""
    parts = []
    for i, (start, freq, n) in enumerate([
        ("2020-01-01", "h", 50), ("2020-01-03 05:00", "h", 37), ("2021-02-01", "D", 30),
        ("2020-01-05", "W-SUN", 12), ("2020-01-08", "W-WED", 9), ("2020-01-01", "15min", 40),
        ("2020-01-01", "MS", 14), ("2019-12-31", "2h", 11), ("2020-03-01", "D", 2),
    ]):  # fmt: skip
        ds = pd.date_range(start, periods=n, freq=freq)
        parts.append(_series(f"s{i}", ds, rng.normal(size=n), temp=rng.normal(size=n)))
    gap = pd.date_range("2020-01-01", periods=20, freq="h").delete(7)
    parts.append(_series("gap", gap, rng.normal(size=19), temp=rng.normal(size=19)))
    nan = rng.normal(size=15)
    nan[4] = np.nan
    parts.append(_series("nan", pd.date_range("2020-01-01", periods=15, freq="D"), nan,
                         temp=rng.normal(size=15)))  # fmt: skip
    frame = pd.concat(parts, ignore_index=True)
    return frame.sample(frac=1.0, random_state=0).reset_index(drop=True)


def _read_both(frame, monkeypatch, **options):
    lists = ExogLists.of(options.pop("hist", ["temp"]), None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the inserted steps' warning, in both readers
        fast = long_series(frame, lists, options.get("missing", "ffill"), "fit")
        monkeypatch.setattr(series_input, "split_regular", _one_by_one)
        slow = long_series(frame, lists, options.get("missing", "ffill"), "fit")
    return fast, slow


def _assert_same(fast, slow):
    assert [s.uid for s in fast] == [s.uid for s in slow]
    for a, b in zip(fast, slow, strict=True):
        assert a.index.equals(b.index) and a.index.name == b.index.name, a.uid
        assert a.index.dtype == b.index.dtype, a.uid
        assert a.freq == b.freq, a.uid
        for name in ("target", "hist", "futr", "static"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=a.uid)


def test_every_kind_of_series_reads_as_one_by_one(monkeypatch):
    frame = _odd_panel(np.random.default_rng(0))
    fast, slow = _read_both(frame, monkeypatch)
    _assert_same(fast, slow)
    regular, others = regular_panel.split_regular(
        frame["unique_id"].astype(str), frame["ds"], frame[["y", "temp"]]
    )
    # the gap, the NaN, the month starts and the two-row series go one by one
    assert set(others) == {"gap", "nan", "s6", "s8"}
    assert {s.uid: s.freq for s in fast}["s4"] == "W-WED"


def test_integer_steps_and_microsecond_stamps_read_as_one_by_one(monkeypatch):
    rng = np.random.default_rng(1)
    frame = pd.concat([
        _series("a", np.arange(0, 60, 5), rng.normal(size=12)),
        _series("b", np.arange(3, 23), rng.normal(size=20)),
        _series("c", np.array([0, 1, 3, 4, 5]), rng.normal(size=5)),
    ]).sample(frac=1.0, random_state=1)  # fmt: skip
    _assert_same(*_read_both(frame, monkeypatch, hist=None))
    stamps = pd.date_range("2020-01-01", periods=30, freq="h").astype("datetime64[us]")
    frame = _series("u", stamps, rng.normal(size=30))
    fast, slow = _read_both(frame, monkeypatch, hist=None)
    _assert_same(fast, slow)
    assert fast[0].index.dtype == np.dtype("datetime64[us]")


def test_errors_are_those_of_the_series_by_series_reader():
    frame = _odd_panel(np.random.default_rng(2))
    lists = ExogLists.of(["temp"], None, None)
    with pytest.raises(DataError, match="series 'gap'.*missing from the series' h grid"):
        long_series(frame, lists, "error", "fit")
    repeated = pd.concat([frame, frame[frame["unique_id"] == "s0"].iloc[:1]])
    with pytest.raises(DataError, match="series 's0'.*duplicated timestamp"):
        long_series(repeated, lists, "ffill", "fit")


def test_text_stamps_take_the_one_by_one_reader_and_nullable_values_read_alike(monkeypatch):
    frame = _odd_panel(np.random.default_rng(3))
    text = frame.assign(ds=frame["ds"].astype(str))
    regular, others = regular_panel.split_regular(
        text["unique_id"], text["ds"], text[["y", "temp"]]
    )
    assert not regular and len(others) == frame["unique_id"].nunique()
    nullable = frame.assign(y=frame["y"].astype("Float64"))
    _assert_same(*_read_both(nullable, monkeypatch))
