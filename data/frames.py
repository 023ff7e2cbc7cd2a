"""Read and validate a multivariate time series: one row per time step, one column per variable.

Everything that reaches the split protocol goes through `prepare_frame`, so registered
benchmarks and a user's own CSV/DataFrame/array are checked the same way: parseable,
unique, increasing timestamps; numeric columns; no NaN/inf unless a `missing` policy says
how to fill them; the target column last.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DataError
from .tables import (
    THOUSANDS_GROUPS,
    check_long_layout,
    find_date_column,
    is_long_table,
    parse_timestamps,
    read_csv_table,
    without_saved_row_numbers,
)

MISSING_POLICIES = ("error", "ffill", "interpolate")
DUPLICATE_POLICIES = ("error", "keep", "first")
_SHOW = 5  # how many offending items an error message lists


def read_csv_frame(
    path: str | Path,
    *,
    date_column: str | None = "date",
    target: str | None = None,
    missing: str = "error",
    duplicates: str = "error",
) -> pd.DataFrame:
    """Read a CSV file (plain or gzip; delimiter and decimal mark sniffed, see
    `tables.read_csv_table`) and validate it with `prepare_frame`.

    Returns:
        float64 DataFrame [T, C] indexed by the parsed timestamps, target column last.
    """
    path = Path(path)
    return table_frame(
        read_csv_table(path),
        path,
        date_column=date_column,
        target=target,
        missing=missing,
        duplicates=duplicates,
    )


def table_frame(
    raw: pd.DataFrame,
    path: str | Path,
    *,
    date_column: str | None = "date",
    target: str | None = None,
    missing: str = "error",
    duplicates: str = "error",
) -> pd.DataFrame:
    """`prepare_frame` of a table read from the CSV file `path` (`tables.read_csv_table`),
    its errors naming the file; a long-layout table is refused with what to do instead."""
    check_long_layout(raw, str(path))
    if is_long_table(raw):
        raise DataError(
            f"{path}: the file is in the long layout (unique_id, ds, y: a row per series and "
            "step); read it with pandas and pass the frame to TitansForecaster, which fits "
            "one model over its series"
        )
    try:
        return prepare_frame(
            raw, date_column=date_column, target=target, missing=missing, duplicates=duplicates
        )
    except DataError as error:
        raise DataError(f"{path}: {error}") from None


def prepare_frame(
    data,
    *,
    date_column: str | None = "date",
    target: str | None = None,
    missing: str = "error",
    duplicates: str = "error",
) -> pd.DataFrame:
    """Validate a series and return it as a float64 DataFrame [T, C].

    Args:
        data: a DataFrame (a `date_column` or a DatetimeIndex, one column per variable),
            or an array-like [T, C] / [T] without timestamps (columns named "0", "1", ...).
        date_column: name of the timestamp column; when it is absent the index is used if
            it is a DatetimeIndex, else a column of dates named like a timestamp (ds,
            timestamp, time, ...) or first (`tables.find_date_column`), else the rows are
            taken as equally spaced steps. None: no timestamp column.
        target: column to move last (the benchmark convention, "OT"); None keeps the order,
            i.e. the last column is the target.
        missing: what to do with missing values: "error" (default) raises on NaN/inf;
            "ffill" carries the last valid value forward (leading gaps take the first valid
            value); "interpolate" interpolates linearly in time (leading/trailing gaps take
            the nearest valid value). NaN and +-inf are both treated as missing, and so,
            under "ffill" and "interpolate", are time steps absent from the timestamps'
            regular grid (`regular_grid`): their rows are inserted, then filled, with a
            warning that counts them.
        duplicates: what to do with repeated timestamps: "error" (default) raises; "first"
            keeps the first row of each; "keep" keeps them all (needed to reproduce a
            benchmark file that has one, e.g. Weather's repeated 2020-05-12 06:00 row).

    Returns:
        DataFrame [T, C] of float64, index = timestamps (name "date") or a RangeIndex.

    Raises:
        DataError: unparseable, duplicated or decreasing timestamps; non-numeric columns;
            NaN/inf under missing="error"; an unknown target; no rows or no columns.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing={missing!r}; choose one of {MISSING_POLICIES}")
    if duplicates not in DUPLICATE_POLICIES:
        raise ValueError(f"duplicates={duplicates!r}; choose one of {DUPLICATE_POLICIES}")
    frame = _as_frame(data, date_column)
    if frame.shape[0] == 0:
        raise DataError("the series has no rows")
    if frame.shape[1] == 0:
        raise DataError("the series has no variable columns (only timestamps?)")
    names = pd.Index([str(c) for c in frame.columns])  # 1 and "1" are the same column here
    if names.duplicated().any():
        dup = sorted(set(names[names.duplicated()]))
        raise DataError(f"duplicated column names: {dup[:_SHOW]}; give every column its own")
    if isinstance(frame.index, pd.DatetimeIndex):
        frame = _check_timestamps(frame, duplicates)
    frame = _numbers_held_as_objects(frame)
    _check_numeric(frame, date_column)
    # to_numpy with na_value also converts nullable dtypes (Int64, Float64 with pd.NA)
    frame = pd.DataFrame(
        frame.to_numpy(dtype=np.float64, na_value=np.nan),
        index=frame.index,
        columns=[str(c) for c in frame.columns],
    )
    if missing != "error" and isinstance(frame.index, pd.DatetimeIndex):
        frame = _insert_missing_steps(frame)
    frame = _handle_missing(frame, missing)
    return _target_last(frame, target)


def infer_frequency(index: pd.DatetimeIndex) -> str | None:
    """The regular frequency of a DatetimeIndex as a string ("h", "15min", "B"), or None."""
    if len(index) < 3:
        return None
    with warnings.catch_warnings():
        # pandas 3.1 announces that infer_freq will return an offset object; accept both
        warnings.simplefilter("ignore")
        freq = pd.infer_freq(index)
    return getattr(freq, "freqstr", freq)


def regular_grid(index: pd.DatetimeIndex) -> tuple[pd.DatetimeIndex, str] | None:
    """The regular time grid that increasing, unique timestamps lie on, and its frequency.

    The index itself when it has a frequency; else the shortest grid from its first to its
    last stamp that holds every stamp, stepping by the most common spacing when at least
    half of the spacings are that one (or by business days, for daily data with weekends
    left out); None when there is none (no dominant spacing, spacings that are not multiples
    of it, e.g. month ends with a month missing, or fewer than 3 stamps).
    """
    freq = infer_frequency(index)
    if freq is not None:
        return index, freq
    steps = np.diff(index.asi8)
    if len(steps) < 2 or (steps <= 0).any():
        return None
    values, counts = np.unique(steps, return_counts=True)
    if counts.max() * 2 < len(steps):
        return None  # no spacing is the rule: irregular sampling, not a regular grid with gaps
    base = int(values[np.argmax(counts)])  # the most common spacing (ties: the smallest)
    step = pd.Timedelta(base, unit=index.unit)  # asi8 counts the index's own unit
    candidates = []
    if (steps % base == 0).all():
        candidates.append(pd.date_range(index[0], index[-1], freq=step))
    if step == pd.Timedelta(days=1):
        candidates.append(pd.date_range(index[0], index[-1], freq="B"))
    grids = [g for g in candidates if index.isin(g).all()]
    if not grids:
        return None
    grid = min(grids, key=len).rename(index.name)
    return grid, infer_frequency(grid)


def _insert_missing_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame reindexed on its regular grid, absent steps as NaN rows (left as is when
    the timestamps repeat or have no regular grid: the caller decides whether that is an
    error)."""
    if len(frame) < 3 or frame.index.has_duplicates:
        return frame
    found = regular_grid(frame.index)
    if found is None or len(found[0]) == len(frame):
        return frame
    grid, freq = found
    inserted = len(grid) - len(frame)
    first = grid[~grid.isin(frame.index)][0]
    warnings.warn(
        f"{inserted} time step(s) missing from the {freq} grid ({inserted / len(grid):.1%} of "
        f"{len(grid)}; the first at {first}) were inserted and will be filled",
        UserWarning,
        stacklevel=3,
    )
    return frame.reindex(grid)


def _as_frame(data, date_column: str | None) -> pd.DataFrame:
    if isinstance(data, pd.Series):
        data = data.to_frame()
    if not isinstance(data, pd.DataFrame):
        values = np.asarray(data)
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2:
            raise DataError(f"expected a [T, C] array, got shape {values.shape}")
        return pd.DataFrame(values, columns=[str(i) for i in range(values.shape[1])])
    frame = without_saved_row_numbers(data.copy())
    if not isinstance(frame.index, pd.DatetimeIndex):
        date_column = find_date_column(frame, date_column)
    if date_column is not None and date_column in frame.columns:
        stamps = _parse_dates(frame[date_column], date_column)
        frame = frame.drop(columns=[date_column])
        frame.index = pd.DatetimeIndex(stamps, name="date")
    elif isinstance(frame.index, pd.DatetimeIndex):
        frame.index = frame.index.rename("date")
    else:
        frame = frame.reset_index(drop=True)
    return frame


def _parse_dates(column: pd.Series, name: str) -> pd.Series:
    parsed = parse_timestamps(column)
    bad = parsed.isna().to_numpy()
    if bad.any():
        rows = np.flatnonzero(bad)[:_SHOW].tolist()
        values = column.iloc[rows].tolist()
        raise DataError(
            f"{int(bad.sum())} value(s) of date column {name!r} are missing or not dates, "
            f"e.g. rows {rows}: {values}"
        )
    return parsed


class DuplicateTimestampsError(DataError):
    """Timestamps that repeat. `found` says which (without advice: what to do depends on
    the caller's options); the message adds the advice of `prepare_frame`'s `duplicates`."""

    def __init__(self, found: str, advice: str):
        self.found = found
        super().__init__(f"{found}; {advice}")


def _check_timestamps(frame: pd.DataFrame, duplicates: str) -> pd.DataFrame:
    index = frame.index
    duplicated = index.duplicated()
    if duplicated.any() and duplicates == "error":
        rows = np.flatnonzero(duplicated)[:_SHOW].tolist()
        raise DuplicateTimestampsError(
            f"{int(duplicated.sum())} duplicated timestamp(s), e.g. {[str(index[r]) for r in rows]}"
            f" at rows {rows}",
            "aggregate or drop them, or pass duplicates='first' or 'keep'",
        )
    steps = np.diff(index.asi8)
    if (steps < 0).any():
        row = int(np.flatnonzero(steps < 0)[0]) + 1
        raise DataError(
            f"timestamps are not increasing: row {row} ({index[row]}) comes after "
            f"row {row - 1} ({index[row - 1]}); sort the rows by time first"
        )
    if duplicated.any() and duplicates == "first":
        frame = frame[~duplicated]
    return frame


def _check_numeric(frame: pd.DataFrame, date_column: str | None) -> None:
    bad = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if not bad:
        return
    described, hints = [], []
    for c in bad[:_SHOW]:
        value = _first_non_number(frame[c])
        described.append(f"{c!r} ({frame[c].dtype}, e.g. {value!r})")
        if isinstance(value, str) and THOUSANDS_GROUPS.match(value.strip()):
            hints.append(
                f"{value!r} reads as a number with thousands separators: write the numbers "
                "without them, or read the file with "
                "`titans_seq.data.tables.read_csv_table`, which recognises them"
            )
    if not isinstance(frame.index, pd.DatetimeIndex) and date_column is not None:
        # no timestamps were found: a text column may be the dates under another name
        hints.append(f"a date column is looked for as {date_column!r} or by its values")
    hint = f" ({'; '.join(hints)})" if hints else ""
    raise DataError(f"non-numeric column(s): {', '.join(described)}{hint}")


def _numbers_held_as_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its object columns that hold only numbers (and missing values) made
    numeric: a column that mixes numbers and text in a larger table keeps the object dtype
    in each part of it, including the parts whose values are all numbers."""
    for c in frame.columns:
        column = frame[c]
        if column.dtype != object:
            continue
        present = column.dropna()
        if present.map(lambda v: isinstance(v, (int, float, np.number))).all():
            frame[c] = pd.to_numeric(column)
    return frame


def _first_non_number(column: pd.Series):
    """The first value of `column` that is not a number (its first value when all are)."""
    numbers = pd.to_numeric(column, errors="coerce")
    offending = column[numbers.isna() & column.notna()]
    return offending.iloc[0] if len(offending) else column.iloc[0]


def _handle_missing(frame: pd.DataFrame, policy: str) -> pd.DataFrame:
    values = frame.to_numpy()
    bad = ~np.isfinite(values)
    if not bad.any():
        return frame
    if policy == "error":
        per_column = bad.sum(axis=0)
        described = []
        for j in np.flatnonzero(per_column)[:_SHOW]:
            first = int(np.flatnonzero(bad[:, j])[0])
            described.append(
                f"{frame.columns[j]!r}: {int(per_column[j])} (first at row {first}, "
                f"{frame.index[first]})"
            )
        raise DataError(
            f"{int(bad.sum())} missing or infinite value(s) in {int((per_column > 0).sum())} "
            f"column(s): {'; '.join(described)}; pass missing='ffill' or 'interpolate' to fill"
        )
    # inf is as unusable as NaN: treat both as gaps to fill
    frame = frame.mask(bad)
    empty = frame.columns[frame.isna().all().to_numpy()].tolist()
    if empty:
        raise DataError(f"column(s) without any finite value cannot be filled: {empty[:_SHOW]}")
    if policy == "ffill":
        return frame.ffill().bfill()
    method = "time" if isinstance(frame.index, pd.DatetimeIndex) else "linear"
    return frame.interpolate(method=method, limit_direction="both")


def _target_last(frame: pd.DataFrame, target: str | None) -> pd.DataFrame:
    if target is None:
        return frame
    if target not in frame.columns:
        raise DataError(
            f"target column {target!r} not found; columns: {list(frame.columns)[:10]}"
            + (" ..." if frame.shape[1] > 10 else "")
        )
    order = [c for c in frame.columns if c != target] + [target]
    return frame[order]
