"""Forecasts longer than a fitted horizon, shared by the sktime and darts adapters.

A `TitansForecaster` predicts `horizon` rows in one pass. Frameworks ask for any number of
steps, so the forecast is rolled forward: each block's point forecast is appended to the
context and the next block is predicted from the last `lookback` rows (recursive
multi-step forecasting). Beyond the first block the quantiles are conditional on that
point path, so they understate the spread of far steps; the docs say so.
"""

from __future__ import annotations

import numpy as np

from .estimator import TitansForecaster


def roll_forward(
    forecaster: TitansForecaster, context: np.ndarray, steps: int
) -> tuple[np.ndarray, dict[float, np.ndarray] | None]:
    """Point forecast [steps, C] after `context` [>= lookback, C] (original units), and with
    a quantile head {level: [steps, C]}, levels sorted so that quantiles never cross."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    context = np.asarray(context, dtype=np.float64)
    points, quantiles = [], []
    while sum(len(p) for p in points) < steps:
        window = context[-forecaster.lookback :]
        if forecaster.quantiles:
            # one pass: the point forecast is the level nearest the median, as in predict
            levels = forecaster.predict_quantiles(window)
            quantiles.append(np.stack([levels[q] for q in forecaster.quantiles], -1))
            point = levels[min(forecaster.quantiles, key=lambda q: abs(q - 0.5))]
        else:
            point = forecaster.predict(window)
        point = np.asarray(point, dtype=np.float64)  # [H, C]
        points.append(point)
        context = np.concatenate([context, point])
    point = np.concatenate(points)[:steps]
    if not quantiles:
        return point, None
    order = np.argsort(forecaster.quantiles)
    levels = [float(forecaster.quantiles[i]) for i in order]
    stacked = np.sort(np.concatenate(quantiles)[:steps][..., order], axis=-1)
    return point, {q: stacked[..., i] for i, q in enumerate(levels)}


def interpolate_quantile(levels: dict[float, np.ndarray], alpha: float) -> np.ndarray:
    """The alpha quantile [steps, C] from fitted levels: exact when fitted, else linear
    between the two nearest levels; outside the fitted range is refused, not extrapolated."""
    known = sorted(levels)
    for q in known:  # 1 - 0.95 is 0.04999...: a fitted level within rounding is that level
        if abs(q - alpha) < 1e-9:
            return levels[q]
    if not known[0] < alpha < known[-1]:
        raise ValueError(
            f"quantile level {alpha} lies outside the fitted levels {known}; refit with "
            "quantiles that cover it"
        )
    upper = next(q for q in known if q > alpha)
    lower = max(q for q in known if q < alpha)
    weight = (alpha - lower) / (upper - lower)
    return (1 - weight) * levels[lower] + weight * levels[upper]
