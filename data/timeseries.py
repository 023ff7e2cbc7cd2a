"""The long-horizon forecasting data protocol: splits, train-only scaling, sliding windows.

`forecast_splits("ETTh1", lookback=96, horizon=96)` reproduces the Informer / Autoformer /
Time-Series-Library data pipeline: the protocol's borders (see `titans_seq.data.splits`),
a z-score scaler fit on the train rows only, and every stride-1 window
[i, i + lookback + horizon) that fits inside a split, none dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from titans_seq.errors import did_you_mean

from .errors import DataError
from .files import dataset_path
from .frames import prepare_frame, read_csv_frame
from .registry import get_dataset, is_registered, list_datasets
from .scaler import StandardScaler
from .splits import SPLITS, SplitBorders, split_borders

FEATURES = ("M", "S", "MS")


class ForecastWindows(Dataset):
    """Stride-1 windows over one split of a (normalized) multivariate series.

    Item i is `(x, y)` with x = values[i : i + L] of shape [L, C] and
    y = values[i + L : i + L + H, target_columns] of shape [H, C_y] (C_y = C, or 1 for
    features "MS"), both float32. There are T - L - H + 1 windows for a split of T rows.

    Attributes:
        values: float32 tensor [T, C], the split's rows (including the lookback overlap).
        lookback, horizon: L and H.
        columns: the C channel names; the last one is the target.
        target_columns: indices into `columns` that `y` holds.
        timestamps: DatetimeIndex [T] of the rows, or None for data without timestamps.
        rows: (start, end) of the split in the full series.
    """

    def __init__(
        self,
        values,
        lookback: int,
        horizon: int,
        *,
        target_columns: list[int] | None = None,
        columns: list[str] | None = None,
        timestamps: pd.DatetimeIndex | None = None,
        rows: tuple[int, int] | None = None,
    ):
        if isinstance(values, torch.Tensor):
            values = values.detach().to("cpu", torch.float32)
        else:
            values = torch.as_tensor(np.asarray(values, dtype=np.float32))
        if values.ndim != 2:
            raise ValueError(f"values must be [T, C], got shape {tuple(values.shape)}")
        if lookback < 1 or horizon < 1:
            raise ValueError(f"lookback and horizon must be >= 1, got {lookback}, {horizon}")
        num_channels = values.shape[1]
        self.values = values
        self.lookback, self.horizon = int(lookback), int(horizon)
        self.columns = (
            list(columns) if columns is not None else [str(i) for i in range(num_channels)]
        )
        if len(self.columns) != num_channels:
            raise ValueError(f"{len(self.columns)} column names for {num_channels} channels")
        self.target_columns = (
            list(range(num_channels)) if target_columns is None else list(target_columns)
        )
        if not self.target_columns or not all(0 <= c < num_channels for c in self.target_columns):
            raise ValueError(
                f"target_columns must be a non-empty list of indices in [0, {num_channels}), "
                f"got {self.target_columns}"
            )
        # a contiguous tail of columns is sliced as a view instead of gathered per item
        tail = list(range(num_channels - len(self.target_columns), num_channels))
        self._y_cols = (
            slice(tail[0], None)
            if self.target_columns == tail
            else torch.tensor(self.target_columns)
        )
        if timestamps is not None and len(timestamps) != values.shape[0]:
            raise ValueError(f"{len(timestamps)} timestamps for {values.shape[0]} rows")
        self.timestamps = timestamps
        self.rows = rows if rows is not None else (0, values.shape[0])

    def __len__(self) -> int:
        return max(self.values.shape[0] - self.lookback - self.horizon + 1, 0)

    def _window_index(self, index: int) -> int:
        n = len(self)
        position = index + n if index < 0 else index
        if not 0 <= position < n:
            raise IndexError(f"window {index} out of range for {n} windows")
        return position

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = self._window_index(index)
        split = self.lookback + index
        x = self.values[index:split]
        y = self.values[split : split + self.horizon, self._y_cols]
        return x, y

    @property
    def num_channels(self) -> int:
        return self.values.shape[1]

    def forecast_timestamps(self, index: int) -> pd.DatetimeIndex | None:
        """Timestamps [H] of window `index`'s targets (None without timestamps)."""
        if self.timestamps is None:
            return None
        start = self.lookback + self._window_index(index)
        return self.timestamps[start : start + self.horizon]


class ForecastSplits(NamedTuple):
    """`train, val, test, scaler = forecast_splits(...)`; scaler is None when scale=False."""

    train: ForecastWindows
    val: ForecastWindows
    test: ForecastWindows
    scaler: StandardScaler | None


def load_timeseries(
    source,
    *,
    date_column: str | None = "date",
    target: str | None = None,
    missing: str = "error",
    duplicates: str | None = None,
    download: bool = True,
    verify: bool = True,
) -> pd.DataFrame:
    """A validated float64 DataFrame [T, C] (target last) from any supported source.

    Args:
        source: a registered dataset name ("ETTh1", "ECL", ...), a CSV path (plain or .gz),
            a DataFrame (date column or DatetimeIndex) or an array [T, C].
        date_column, target, missing, duplicates: see `titans_seq.data.frames.prepare_frame`;
            a registered dataset uses its loader's date column, target ("OT") and duplicate
            policy unless `target`/`duplicates` are given; other data defaults to
            duplicates="error".
        download: allow downloading a registered dataset that is not available locally.
        verify: check a registered dataset's local copy against its md5 (`dataset_path`);
            False skips the check.
    """
    if isinstance(source, str) and is_registered(source):
        entry = get_dataset(source)
        domain = entry.info.get("domain", "timeseries")
        if domain != "timeseries":
            raise DataError(f"dataset {source!r} is a {domain} dataset, not a time series")
        loader_options = {"missing": missing}
        if target is not None:
            loader_options["target"] = target
        if duplicates is not None:
            loader_options["duplicates"] = duplicates
        path = dataset_path(entry, download=download, verify=verify)
        return entry.load(path, **loader_options)
    options = {
        "date_column": date_column,
        "target": target,
        "missing": missing,
        "duplicates": duplicates or "error",
    }
    if not isinstance(source, (str, Path)):
        return prepare_frame(source, **options)
    if not Path(source).is_file():
        series = [n for n in list_datasets() if get_dataset(n).file.startswith("timeseries/")]
        raise FileNotFoundError(
            f"{source!r} is neither a registered time-series dataset"
            f"{did_you_mean(str(source), series)} ({', '.join(series)}) nor an existing CSV file"
        )
    return read_csv_frame(source, **options)


def forecast_splits(
    source,
    lookback: int = 96,
    horizon: int = 96,
    *,
    features: str = "M",
    target: str | None = None,
    protocol: str | None = None,
    scale: bool = True,
    date_column: str | None = "date",
    missing: str = "error",
    duplicates: str | None = None,
    download: bool = True,
    verify: bool = True,
) -> ForecastSplits:
    """Train/val/test `ForecastWindows` and the scaler fit on the train rows.

    Args:
        source: see `load_timeseries` (registered name, CSV path, DataFrame or array).
        lookback: L, input steps per window. horizon: H, forecast steps per window.
        features: "M" (all channels in and out, the default), "S" (the target only, in
            and out) or "MS" (all channels in, the target out: y is [H, 1]).
        target: target column (moved last); registered benchmarks use "OT"; None for other
            data keeps the column order (the last column is the target).
        protocol: "ett_hour", "ett_15min" or "custom" (70/10/20); default: the registry's
            protocol for a registered dataset, else "custom".
        scale: z-score every split with statistics of the train rows (the benchmark
            convention; metrics are then reported on these normalized values).
        date_column, missing, duplicates, download, verify: see `load_timeseries`.

    Raises:
        DataError: invalid data, or a split too short for one window of L + H rows.
    """
    if features not in FEATURES:
        raise ValueError(f"features={features!r}; choose one of {FEATURES}")
    registered = isinstance(source, str) and is_registered(source)
    if protocol is None:
        protocol = get_dataset(source).protocol if registered else "custom"
    frame = load_timeseries(
        source,
        date_column=date_column,
        target=target,
        missing=missing,
        duplicates=duplicates,
        download=download,
        verify=verify,
    )
    if features == "S":
        frame = frame.iloc[:, -1:]
    n_rows = frame.shape[0]
    if n_rows < lookback + horizon:
        raise DataError(
            f"the series has {n_rows} rows, shorter than lookback {lookback} + horizon "
            f"{horizon} = {lookback + horizon} rows needed for a single window"
        )
    borders = split_borders(protocol, n_rows, lookback)
    _check_window_counts(borders, lookback, horizon, n_rows)

    values = frame.to_numpy(dtype=np.float64)
    scaler = None
    if scale:
        scaler = StandardScaler().fit(values[borders.slice("train")])
        values = scaler.transform(values)
    timestamps = frame.index if isinstance(frame.index, pd.DatetimeIndex) else None
    num_channels = values.shape[1]
    targets = [num_channels - 1] if features == "MS" else None

    def windows(split: str) -> ForecastWindows:
        rows = borders.slice(split)
        return ForecastWindows(
            values[rows],
            lookback,
            horizon,
            target_columns=targets,
            columns=list(frame.columns),
            timestamps=None if timestamps is None else timestamps[rows],
            rows=borders[split],
        )

    return ForecastSplits(windows("train"), windows("val"), windows("test"), scaler)


def _check_window_counts(borders: SplitBorders, lookback: int, horizon: int, n_rows: int):
    for split in SPLITS:
        start, end = borders[split]
        if end - start < lookback + horizon:
            overlap = "" if split == "train" else f" incl. the {lookback}-row lookback overlap"
            raise DataError(
                f"the {split} split has {end - start} rows{overlap} (rows {start}..{end} of "
                f"{n_rows}), fewer than lookback {lookback} + horizon {horizon} = "
                f"{lookback + horizon} needed for one window; use a longer series or a "
                "shorter lookback/horizon"
            )
