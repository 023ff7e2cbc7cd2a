"""The long-horizon forecasting protocol: borders, window counts, scaling, user data checks."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader

import titans_seq.data as tsd

MIRROR = tsd.data_dirs()[0] if tsd.data_dirs() else None
needs_mirror = pytest.mark.skipif(
    MIRROR is None or not (MIRROR / "timeseries").is_dir(),
    reason="the offline data mirror ($TITANS_SEQ_DATA) is not available",
)


@pytest.fixture(scope="module")
def etth1():
    """forecast_splits('ETTh1', 96, 96) and the raw frame, loaded once for the module."""
    if MIRROR is None:
        pytest.skip("no data mirror")
    return tsd.forecast_splits("ETTh1", 96, 96), tsd.load_timeseries("ETTh1")


def _benchmark_csv(n_rows: int, n_series: int, *, freq: str = "h", seed: int = 0):
    """A frame in the ECL/Traffic file format: date, "0".."n-2", OT (the target last)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n_rows, n_series)).cumsum(axis=0)
    columns = [str(i) for i in range(n_series - 1)] + ["OT"]
    frame = pd.DataFrame(values, columns=columns)
    frame.insert(0, "date", pd.date_range("2016-07-01 02:00", periods=n_rows, freq=freq))
    return frame


# ---------------------------------------------------------------- benchmark files


@needs_mirror
@pytest.mark.parametrize(
    ("name", "rows", "channels"), [("ETTh1", 17420, 7), ("ETTm1", 69680, 7), ("Weather", 52696, 21)]
)
def test_benchmark_row_counts_and_target_last(name, rows, channels):
    frame = tsd.load_timeseries(name)
    assert frame.shape == (rows, channels)
    assert frame.columns[-1] == "OT"
    assert isinstance(frame.index, pd.DatetimeIndex) and frame.index[0].year in (2016, 2020)
    assert frame.dtypes.eq(np.float64).all()


@needs_mirror
@pytest.mark.parametrize(
    ("name", "borders", "windows"),
    [
        # the Time-Series-Library logs for seq_len 96, pred_len 96: "train 8449 val 2785 ..."
        ("ETTh1", ((0, 8640), (8544, 11520), (11424, 14400)), (8449, 2785, 2785)),
        ("ETTm1", ((0, 34560), (34464, 46080), (45984, 57600)), (34369, 11425, 11425)),
        ("Weather", ((0, 36887), (36791, 42157), (42061, 52696)), (36696, 5175, 10444)),
    ],
)
def test_split_borders_and_window_counts_match_the_benchmark(name, borders, windows):
    splits = tsd.forecast_splits(name, lookback=96, horizon=96)
    for split, (start, end), count in zip(splits[:3], borders, windows):
        assert split.rows == (start, end)
        assert len(split) == (end - start) - 96 - 96 + 1 == count


def test_ett_and_custom_borders_follow_the_formulas():
    hour = tsd.split_borders("ett_hour", 17420, 96)
    assert (hour.train, hour.val, hour.test) == ((0, 8640), (8544, 11520), (11424, 14400))
    minute = tsd.split_borders("ett_15min", 69680, 336)
    assert minute.val == (4 * 8640 - 336, 4 * 11520) and minute.test[1] == 4 * 14400
    n = 26304  # ECL
    custom = tsd.split_borders("custom", n, 96)
    num_train, num_test = int(n * 0.7), int(n * 0.2)
    num_val = n - num_train - num_test
    assert custom.train == (0, num_train)
    assert custom.val == (num_train - 96, num_train + num_val)
    assert custom.test == (n - num_test - 96, n)


@needs_mirror
@pytest.mark.parametrize(
    ("horizon", "counts"), [(192, (8353, 2689, 2689)), (720, (7825, 2161, 2161))]
)
def test_etth1_longer_horizons(horizon, counts):
    splits = tsd.forecast_splits("ETTh1", 96, horizon)
    assert tuple(len(s) for s in splits[:3]) == counts


@needs_mirror
def test_windows_are_stride_one_with_lookback_overlap_and_none_dropped(etth1):
    (train, val, test, scaler), frame = etth1
    normalized = (frame.to_numpy() - scaler.mean_) / scaler.scale_
    x, y = train[5]
    assert x.shape == (96, 7) and y.shape == (96, 7)
    assert x.dtype == torch.float32 and y.dtype == torch.float32
    np.testing.assert_allclose(x.numpy(), normalized[5:101], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), normalized[101:197], rtol=1e-6, atol=1e-6)
    # val's first input reaches back `lookback` rows into train; its first target is row 8640
    vx, vy = val[0]
    np.testing.assert_allclose(vx.numpy(), normalized[8544:8640], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(vy[0].numpy(), normalized[8640], rtol=1e-6, atol=1e-6)
    # the last test window ends exactly at the protocol's end: nothing dropped
    tx, ty = test[-1]
    np.testing.assert_allclose(ty[-1].numpy(), normalized[14399], rtol=1e-6, atol=1e-6)
    assert test.forecast_timestamps(-1)[-1] == frame.index[14399]
    with pytest.raises(IndexError):
        test[len(test)]
    # target rows of consecutive splits tile [8640, 14400) without overlap
    assert val.rows[0] + val.lookback == train.rows[1]
    assert test.rows[0] + test.lookback == val.rows[1]


@needs_mirror
def test_scaler_statistics_are_those_of_the_train_rows(etth1):
    (train, val, _, scaler), frame = etth1
    rows = frame.iloc[:8640].to_numpy()
    np.testing.assert_allclose(scaler.mean_, rows.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(scaler.scale_, rows.std(axis=0, ddof=0), rtol=1e-12)
    normalized = train.values.double()
    np.testing.assert_allclose(normalized.mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(normalized.std(0, unbiased=False).numpy(), 1.0, atol=1e-5)
    assert abs(val.values.double().mean().item()) > 1e-3  # val is not re-fit
    back = scaler.inverse_transform(train.values[:3].double())
    np.testing.assert_allclose(back.numpy(), rows[:3], rtol=1e-5)


@needs_mirror
def test_features_s_and_ms_select_the_target(etth1):
    _, frame = etth1
    s_train, _, _, s_scaler = tsd.forecast_splits("ETTh1", 96, 24, features="S")
    x, y = s_train[0]
    assert x.shape == (96, 1) and y.shape == (24, 1) and s_train.columns == ["OT"]
    assert s_scaler.mean_[0] == pytest.approx(frame["OT"].iloc[:8640].mean())
    ms_train, *_ = tsd.forecast_splits("ETTh1", 96, 24, features="MS")
    x, y = ms_train[0]
    assert x.shape == (96, 7) and y.shape == (24, 1)
    torch.testing.assert_close(y, ms_train.values[96:120, -1:])


@needs_mirror
def test_registered_dataset_accepts_another_target(etth1):
    _, frame = etth1
    train, *_ = tsd.forecast_splits("ETTh1", 96, 24, features="S", target="HUFL")
    assert train.columns == ["HUFL"]
    full, *_ = tsd.forecast_splits("ETTh1", 96, 24, target="HUFL")
    assert full.columns[-1] == "HUFL" and full.columns[-2] == "OT"


def test_forecast_windows_from_a_tensor_with_gathered_targets():
    values = torch.arange(40, dtype=torch.float64).reshape(10, 4)
    windows = tsd.ForecastWindows(values, 3, 2, target_columns=[0, 2])
    assert len(windows) == 10 - 3 - 2 + 1
    x, y = windows[1]
    assert x.dtype == torch.float32 and x.shape == (3, 4)
    torch.testing.assert_close(y, values[4:6][:, [0, 2]].float())
    with pytest.raises(ValueError, match="column names"):
        tsd.ForecastWindows(values, 3, 2, columns=["a"])


def test_nullable_integer_columns_are_accepted():
    frame = pd.DataFrame({"a": pd.array([1, None, 3] * 100, dtype="Int64"), "OT": 1.0})
    loaded = tsd.load_timeseries(frame, missing="ffill")
    assert loaded.dtypes.eq(np.float64).all() and loaded["a"].iloc[1] == 1.0


@needs_mirror
def test_dataloader_batches_windows(etth1):
    (train, *_), _ = etth1
    x, y = next(iter(DataLoader(train, batch_size=4, shuffle=False)))
    assert x.shape == (4, 96, 7) and y.shape == (4, 96, 7)


# ---------------------------------------------------------------- ECL / Traffic format


@pytest.mark.parametrize(
    ("name", "relative", "compress"),
    [("ECL", "electricity/electricity.csv", False), ("Traffic", "timeseries/traffic.csv.gz", True)],
)
def test_ecl_and_traffic_loaders_on_generated_files(
    tmp_path, monkeypatch, name, relative, compress
):
    frame = _benchmark_csv(1000, 30)
    target = tmp_path / relative
    target.parent.mkdir(parents=True)
    text = frame.to_csv(index=False).encode()
    target.write_bytes(gzip.compress(text) if compress else text)
    monkeypatch.setenv("TITANS_SEQ_DATA", str(tmp_path))
    monkeypatch.setenv("TITANS_SEQ_OFFLINE", "1")
    assert tsd.dataset_path(name) == target
    loaded = tsd.load_timeseries(name)
    assert loaded.shape == (1000, 30) and loaded.columns[-1] == "OT"
    train, val, test, scaler = tsd.forecast_splits(name, lookback=96, horizon=24)
    # custom 70/10/20: num_train 700, num_test 200, num_val 100
    assert (train.rows, val.rows, test.rows) == ((0, 700), (604, 800), (704, 1000))
    assert (len(train), len(val), len(test)) == (700 - 119, 196 - 119, 296 - 119)
    np.testing.assert_allclose(scaler.mean_, frame.iloc[:700, 1:].mean().to_numpy())


# ---------------------------------------------------------------- user data


def test_user_csv_dataframe_and_array_sources(tmp_path):
    frame = _benchmark_csv(400, 4, freq="15min")
    frame = frame[["date", "OT", "0", "1", "2"]]  # target not last in the file
    path = tmp_path / "mine.csv"
    frame.to_csv(path, index=False)
    from_csv = tsd.forecast_splits(path, 48, 12, target="OT")
    assert from_csv.train.columns == ["0", "1", "2", "OT"]
    from_frame = tsd.forecast_splits(frame.set_index("date"), 48, 12, target="OT")
    torch.testing.assert_close(from_csv.test.values, from_frame.test.values)
    assert from_frame.test.timestamps[-1] == frame["date"].iloc[-1]
    from_array = tsd.forecast_splits(frame[["0", "1", "2", "OT"]].to_numpy(), 48, 12)
    torch.testing.assert_close(from_array.val.values, from_csv.val.values)
    assert from_array.val.timestamps is None and from_array.val.forecast_timestamps(0) is None
    # without `target`, the column order is kept: the last column is the target
    assert tsd.forecast_splits(path, 48, 12).train.columns[-1] == "2"


def test_constant_channel_scales_without_dividing_by_zero():
    values = np.random.default_rng(0).normal(size=(300, 3))
    values[:, 1] = 5.0
    train, val, test, scaler = tsd.forecast_splits(values, 24, 8, protocol="custom")
    assert scaler.scale_[1] == 1.0
    assert torch.isfinite(train.values).all() and (train.values[:, 1] == 0).all()


def test_scale_false_keeps_raw_values():
    values = np.arange(600, dtype=np.float64).reshape(300, 2)
    train, _, _, scaler = tsd.forecast_splits(values, 24, 8, scale=False)
    assert scaler is None and train.values[0, 1].item() == 1.0


def test_missing_values_error_or_fill():
    frame = _benchmark_csv(300, 3)
    frame.loc[10, "0"] = np.nan
    frame.loc[20, "1"] = np.inf
    with pytest.raises(tsd.DataError, match=r"2 missing or infinite.*'0': 1 \(first at row 10"):
        tsd.forecast_splits(frame, 24, 8)
    filled = tsd.load_timeseries(frame, missing="ffill")
    assert filled.loc[filled.index[10], "0"] == frame.loc[9, "0"]
    inter = tsd.load_timeseries(frame, missing="interpolate")
    assert inter.loc[inter.index[20], "1"] == pytest.approx(
        (frame.loc[19, "1"] + frame.loc[21, "1"]) / 2
    )
    frame["2"] = np.nan
    with pytest.raises(tsd.DataError, match="without any finite value"):
        tsd.load_timeseries(frame, missing="ffill")
    with pytest.raises(ValueError, match="missing="):
        tsd.load_timeseries(frame, missing="zero")


def test_regular_grid_of_timestamps_with_gaps():
    from titans_seq.data.frames import regular_grid

    hourly = pd.date_range("2024-03-30", periods=72, freq="h", tz="Europe/Berlin")  # a DST change
    grid, freq = regular_grid(hourly.delete([5, 40, 41]))
    assert freq == "h" and grid.equals(hourly)
    for unit in ("s", "ms", "us", "ns"):  # asi8 counts the index's own unit
        quarter = pd.date_range("2024-01-01", periods=50, freq="15min").as_unit(unit)
        grid, freq = regular_grid(quarter.delete([3, 4]))
        assert freq == "15min" and len(grid) == 50
    business = pd.date_range("2024-01-01", periods=60, freq="B")
    grid, freq = regular_grid(business.delete([10, 30]))  # holidays, weekends left out
    assert freq == "B" and grid.equals(business)
    assert regular_grid(hourly)[0] is hourly
    irregular = pd.DatetimeIndex(["2024-01-01 00:00", "01:00", "02:30", "03:00", "05:10"])
    assert regular_grid(irregular) is None  # no spacing is the rule
    off_grid = hourly.delete([5]).insert(5, hourly[5] + pd.Timedelta(minutes=20))
    assert regular_grid(off_grid.sort_values()) is None  # a stamp between grid points
    assert regular_grid(hourly[:2]) is None


def test_missing_time_steps_are_rows_to_fill():
    frame = _benchmark_csv(200, 3)
    gappy = frame.drop(index=[10, 11, 150]).reset_index(drop=True)
    as_is = tsd.load_timeseries(gappy)  # "error" leaves the stamps alone: no NaN to refuse
    assert len(as_is) == 197
    with pytest.warns(UserWarning, match=r"3 time step\(s\) missing from the h grid \(1.5% of 200"):
        filled = tsd.load_timeseries(gappy, missing="interpolate")
    assert len(filled) == 200 and filled.index.equals(pd.DatetimeIndex(frame["date"], name="date"))
    expected = frame.loc[9, "0"] + (frame.loc[12, "0"] - frame.loc[9, "0"]) / 3
    assert filled["0"].iloc[10] == pytest.approx(expected)
    with pytest.warns(UserWarning, match="inserted"):
        carried = tsd.load_timeseries(gappy, missing="ffill")
    assert carried["OT"].iloc[150] == frame.loc[149, "OT"]
    repeated = pd.concat([gappy.iloc[:50], gappy.iloc[49:]]).reset_index(drop=True)
    kept = tsd.load_timeseries(repeated, missing="ffill", duplicates="keep")
    assert len(kept) == 198  # a repeated stamp has no grid to fill: left as given


def test_too_short_series_reports_the_numbers():
    with pytest.raises(
        tsd.DataError, match=r"150 rows, shorter than lookback 96 \+ horizon 96 = 192"
    ):
        tsd.forecast_splits(np.zeros((150, 2)), 96, 96)
    # long enough overall, but the 10% validation split cannot hold one window
    with pytest.raises(
        tsd.DataError, match=r"the val split has 146 rows incl\. the 96-row lookback"
    ):
        tsd.forecast_splits(np.zeros((500, 2)), 96, 96)
    with pytest.raises(tsd.DataError, match="ETT protocol uses the first 20 months"):
        tsd.forecast_splits(np.zeros((5000, 2)), 96, 96, protocol="ett_hour")
    with pytest.raises(tsd.DataError, match="lookback 800 is longer than the train split"):
        tsd.split_borders("custom", 1000, 800)


def test_bad_timestamps_are_rejected():
    frame = _benchmark_csv(300, 3)
    swapped = frame.copy()
    swapped.loc[[5, 6], "date"] = swapped.loc[[6, 5], "date"].to_numpy()
    with pytest.raises(tsd.DataError, match="not increasing: row 6"):
        tsd.load_timeseries(swapped)
    duplicated = frame.copy()
    duplicated.loc[7, "date"] = duplicated.loc[6, "date"]
    with pytest.raises(tsd.DataError, match="1 duplicated timestamp"):
        tsd.load_timeseries(duplicated)
    assert len(tsd.load_timeseries(duplicated, duplicates="first")) == 299
    assert len(tsd.load_timeseries(duplicated, duplicates="keep")) == 300
    garbled = frame.astype({"date": str})
    garbled.loc[3, "date"] = "not a date"
    with pytest.raises(tsd.DataError, match=r"not dates, e\.g\. rows \[3\]"):
        tsd.load_timeseries(garbled)


def test_non_numeric_columns_and_unknown_target_are_rejected(tmp_path):
    frame = _benchmark_csv(300, 3)
    frame["label"] = "x"
    with pytest.raises(tsd.DataError, match=r"non-numeric column\(s\): 'label'"):
        tsd.load_timeseries(frame)
    path = tmp_path / "dated.csv"
    frame.drop(columns="label").rename(columns={"date": "time"}).to_csv(path, index=False)
    assert tsd.load_timeseries(path).shape == (300, 3)  # a "time" column holds the timestamps
    assert tsd.load_timeseries(path, date_column="time").shape == (300, 3)
    labelled = tmp_path / "labelled.csv"
    frame.to_csv(labelled, index=False)
    with pytest.raises(tsd.DataError, match=r"labelled\.csv: non-numeric column\(s\): 'label'"):
        tsd.load_timeseries(labelled)
    with pytest.raises(tsd.DataError, match="target column 'load' not found"):
        tsd.load_timeseries(path, date_column="time", target="load")
    with pytest.raises(FileNotFoundError, match="neither a registered time-series dataset"):
        tsd.load_timeseries(tmp_path / "absent.csv")
    with pytest.raises(ValueError, match="features="):
        tsd.forecast_splits(np.zeros((300, 2)), 24, 8, features="X")


# ---------------------------------------------------------------- metrics


def test_mse_mae_over_all_elements():
    rng = np.random.default_rng(0)
    pred, true = rng.normal(size=(5, 8, 3)), rng.normal(size=(5, 8, 3))
    assert tsd.mse(pred, true) == pytest.approx(np.mean((pred - true) ** 2))
    assert tsd.mae(torch.tensor(pred), torch.tensor(true)) == pytest.approx(
        np.mean(np.abs(pred - true))
    )
    with pytest.raises(ValueError, match="shape mismatch"):
        tsd.mse(pred, true[:, :4])
