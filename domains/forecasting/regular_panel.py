"""A long frame's regular series read in one pass over the whole frame.

Reading a panel series by series (checking each as a file) costs a few milliseconds of
pandas per series: minutes for 100,000 series. Most series of a real panel are already
clean: finite numbers on timestamps a constant step apart. `split_regular` sorts the
frame once, finds those series with NumPy and hands back their arrays; the others (gaps,
repeats, missing values, irregular or calendar steps, a single or two rows) are left to the
series-by-series reader, which fills, reports or refuses them exactly as before.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from titans_seq.data.frames import infer_frequency

# A constant step shorter than this cannot place three stamps on month, quarter or year
# boundaries, so pandas infers the frequency from the step and the first stamp's weekday
# alone; longer steps have their frequency inferred series by series.
_STEP_INFERRED_BELOW = pd.Timedelta(days=28)


@dataclasses.dataclass
class RegularSeries:
    """The rows of one regular series, time-ordered: index [T] (a DatetimeIndex named
    "date", or integer steps named "ds"), values [T, V] float64 in the order of the
    columns asked for, frequency (None for integer steps)."""

    index: pd.Index
    values: np.ndarray
    freq: str | None


def _numeric(column: pd.Series) -> bool:
    return column.dtype.kind in "fiu"


def split_regular(
    uids: pd.Series, stamps: pd.Series, columns: pd.DataFrame
) -> tuple[dict[str, RegularSeries], dict[str, np.ndarray]]:
    """({uid: its RegularSeries}, {uid: its row positions, ascending}) for the series of a
    long frame: the first holds the series with at least three rows, finite values and
    timestamps (naive datetime64 or integers) a constant positive step apart; the second
    the rest, to be read one by one. A frame whose stamps or values are of another dtype
    (text, time zones, objects, booleans) is read one by one throughout.

    uids: `unique_id` as strings [N]; stamps: `ds` [N]; columns: the value columns [N, V].
    """
    dated = pd.api.types.is_datetime64_dtype(stamps) and getattr(stamps.dt, "tz", None) is None
    integer = pd.api.types.is_integer_dtype(stamps) and stamps.dtype.kind in "iu"
    # factorized as a column: an array of Python strings would cost ~60 bytes a row
    codes, names = pd.factorize(uids, sort=True)
    codes = codes.astype(np.int32 if len(names) < 2**31 else np.int64)
    readable = columns.columns.is_unique and all(_numeric(columns[c]) for c in columns.columns)
    if not (dated or integer) or not readable:
        return {}, _positions_by_series(codes, names)
    times = stamps.to_numpy().view(np.int64) if dated else stamps.to_numpy(np.int64)
    order = np.lexsort((times, codes))  # by series, then time; stable for equal stamps
    times, codes = times[order], codes[order]
    values = columns.to_numpy(dtype=np.float64, na_value=np.nan)[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    regular = _regular(times, values, starts, ends)
    unit = np.datetime_data(stamps.dtype)[0] if dated else None
    frequencies: dict[tuple, str | None] = {}
    fast, slow = {}, {}
    for k, (a, b) in enumerate(zip(starts, ends, strict=True)):
        uid = names[codes[a]]
        if not regular[k]:
            slow[uid] = np.sort(order[a:b])
            continue
        if dated:
            index = pd.DatetimeIndex(times[a:b].view(f"datetime64[{unit}]"), name="date")
            freq = _frequency(index, int(times[a + 1] - times[a]), unit, frequencies)
        else:
            index, freq = pd.Index(times[a:b], name=stamps.name), None
        fast[uid] = RegularSeries(index, values[a:b], freq)
    return fast, slow


def _regular(times: np.ndarray, values: np.ndarray, starts, ends) -> np.ndarray:
    """[S] bool: each series (rows starts[k]:ends[k] of the sorted arrays) has 3+ rows,
    finite values and one positive step between all its stamps."""
    lengths = ends - starts
    first_step = np.zeros(len(starts), dtype=np.int64)
    several = lengths >= 2
    first_step[several] = times[starts[several] + 1] - times[starts[several]]
    off_step = np.r_[0, np.diff(times)] != np.repeat(first_step, lengths)  # [N]
    off_step[starts] = False  # the step into a series' first row comes from another series
    off_step |= ~np.isfinite(values).all(axis=1)
    bad = np.logical_or.reduceat(off_step, starts)
    return ~bad & (lengths >= 3) & (first_step > 0)


def _frequency(index: pd.DatetimeIndex, step: int, unit: str, cache: dict) -> str | None:
    """pandas' inferred frequency of a constant-step index, computed once per (step,
    weekday of the first stamp) for steps below four weeks."""
    if pd.Timedelta(step, unit=unit) >= _STEP_INFERRED_BELOW:
        return infer_frequency(index)
    key = (step, index[0].weekday())
    if key not in cache:
        cache[key] = infer_frequency(index)
    return cache[key]


def _positions_by_series(codes: np.ndarray, names) -> dict[str, np.ndarray]:
    """{uid: the ascending row positions of its rows}."""
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1], True])
    pairs = zip(bounds[:-1], bounds[1:], strict=True)
    return {names[codes[order[a]]]: order[a:b] for a, b in pairs}
