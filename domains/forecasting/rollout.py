"""Forecasts longer than a fitted horizon, shared by the sktime and darts adapters.

A `TitansForecaster` predicts `horizon` rows in one pass. Frameworks ask for any number of
steps, so the forecast is rolled forward: each block's point forecast is appended to the
context (with the covariates' values over those steps) and the next block is predicted from
the last `lookback` rows (recursive multi-step forecasting). Beyond the first block the
quantiles are conditional on that point path, so they understate the spread of far steps;
the docs say so.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from .estimator import TitansForecaster
from .series_input import Series
from .task import quantile_bracket


@dataclasses.dataclass
class Ahead:
    """A series' covariates over the steps to forecast (raw values): hist [steps, Kh] (only
    read when the forecast is rolled past the first block, None if unknown) and futr
    [steps, Kf]."""

    hist: np.ndarray | None
    futr: np.ndarray


def roll_series(
    forecaster: TitansForecaster,
    series: list[Series],
    steps: int,
    ahead: list[Ahead] | None = None,
) -> tuple[np.ndarray, dict[float, np.ndarray] | None]:
    """Point forecasts [S, steps, C] after each series, and with a quantile head
    {level: [S, steps, C]}, levels sorted so that quantiles never cross.

    Each block of `horizon` steps is forecast for all series at once; its point forecast
    (and the covariates `ahead` gives for those steps) is appended to each history for the
    next block.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    H = int(forecaster.horizon)
    kf = series[0].futr.shape[1]
    if ahead is None:
        if kf or (series[0].hist.shape[1] and steps > H):
            raise ValueError(
                "the forecaster reads covariates: give their values over the forecast steps"
            )
        ahead = [Ahead(None, np.zeros((steps, 0))) for _ in series]
    levels = list(forecaster.quantiles or [])
    median = int(np.argmin(np.abs(np.asarray(levels) - 0.5))) if levels else None
    points, quantiles, done = [], [], 0
    while done < steps:
        take = min(H, steps - done)
        horizons = forecaster.horizon_indexes(series)
        futures = [_block(a.futr, done, H) for a in ahead]
        out = forecaster.forecast_series(series, horizons, futures)  # [S, H, C(, Q)]
        point = out[..., median] if median is not None else out
        points.append(point[:, :take])
        if median is not None:
            quantiles.append(out[:, :take])
        done += take
        if done < steps:
            series = [
                _extended(s, point[i], horizons[i], a, done - take, H)
                for i, (s, a) in enumerate(zip(series, ahead, strict=True))
            ]
    point = np.concatenate(points, axis=1)
    if median is None:
        return point, None
    order = np.argsort(levels)
    stacked = np.sort(np.concatenate(quantiles, axis=1)[..., order], axis=-1)
    return point, {float(levels[j]): stacked[..., i] for i, j in enumerate(order)}


def _block(values: np.ndarray, first: int, length: int) -> np.ndarray:
    """Rows [first, first + length) of `values`, the last row repeated past its end (the
    forecasts there are not kept)."""
    block = values[first : first + length]
    if len(block) < length:
        block = np.concatenate([block, np.repeat(block[-1:], length - len(block), axis=0)])
    return block


def _extended(s: Series, point: np.ndarray, horizon: pd.Index, ahead: Ahead, first: int, H: int):
    """The series with one forecast block appended as if observed."""
    if s.hist.shape[1] and ahead.hist is None:
        raise ValueError(
            f"forecasting more than horizon={H} steps reads the historical covariates past "
            "the first block: give their values over the forecast steps too"
        )
    hist = ahead.hist[first : first + H] if s.hist.shape[1] else np.zeros((H, 0))
    return dataclasses.replace(
        s,
        index=s.index.append(horizon),
        target=np.concatenate([s.target, point]),
        hist=np.concatenate([s.hist, hist]),
        futr=np.concatenate([s.futr, ahead.futr[first : first + H]]),
    )


def roll_forward(
    forecaster: TitansForecaster, context: np.ndarray, steps: int
) -> tuple[np.ndarray, dict[float, np.ndarray] | None]:
    """Point forecast [steps, C] after `context` [>= lookback, C] (original units) of a
    forecaster fitted on one series without covariates, and with a quantile head
    {level: [steps, C]}."""
    context = np.asarray(context, dtype=np.float64)
    series = Series.of("series", pd.RangeIndex(len(context)), context)
    point, levels = roll_series(forecaster, [series], steps)
    return point[0], None if levels is None else {q: v[0] for q, v in levels.items()}


def interpolate_quantile(levels: dict[float, np.ndarray], alpha: float) -> np.ndarray:
    """The alpha quantile [steps, C] from fitted levels: exact when fitted, else linear
    between the two nearest levels; outside the fitted range is refused, not extrapolated."""
    known = sorted(levels)
    bracket = quantile_bracket(known, alpha)
    if bracket is None:
        raise ValueError(
            f"quantile level {alpha} lies outside the fitted levels {known}; refit with "
            "quantiles that cover it"
        )
    lower, upper, weight = bracket
    if lower == upper:
        return levels[known[lower]]
    return (1 - weight) * levels[known[lower]] + weight * levels[known[upper]]
