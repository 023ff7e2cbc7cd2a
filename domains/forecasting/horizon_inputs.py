"""What a forecast needs past the history: the horizon's timestamps and future covariates."""

from __future__ import annotations

import numpy as np
import pandas as pd

from titans_seq.data import DataError
from titans_seq.data.frames import infer_frequency
from titans_seq.data.tables import parse_timestamps

from .series_input import ID, TIME, Series, checked_frame, integer_step

_SHOW = 5


def future_index(index: pd.Index, freq: str | None, horizon: int) -> pd.Index:
    """The `horizon` time steps after `index`: timestamps at `freq` (inferred when None),
    else the integer steps that follow, at the index's own step (`integer_step`)."""
    if isinstance(index, pd.DatetimeIndex):
        freq = freq or infer_frequency(index)
        if freq is None:
            raise DataError(
                "the history's timestamps have no regular frequency to continue; give "
                "at least 3 regularly spaced rows"
            )
        return pd.date_range(index[-1], periods=horizon + 1, freq=freq)[1:].rename(
            index.name or "date"
        )
    if not len(index) or not np.issubdtype(index.dtype, np.integer):
        return pd.RangeIndex(0, horizon, name=index.name)
    step = integer_step(index.to_numpy())  # integer steps continue at their own stride
    start = int(index[-1]) + step
    return pd.RangeIndex(start, start + step * horizon, step, name=index.name)


def wide_future_covariates(
    futr_df, names: list[str], index: pd.Index, what: str = "predict"
) -> np.ndarray:
    """[H, Kf] future covariates of a wide series over the horizon `index`, from `futr_df`
    (timestamps as index or a `date` column; without timestamps, exactly H rows)."""
    if futr_df is None:
        raise DataError(
            f"{what}: futr_exog_list names {names}: pass futr_df with their values over the "
            f"{len(index)} forecast steps (from {index[0]})"
        )
    frame = checked_frame(futr_df, "error", f"{what}: futr_df")
    absent = [c for c in names if c not in frame.columns]
    if absent:
        raise DataError(f"{what}: futr_df lacks the future covariate column(s) {absent}")
    if isinstance(index, pd.DatetimeIndex) and isinstance(frame.index, pd.DatetimeIndex):
        return _over_horizon(frame[names], index, f"{what}: futr_df")
    if len(frame) != len(index):
        raise DataError(
            f"{what}: futr_df without timestamps must have exactly {len(index)} rows (one "
            f"per forecast step), got {len(frame)}"
        )
    return frame[names].to_numpy(np.float64)


def long_future_covariates(
    futr_df, names: list[str], series: list[Series], horizons: list[pd.Index]
) -> list[np.ndarray]:
    """Per series, [H, Kf] future covariates over its horizon from a long `futr_df`
    (`unique_id`, `ds` and the futr_exog_list columns)."""
    if futr_df is None:
        raise DataError(
            f"predict: futr_exog_list names {names}: pass futr_df with unique_id, ds and "
            "their values over every series' forecast steps"
        )
    if not isinstance(futr_df, pd.DataFrame) or not {ID, TIME} <= set(futr_df.columns):
        raise DataError(f"predict: futr_df must be a DataFrame with {ID!r} and {TIME!r} columns")
    absent = [c for c in names if c not in futr_df.columns]
    if absent:
        raise DataError(f"predict: futr_df lacks the future covariate column(s) {absent}")
    groups = dict(tuple(futr_df.groupby(futr_df[ID].astype(str), sort=False)))
    result = []
    for one, horizon in zip(series, horizons, strict=True):
        if one.uid not in groups:
            raise DataError(f"predict: futr_df has no rows for series {one.uid!r}")
        group = groups[one.uid]
        stamps = group[TIME]
        if isinstance(horizon, pd.DatetimeIndex):
            try:
                stamps = parse_timestamps(stamps)
            except DataError as error:
                raise DataError(f"predict: futr_df, series {one.uid!r}: {error}") from None
        table = group[names].set_axis(pd.Index(stamps), axis=0)
        if table.index.has_duplicates:
            raise DataError(f"predict: futr_df repeats time steps of series {one.uid!r}")
        result.append(_over_horizon(table, horizon, f"predict: futr_df, series {one.uid!r}"))
    return result


def check_same_timezone(history: pd.Index, other: pd.Index, what: str) -> None:
    """DataError when timestamps given beside a series are in another time zone than the
    series' own (one of them naive): the same instants would not match."""
    if not (isinstance(history, pd.DatetimeIndex) and isinstance(other, pd.DatetimeIndex)):
        return
    ours, theirs = history.tz, other.tz
    if str(ours) != str(theirs):
        raise DataError(
            f"{what}: its timestamps are {_zone(theirs)}, the series' are {_zone(ours)}; give "
            "both in the same time zone (DatetimeIndex.tz_localize / tz_convert)"
        )


def _zone(tz) -> str:
    return "without a time zone" if tz is None else f"in time zone {tz}"


def _over_horizon(table: pd.DataFrame, horizon: pd.Index, what: str) -> np.ndarray:
    """The rows of `table` at each step of `horizon`, refusing absent steps and NaN/inf."""
    check_same_timezone(horizon, table.index, what)
    absent = horizon[~horizon.isin(table.index)]
    if len(absent):
        raise DataError(
            f"{what}: {len(absent)} of the {len(horizon)} forecast steps have no row "
            f"(the first at {absent[0]})"
        )
    values = table.loc[horizon].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    if not np.isfinite(values).all():
        bad = horizon[~np.isfinite(values).all(axis=1)]
        raise DataError(
            f"{what}: future covariates are NaN, infinite or not numbers at "
            f"{len(bad)} step(s) (the first at {bad[0]})"
        )
    return values
