"""darts `TimeSeries` (targets, past and future covariates, static covariates) in the
forecaster's terms: a wide frame for one series, a long frame for many, and the `Series` /
`Ahead` arrays a rolled forecast reads.

Covariate components are renamed `past:<name>` and `future:<name>` so that they can never
collide with the target's component names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .horizon_inputs import future_index
from .rollout import Ahead
from .series_input import ID, TARGET, TIME, Series

PAST, FUTURE = "past:", "future:"


def covariate_names(covariates, prefix: str) -> list[str]:
    """The forecaster's column names for a covariate series' components (none for None)."""
    return [] if covariates is None else [f"{prefix}{c}" for c in covariates.components]


def values_over(covariates, index: pd.Index, what: str) -> np.ndarray:
    """[len(index), K] values of a covariate TimeSeries at the time steps `index`."""
    frame = covariates.to_dataframe(copy=False)
    absent = index[~index.isin(frame.index)]
    if len(absent):
        raise ValueError(
            f"{what} has no values at {len(absent)} of the {len(index)} time steps it must "
            f"cover (the first at {absent[0]})"
        )
    return frame.loc[index].to_numpy(np.float64)


def _covariate_frame(series, past, future, names=None) -> pd.DataFrame:
    """The covariates over the series' time steps, columns named by `names` ((past names,
    future names); default: their own components), matched by position as darts does."""
    index = series.time_index
    parts = {}
    kinds = ((past, PAST, "past_covariates"), (future, FUTURE, "future_covariates"))
    for k, (covariates, prefix, what) in enumerate(kinds):
        if covariates is None:
            continue
        columns = covariate_names(covariates, prefix) if names is None else names[k]
        if covariates.n_components != len(columns):
            raise ValueError(
                f"{what} have {covariates.n_components} components here and {len(columns)} "
                "in the first series; every series needs the same number"
            )
        values = values_over(covariates, index, what)
        for j, name in enumerate(columns):
            parts[name] = values[:, j]
    return pd.DataFrame(parts, index=index)


def wide_frame(series, past, future) -> pd.DataFrame:
    """One (multivariate) series and its covariates over its time steps, as a wide frame."""
    frame = series.to_dataframe(copy=True)
    frame.columns = [str(c) for c in frame.columns]
    covariates = _covariate_frame(series, past, future)
    return pd.concat([frame, covariates], axis=1) if covariates.shape[1] else frame


def long_frames(many, pasts, futures) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Univariate series (ids "0", "1", ...) as a long frame, and their static covariates
    as a static frame (None when the series carry none)."""
    rows, statics = [], []
    names = (covariate_names(pasts[0], PAST), covariate_names(futures[0], FUTURE))
    for i, (series, past, future) in enumerate(zip(many, pasts, futures, strict=True)):
        if series.n_components != 1:
            raise ValueError(
                f"fitting several series needs univariate ones; series {i} has "
                f"{series.n_components} components (fit each multivariate series alone, or "
                "pass its components as separate series)"
            )
        body = _covariate_frame(series, past, future, names)
        body.insert(0, TARGET, series.values(copy=False)[:, 0].astype(np.float64))
        body.insert(0, TIME, series.time_index)
        body.insert(0, ID, str(i))
        rows.append(body.reset_index(drop=True))
        statics.append(static_values(series))
    frame = pd.concat(rows, ignore_index=True)
    if all(s is None for s in statics):
        return frame, None
    if any(s is None for s in statics) or len({tuple(s.index) for s in statics}) != 1:
        raise ValueError("either every series or none must carry the same static covariates")
    table = pd.DataFrame([s.to_numpy() for s in statics], columns=list(statics[0].index))
    table.insert(0, ID, [str(i) for i in range(len(many))])
    return frame, table


def static_values(series) -> pd.Series | None:
    """A univariate series' static covariates as numbers, or None."""
    table = series.static_covariates
    if table is None or table.shape[1] == 0:
        return None
    row = table.iloc[0]
    bad = [c for c in row.index if not pd.api.types.is_number(row[c])]
    if bad:
        raise ValueError(
            f"static covariates {bad} are not numeric; encode them first (darts' "
            "StaticCovariatesTransformer)"
        )
    return row.astype(np.float64).rename(lambda c: str(c))


def history(series, past, future, uid: str, with_static: bool) -> Series:
    """A series to forecast from, with its covariates over its time steps."""
    index = series.time_index
    static = static_values(series) if with_static else None
    return Series.of(
        uid,
        index,
        series.values(copy=False),
        hist=None if past is None else values_over(past, index, "past_covariates"),
        futr=None if future is None else values_over(future, index, "future_covariates"),
        static=None if static is None else static.to_numpy(),
        freq=series.freq_str if isinstance(index, pd.DatetimeIndex) else None,
    )


def ahead(series, past, future, steps: int, horizon: int) -> Ahead:
    """The covariates over the `steps` time steps after `series`: future covariates at
    every step; past covariates at the steps that a rolled forecast appends to the history
    (all but the last block), as darts asks of auto-regressive models."""
    index = _steps_after(series, steps)
    futr = np.zeros((steps, 0))
    if future is not None:
        futr = values_over(future, index, f"future_covariates (over the {steps} forecast steps)")
    hist = None
    if past is not None:
        appended = ((steps - 1) // horizon) * horizon
        hist = np.zeros((steps, past.n_components))
        if appended:
            what = f"past_covariates (over the first {appended} forecast steps, n > horizon)"
            hist[:appended] = values_over(past, index[:appended], what)
    return Ahead(hist, futr)


def _steps_after(series, steps: int) -> pd.Index:
    if isinstance(series.time_index, pd.DatetimeIndex):
        return future_index(series.time_index, series.freq, steps)
    step = series.freq  # a RangeIndex may step by more than 1
    start = series.end_time() + step
    return pd.RangeIndex(start, start + steps * step, step)
