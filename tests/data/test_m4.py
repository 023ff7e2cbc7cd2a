"""M4 Hourly and Weekly: the files as published, long frames, and the competition's scores."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

import titans_seq.data as tsd
from titans_seq.data import m4 as m4_data
from titans_seq.data.errors import DataError

MIRROR = tsd.data_dirs()[0] if tsd.data_dirs() else None
needs_m4 = pytest.mark.skipif(
    MIRROR is None or not (MIRROR / "timeseries" / "m4").is_dir(),
    reason="the offline data mirror ($TITANS_SEQ_DATA) has no M4 files",
)


def _last(frame: pd.DataFrame, rows: int) -> dict[str, np.ndarray]:
    return {u: g.to_numpy()[-rows:] for u, g in frame.groupby("unique_id", sort=False)["y"]}


def _insample(m4) -> dict[str, np.ndarray]:
    return {u: g.to_numpy() for u, g in m4.train.groupby("unique_id", sort=False)["y"]}


@pytest.fixture(scope="module")
def hourly():
    return m4_data.load_m4("Hourly", download=False)


@pytest.fixture(scope="module")
def weekly():
    return m4_data.load_m4("weekly", download=False)


def test_the_groups_are_registered_with_the_competitions_sources():
    for name in ("M4-Hourly-train", "M4-Hourly-test", "M4-Weekly-train", "M4-Weekly-test"):
        entry = tsd.get_dataset(name)
        assert entry.urls[0].startswith(
            "https://raw.githubusercontent.com/Mcompetitions/M4-methods/master/Dataset/"
        )
        assert entry.md5 is not None and entry.loader is m4_data.read_m4_file


@needs_m4
def test_load_gives_long_frames_on_a_regular_grid(hourly, weekly):
    for m4, series, horizon, freq in ((hourly, 414, 48, "h"), (weekly, 359, 13, "W-MON")):
        assert list(m4.train.columns) == ["unique_id", "ds", "y"]
        assert m4.train["unique_id"].nunique() == series == m4.test["unique_id"].nunique()
        assert (m4.test.groupby("unique_id").size() == horizon).all()
        ids = m4.train["unique_id"].unique()
        for uid in (ids[0], ids[-1]):
            train = m4.train[m4.train.unique_id == uid]["ds"]
            test = m4.test[m4.test.unique_id == uid]["ds"]
            both = pd.DatetimeIndex(pd.concat([train, test]))
            assert pd.infer_freq(both) == freq  # the test rows continue the series' grid
    assert hourly.train.groupby("unique_id").size().agg(["min", "max"]).tolist() == [700, 960]


@needs_m4
def test_seasonal_naive_and_naive_score_as_the_competition_published(hourly, weekly):
    seasonal = {u: np.tile(v, 2) for u, v in _last(hourly.train, 24).items()}
    scores = m4_data.score_arrays(seasonal, hourly)
    assert (round(scores.smape, 3), round(scores.mase, 3)) == (13.912, 1.193)
    naive = {u: np.repeat(v, 13) for u, v in _last(weekly.train, 1).items()}
    scores = m4_data.score_arrays(naive, weekly)
    assert (round(scores.smape, 3), round(scores.mase, 3)) == (9.161, 2.777)
    assert scores.owa == pytest.approx(1.0, abs=1e-4)


@needs_m4
def test_naive2_reproduces_the_competitions_benchmark(hourly):
    forecasts = {u: m4_data.naive2_forecast(v, 48, 24) for u, v in _insample(hourly).items()}
    scores = m4_data.score_arrays(forecasts, hourly)
    assert (round(scores.smape, 3), round(scores.mase, 3)) == (18.383, 2.395)
    assert scores.owa == pytest.approx(1.0, abs=1e-4)


def test_naive2_puts_the_season_back_and_is_naive_without_one():
    t = np.arange(24 * 20)
    daily = 100.0 * (1.0 + 0.5 * np.sin(2 * np.pi * t / 24))
    np.testing.assert_allclose(m4_data.naive2_forecast(daily, 48, 24), np.tile(daily[:24], 2))
    noise = np.random.default_rng(1).normal(size=300) + 50
    assert not m4_data.is_seasonal(noise, 24)
    np.testing.assert_array_equal(m4_data.naive2_forecast(noise, 5, 24), np.full(5, noise[-1]))


def test_scores_of_a_toy_group():
    group = m4_data.M4Group("Hourly", 2, 1, "h", 2, (10.0, 1.0), ("0" * 32, "0" * 32))
    insample = {"a": np.array([1.0, 2.0, 4.0]), "b": np.array([2.0, 3.0])}
    train = m4_data.long_frame(insample, "h", {"a": 0, "b": 0})
    actual = {"a": np.array([4.0, 4.0]), "b": np.array([1.0, 3.0])}
    test = m4_data.long_frame(actual, "h", {"a": 3, "b": 2})
    toy = m4_data.M4Data(group, train, test)
    scores = m4_data.score_arrays({"a": np.array([4.0, 2.0]), "b": np.array([2.0, 2.0])}, toy)
    # a: sMAPE (0 + 200 * 2 / 6) / 2, MASE 1 / 1.5; b: (200 / 3 + 200 / 5) / 2, MASE 1 / 1
    assert scores.smape == pytest.approx((100 / 3 + 160 / 3) / 2)
    assert scores.mase == pytest.approx((2 / 3 + 1) / 2)
    assert scores.owa == pytest.approx(0.5 * (scores.smape / 10.0 + scores.mase / 1.0))
    frame = pd.concat([test[["unique_id", "ds"]].assign(f=[4.0, 2.0, 2.0, 2.0])])
    assert m4_data.m4_scores(toy, frame).smape == pytest.approx(scores.smape)
    with pytest.raises(DataError, match="no forecast for 1 series"):
        m4_data.score_arrays({"a": np.array([4.0, 2.0])}, toy)
    with pytest.raises(DataError, match="not 2 finite values"):
        m4_data.score_arrays({"a": np.array([4.0, np.nan]), "b": np.zeros(2)}, toy)
    with pytest.raises(DataError, match="no forecast for the test rows of 1 series"):
        m4_data.m4_scores(toy, frame.iloc[:2])


def test_damaged_files_are_refused_by_line(tmp_path):
    path = tmp_path / "Hourly-train.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write('"V1","V2","V3"\n"H1","1","2"\n"H2","1","x"\n')
    with pytest.raises(DataError, match=r"line 3 \(H2\): a value is not a number"):
        m4_data.read_m4_file(path)
    plain = tmp_path / "Weekly-train.csv"
    plain.write_text('"V1","V2"\n"W1","1"\n"W1","2"\n')
    with pytest.raises(DataError, match="W1 appears twice"):
        m4_data.read_m4_file(plain)
    plain.write_text('"id","V2"\n"W1","1"\n')
    with pytest.raises(DataError, match="not an M4 file"):
        m4_data.read_m4_file(plain)
    plain.write_text('"V1","V2","V3"\n"W1","5",""\n')
    assert m4_data.read_m4_file(plain)["W1"].tolist() == [5.0]
    with pytest.raises(DataError, match="unknown M4 group 'Daily'"):
        m4_data.load_m4("Daily")
